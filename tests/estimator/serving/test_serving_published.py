"""The published-serving check (benchmarks/serving_sim_published.py): every quoted point is well formed,
names its source, and is predicted (none dropped on the way to the report)."""

from __future__ import annotations

import tomllib
from types import ModuleType

import pytest

from benchmark_script import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("serving_sim_published")


def test_every_point_names_a_source_with_its_setup_and_quotes_known_metrics(bench: ModuleType) -> None:
    data = tomllib.loads(bench.DATA.read_text(encoding="utf-8"))
    sources = {s["id"]: s for s in data["source"]}
    assert len(sources) >= 2
    for source in sources.values():
        assert source["url"].startswith("https://") and source["setup"] and source["title"]
    used = set()
    for point in data["point"]:
        assert point["source"] in sources
        used.add(point["source"])
        assert point["kind"] in ("poisson", "burst", "concurrency")
        quoted = [k for k in point if k.endswith("_s") and k != "rate_per_s"]
        assert quoted and set(quoted) <= set(bench.METRICS), point["name"]
        assert all(point[k] > 0 for k in quoted)
    assert used == set(sources)


def test_every_quoted_metric_is_predicted_and_its_error_is_relative_to_the_measurement(bench: ModuleType) -> None:
    data = tomllib.loads(bench.DATA.read_text(encoding="utf-8"))
    quoted = sum(1 for p in data["point"] for k in p if k in bench.METRICS)
    found, _, _ = bench.rows()
    assert len(found) == quoted
    assert all(r.predicted > 0 for r in found)
    row = bench.Row("s", "p", "ttft_p50_s", measured=0.2, predicted=0.25)
    assert row.error == pytest.approx(0.25)
