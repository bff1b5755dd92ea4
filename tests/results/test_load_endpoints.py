"""compare on load results: the server behind the URL is the candidate, the route and workload are fixed."""

from __future__ import annotations

import pytest

from gpuscout.results.compare import compare_results
from gpuscout.results.fairness import UnfairComparisonError, endpoint_parts
from gpuscout.results.schema import BenchResult
from report.samples import load_demo


def load_at(url: str, **job: object) -> BenchResult:
    result = load_demo()[0]
    return result.model_copy(update={"job": {"url": url, "model": "llama-3-8b-instruct", "endpoint": "chat",
                                             "stream": True} | job, "name": f"load @ {url}"})


def test_two_servers_on_the_same_route_are_a_fair_comparison_with_the_server_listed() -> None:
    a = load_at("http://10.0.0.1:8000/v1/chat/completions")
    b = load_at("https://gpu-b.example.com/v1/chat/completions")
    c = compare_results([a, b])
    assert c.fairness.fair and not c.fairness.differences
    endpoint = next(d for d in c.fairness.machine_differences if d.field == "endpoint")
    assert endpoint.values == ("http://10.0.0.1:8000", "https://gpu-b.example.com:443")
    assert [m.gpu for m in c.machines] == ["http://10.0.0.1:8000", "https://gpu-b.example.com:443"]
    assert c.machines[1].details["endpoint"] == "https://gpu-b.example.com:443"


def test_a_different_route_model_or_workload_still_blocks_the_verdict() -> None:
    a = load_at("http://10.0.0.1:8000/v1/chat/completions")
    with pytest.raises(UnfairComparisonError, match=r"job\.route: /v1/chat/completions vs /v1/completions"):
        compare_results([a, load_at("http://10.0.0.2:8000/v1/completions")])
    with pytest.raises(UnfairComparisonError, match=r"job\.model"):
        compare_results([a, load_at("http://10.0.0.2:8000/v1/chat/completions", model="qwen3-8b")])
    other = load_at("http://10.0.0.2:8000/v1/chat/completions")
    other = other.model_copy(update={"fixed": other.fixed.model_copy(update={"data_hash": "cd" * 32})})
    with pytest.raises(UnfairComparisonError, match="data"):
        compare_results([a, other])
    tokenizer = other.fixed.model_copy(update={"data_hash": a.fixed.data_hash,
                                               "settings": {**a.fixed.settings, "tokenizer": "other"}})
    with pytest.raises(UnfairComparisonError, match=r"settings\.tokenizer"):
        compare_results([a, other.model_copy(update={"fixed": tokenizer})])


def test_the_server_is_normalised_and_the_query_belongs_to_the_route() -> None:
    assert endpoint_parts("http://Host.Example/v1?x=1") == ("http://host.example:80", "/v1?x=1")
    assert endpoint_parts("http://[::1]:8000") == ("http://[::1]:8000", "/")
    assert endpoint_parts("https://h:443/a") == endpoint_parts("https://h/a")
