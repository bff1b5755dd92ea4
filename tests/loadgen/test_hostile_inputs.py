"""Hostile input contained: numbers bounded before use, control characters shown not obeyed, secrets scrubbed
from every URL and a key sent only to its host, large files streamed, waits bounded.

Real inputs throughout: the fake OpenAI server (fake_openai.py) serving a hostile /metrics page or lying image
counts, a socket that accepts and never answers, real files built in tmp_path, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeConfig, serve_in_thread
from rich.console import Console

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.loadgen.client import request_url
from gpuscout.loadgen.plan import make_plan
from gpuscout.loadgen.probe import probe
from gpuscout.loadgen.probe_case import network_case
from gpuscout.loadgen.server_metrics import MAX_COUNT
from gpuscout.loadgen.session import workload_path
from gpuscout.loadgen.sse import read_usage
from gpuscout.loadgen.trace import read_trace
from gpuscout.loadgen.workload import MAX_WORKLOAD_TOKENS, dataset_workload
from gpuscout.redact import redact_url
from gpuscout.report.escape import printable
from gpuscout.report.load import load_screen
from gpuscout.results.store import load_result

ROOT = Path(__file__).parent.parent.parent
KEY = "sk-hostile-inputs-0123456789"
ESC = "\x1b]0;owned\x07\x1b[2J\u202e"


def gpuscout(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"COLUMNS": "120", "PATH": "/usr/bin:/bin", "MY_KEY": KEY}  # + this checkout's src (tests/conftest.py)
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


def vllm_page(**values: str) -> str:
    lines = ['vllm:num_requests_running{model_name="m"} 1', 'vllm:num_requests_waiting{model_name="m"} 0',
             'vllm:kv_cache_usage_perc{model_name="m"} 0.5', 'vllm:generation_tokens_total{model_name="m"} 10']
    return "\n".join(lines + [f"{k} {v}" for k, v in values.items()]) + "\n"


# ------------------------------------------------------------------------- numbers from a server

@pytest.mark.parametrize(("page", "named"), [
    # two label sets of 1e308 sum to inf
    ('vllm:generation_tokens_total{engine="0"} 1e308\nvllm:generation_tokens_total{engine="1"} 1e308\n'
     'vllm:num_requests_running 1\n', "vllm:generation_tokens_total is inf"),
    (vllm_page().replace("waiting{model_name=\"m\"} 0", "waiting{model_name=\"m\"} 1e35"),
     "vllm:num_requests_waiting is 1e+35"),
    (vllm_page().replace("running{model_name=\"m\"} 1", "running{model_name=\"m\"} -3"),
     "vllm:num_requests_running is -3"),
    (vllm_page().replace("perc{model_name=\"m\"} 0.5", "perc{model_name=\"m\"} 7"), "vllm:kv_cache_usage_perc is 7"),
])
def test_a_hostile_metrics_page_is_refused_and_the_run_is_kept(tmp_path: Path, page: str, named: str) -> None:
    """The whole CLI path: the run ends with exit 0, the result is written and stored, and it reads back."""
    out, store = tmp_path / "r.json", tmp_path / "store.sqlite"
    with serve_in_thread(FakeConfig(metrics_page=page)) as srv:
        done = gpuscout("load", srv.url, "-m", "m", "--concurrency", "2", "--requests", "6", "--runs", "1",
                        "--output-tokens", "4", "--metrics-url", f"{srv.url}/metrics", "-o", str(out),
                        "--store", str(store))
        assert srv.scrapes >= 1
    assert done.returncode == 0, done.stderr
    result = load_result(out)  # valid: nothing past the result's ±1e30 reached it
    case = result.cases[0]
    assert not [m for m in case.metrics if m.name.startswith("server_")]
    note = next(n for n in case.notes if n.startswith("server metrics not read"))
    assert named in note and "outside the range a server reports: 0, or" in note
    assert "none of its pages are kept" in note
    assert "recorded in the results store as run 1" in done.stderr
    listed = gpuscout("results", "list", "--store", str(store), "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["runs"]) == 1
    assert gpuscout("compare", str(out), str(out), "--format", "json").returncode == 0


def test_an_honest_page_at_the_bounds_is_kept(tmp_path: Path) -> None:
    page = vllm_page().replace('generation_tokens_total{model_name="m"} 10',
                               f'generation_tokens_total{{model_name="m"}} {MAX_COUNT:g}')
    with serve_in_thread(FakeConfig(metrics_page=page)) as srv:
        report = api.load(make_plan(url=srv.url, model="m", runs=1, concurrency=1, requests=4, output_tokens=4,
                                    metrics_url=f"{srv.url}/metrics"))
    names = {m.name: m for m in report.result.cases[0].metrics}
    assert names["server_kv_cache_usage"].value == 0.5 and names["server_generation_tokens"].value == 0


def test_the_api_key_goes_to_metrics_only_on_the_endpoints_own_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    with serve_in_thread(FakeConfig()) as endpoint, serve_in_thread(FakeConfig()) as elsewhere:
        for metrics in (elsewhere, endpoint):
            api.load(make_plan(url=endpoint.url, model="m", runs=1, concurrency=1, requests=2, output_tokens=4,
                               api_key_env="MY_KEY", metrics_url=f"{metrics.url}/metrics"))
        assert elsewhere.scrapes >= 2 and set(elsewhere.scrape_auth) == {None}
        assert endpoint.scrapes >= 2 and set(endpoint.scrape_auth) == {f"Bearer {KEY}"}
        assert {s["authorization"] for s in endpoint.seen} == {f"Bearer {KEY}"}


def test_an_image_answer_with_more_images_than_asked_is_not_counted() -> None:
    with serve_in_thread(FakeConfig(images_returned=50)) as srv:
        report = api.load(make_plan(url=srv.url, model="m", endpoint="images", runs=1, concurrency=1, requests=3))
    case = report.result.cases[0]
    metrics = {m.name: m for m in case.metrics}
    assert metrics["errors_malformed_response"].value == 3 and metrics["images_per_s"].value == 0
    assert any(n.startswith("invalid:") for n in case.notes)


@pytest.mark.parametrize("count", [10**400, 1e300, 2**60])
def test_a_usage_count_past_any_request_makes_the_run_invalid_and_the_result_valid(tmp_path: Path,
                                                                                   count: float) -> None:
    assert read_usage({"prompt_tokens": count}).impossible.startswith("usage.prompt_tokens is ")
    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig(usage_completion=count)) as srv:
        api.load(make_plan(url=srv.url, model="m", runs=1, concurrency=1, requests=3, output_tokens=4), output=out)
    case = load_result(out).cases[0]
    assert any("(2^53) a count may be" in n and n.startswith("invalid:")
               for n in case.notes)


# ------------------------------------------------------------------------- numbers from options

@pytest.mark.parametrize(("options", "message"), [
    ({"prompt_tokens": 10**9}, "less than or equal to 10000000"),
    ({"output_tokens": 10**11}, "less than or equal to 1000000"),
    ({"prompt_spread": 10**9, "prompt_dist": "uniform"}, "less than or equal to 10000000"),
    ({"prompt_tokens": 1_000_000, "requests": 1000}, f"more than the {MAX_WORKLOAD_TOKENS:,} a workload may hold"),
])
def test_prompt_and_output_lengths_are_bounded_before_anything_is_built(options: dict[str, int],
                                                                         message: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as caught:
            make_plan(url="http://127.0.0.1:9", model="m", **options)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message in caught.value.render()
    assert peak < 16 << 20  # refused from the numbers, not after building gigabytes of prompts


def test_a_prompt_length_past_the_bound_is_a_clear_cli_error() -> None:
    done = gpuscout("load", "http://127.0.0.1:9", "-m", "m", "--prompt-tokens", "1000000000")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "10000000" in done.stderr


# ------------------------------------------------------------------------- control characters

def test_control_characters_from_outside_are_shown_not_obeyed(tmp_path: Path) -> None:
    """A /metrics error body, a result's names and notes: escaped on the screen, in compare, results and report."""
    out, store = tmp_path / "r.json", tmp_path / "store.sqlite"
    with serve_in_thread(FakeConfig(metrics_status=500, metrics_page=f"boom {ESC} [/bogus] [red]x")) as srv:
        done = gpuscout("load", srv.url, "-m", "m", "--concurrency", "1", "--requests", "4", "--runs", "1",
                        "--output-tokens", "4", "--metrics-url", f"{srv.url}/metrics", "-o", str(out),
                        "--store", str(store))
    assert done.returncode == 0, done.stderr
    screen = "".join(done.stdout.split())  # the note may wrap anywhere
    assert "\x1b" not in done.stdout + done.stderr and "\\x1b]0;owned" in screen
    assert "\\u202e" in screen and "[/bogus][red]x" in screen, done.stdout
    data = json.loads(out.read_text())
    data["name"] = f"evil {ESC} name [/x]"
    data["cases"][0]["name"] = f"case {ESC}"
    data["fixed"]["model"] = f"model {ESC}"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    for args in (("compare", str(hostile), str(out)), ("compare", str(hostile), str(out), "--format", "md"),
                 ("results", "list", "--store", str(store)), ("results", "show", "1", "--store", str(store))):
        shown = gpuscout(*args)
        assert shown.returncode in (0, 1), shown.stderr
        assert "\x1b" not in shown.stdout + shown.stderr and "Traceback" not in shown.stderr, args
    page = tmp_path / "report.html"
    reported = gpuscout("report", str(hostile), str(out), "-o", str(page))
    assert reported.returncode == 0, reported.stderr
    html = page.read_text()
    assert "\x1b" not in html and "\\x1b]0;owned" in html


def test_printable_escapes_controls_and_keeps_layout() -> None:
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("\x1b[2J\x07\x9b\u2066\u2028é中") == "\\x1b[2J\\x07\\x9b\\u2066\\u2028é中"


# ------------------------------------------------------------------------- secrets in URLs

def test_secrets_in_any_url_the_user_gives_are_scrubbed(tmp_path: Path) -> None:
    assert redact_url("http://h/v1#access_token=abc") == "http://h/v1#access_token=***"
    assert redact_url(f"http://h/v1?k={KEY}&mode=fast") == "http://h/v1?k=***&mode=fast"
    assert redact_url(f"http://h/v1?{KEY}") == "http://h/v1?***"
    assert redact_url("http://h/v1?model=Meta-Llama-3.1-8B-Instruct") == "http://h/v1?model=Meta-Llama-3.1-8B-Instruct"
    spec = tmp_path / "job.toml"
    spec.write_text('kind = "inference"\nmodel = "llama-3.1-8b"\nprompt_tokens = 64\noutput_tokens = 8\n'
                    'requests = 1000\n')
    url = f"https://admin:hunter2pw@bucket.s3.us-east-1.amazonaws.com/data?X-Amz-Signature=sig0123&key={KEY}"
    for fmt in ((), ("--json",)):
        picked = gpuscout("pick", str(spec), "--dataset-gb", "10", "--dataset-url", url, "--no-store", *fmt)
        assert picked.returncode == 0, picked.stderr
        for secret in ("hunter2pw", "sig0123", KEY):
            assert secret not in picked.stdout + picked.stderr
    with serve_in_thread(FakeConfig()) as srv:
        for query in (f"?k={KEY}", f"#token={KEY}", f"?{KEY}"):
            probed = gpuscout("probe", f"{srv.url}/v1/models{query}", "--repeats", "2")
            assert probed.returncode == 0, probed.stderr
            assert KEY not in probed.stdout + probed.stderr and "***" in probed.stdout


# ------------------------------------------------------------------------- URLs

def test_a_non_ascii_url_is_sent_in_ascii(tmp_path: Path) -> None:
    assert request_url("http://bücher.example/v1", "chat") == "http://xn--bcher-kva.example/v1/chat/completions"
    with serve_in_thread(FakeConfig()) as srv:
        report = api.load(make_plan(url=f"{srv.url}/v1?tag=ünï", model="m", runs=1, concurrency=1, requests=2,
                                    output_tokens=4))
        assert srv.seen[0]["target"] == "/v1/chat/completions?tag=%C3%BCn%C3%AF"
    assert report.result.cases[0].metrics
    done = gpuscout("load", "http://bücher.invalid:9/v1", "-m", "m", "--requests", "1", "--runs", "1")
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------------- large files

def test_a_large_dataset_is_streamed_and_sampled(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = json.dumps({"prompt": "word " * 40, "meta": "x" * 200}) + "\n"
    with path.open("w") as handle:
        for i in range(60_000):  # ~17 MB
            handle.write(line.replace("word", f"w{i}", 1))
    tracemalloc.start()
    try:
        sampled = dataset_workload(path, n=None, at_most=100, output_tokens=8, tokenizer_path=None, seed=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(sampled.prompts) == 100 and "sampled from the 60,000 of" in sampled.description
    assert peak < path.stat().st_size / 4  # the file was never held whole
    assert sampled == dataset_workload(path, n=None, at_most=100, output_tokens=8, tokenizer_path=None, seed=3)
    firsts = {p.text.split()[0] for p in sampled.prompts}
    assert len(firsts) == 100 and max(int(w[1:]) for w in firsts) > 30_000  # drawn from the whole file
    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig()) as srv:
        api.load(make_plan(url=srv.url, model="m", runs=1, concurrency=4, requests=20, output_tokens=4, dataset=path),
                 output=out)
    assert workload_path(out).stat().st_size < 200_000


def test_a_trace_too_long_is_refused_before_its_prompts_are_built(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    row = '{"timestamp": %d, "input_length": 4, "output_length": 2, "hash_ids": [1]}\n'
    path.write_text("".join(row % i for i in range(100_001)))
    with pytest.raises(SpecError) as caught:
        read_trace(path)
    assert "more than 100,000 requests" in caught.value.what and "--requests" in caught.value.fix
    assert len(read_trace(path, limit=10)) == 10
    late = tmp_path / "late.jsonl"
    late.write_text(row % 0 + row % (10**15))
    with pytest.raises(SpecError) as caught:
        read_trace(late)
    assert "line 2" in caught.value.what and "(7 days)" in caught.value.what


# ------------------------------------------------------------------------- waits

@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A port that accepts connections and never answers a byte; yields its URL and the connections."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    listener.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/models", accepted
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_url_that_never_answers_costs_one_timeout(silent_server: tuple[str, list[socket.socket]]) -> None:
    import asyncio

    url, accepted = silent_server
    result = asyncio.run(probe(url, repeats=5, download_url=url, timeout_s=0.3))
    measures = {m.name: m for m in result.measures}
    assert len(measures["tcp_connect_s"].samples) == 5
    assert measures["http_fresh_s"].errors[0] == "TimeoutError: no answer within 0.3 s"
    for name in ("http_keepalive_s", "download_bytes_per_s", "reconnect_s"):
        assert measures[name].errors[0].startswith("skipped: an earlier attempt had no answer within 0.3 s")
    assert len(accepted) == 5 + 1  # the tcp connects and one HTTP attempt: nothing was asked again
    case = network_case(url, repeats=5, timeout_s=0.3)
    assert any("no answer within 0.3 s" in n for n in case.notes)


# ------------------------------------------------------------------------- the load table

def test_ok_over_sent_counts_every_run(tmp_path: Path) -> None:
    with serve_in_thread(FakeConfig()) as srv:
        report = api.load(make_plan(url=srv.url, model="m", runs=3, concurrency=2, requests=5, output_tokens=4))
    console = Console(record=True, width=120)
    console.print(load_screen(report.result, output=None, costs=(), search=None))
    assert "15/15" in console.export_text()
