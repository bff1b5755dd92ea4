"""A server that misbehaves must never crash, hang or fool `gpuscout load`; each fault found by hostile testing.

Against the fake server (fake_openai.py, its hostile FAULT= markers and lying-count options): odd JSON
shapes are survived, sizes and times are bounded, the server's token counts are cross-checked, credentials
never reach a result or a message, plans that cannot run are refused before anything is sent, an interrupt
keeps what finished, and `probe` turns malformed replies into per-measurement errors.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeConfig, serve_in_thread
from test_client import assert_valid

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.loadgen.client import LoadRun, default_timeout_s, endpoint_url, run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.plan import make_plan
from gpuscout.loadgen.probe import probe
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.session import run_plan, workload_path
from gpuscout.loadgen.sse import LineSplitter, OversizeLineError, parse_object, read_usage
from gpuscout.loadgen.workload import Prompt, Workload
from gpuscout.report.probe import probe_table
from gpuscout.results.schema import BenchResult, Case
from gpuscout.results.store import load_result

TOKENS = 8
KEY = "sk-hostile-key-31415926"
PASSWORD = "hunter2-hostile-pw"
QUERY_KEY = "qk-hostile-27182818"

FakeFactory = Callable[..., AbstractContextManager[Any]]
# A first token this late makes a level of 24 requests, 4 at a time, last 6 × 5 ms: several ticks of the
# client's 10 ms loop-lag timer, so its saturation check runs (a shorter level is "not measured", not valid).
LAST_TICKS_S = 0.005


def workload(texts: list[str], output_tokens: int = TOKENS) -> Workload:
    return Workload(prompts=tuple(Prompt(text=t, prompt_tokens=4, output_tokens=output_tokens) for t in texts),
                    source="synthetic", seed=0, tokenizer=None, description="hostile test prompts")


def kinds(run: LoadRun) -> list[str | None]:
    return [r.error.split(":")[0] if r.error else None for r in run.records if not r.warmup]


def notes(case: Case) -> str:
    return " | ".join(case.notes)


def metric(case: Case, name: str) -> Any:
    return {m.name: m for m in case.metrics}[name]


def dataset(tmp_path: Path, texts: list[str]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return path


# ------------------------------------------------------------------------- parsing any JSON shape

@pytest.mark.parametrize("obj", [
    {"choices": [{"delta": "tok"}]}, {"choices": [{"delta": ["tok"]}]}, {"choices": [{"delta": 5}]},
    {"choices": [{"delta": None}]}, {"choices": [{"delta": {"content": ["x"]}}]}, {"choices": "x"},
    {"choices": [None]}, {"choices": [{"message": "tok"}]}, [1, 2], "tok", 3, None, True, {"error": []},
    {"error": {"message": "boom"}}, {"usage": "x"}])
def test_parse_object_takes_any_json_shape(obj: Any) -> None:
    for chat in (True, False):
        for delta in (True, False):
            event = parse_object(obj, chat=chat, delta=delta)
            assert event.text is None  # none of these is OpenAI's shape of content
    assert parse_object({"error": {"message": "boom"}}, chat=True, delta=True).error == "boom"


def test_a_string_delta_or_message_loses_nothing(tmp_path: Path) -> None:
    """One odd chunk used to raise AttributeError and lose the whole run, result file included."""
    texts = ["fine 0", "FAULT=string_delta 1", "fine 2", "fine 3"]
    for stream in (True, False):
        out = tmp_path / f"stream-{stream}.json"
        with serve_in_thread(FakeConfig()) as srv:
            report = api.load(make_plan(url=srv.url, model="m", runs=1, concurrency=2, requests=4, stream=stream,
                                        output_tokens=TOKENS, dataset=dataset(tmp_path, texts)), output=out)
        result = load_result(out)
        assert result.complete and report.stopped_by is None
        ok = metric(result.cases[0], "ttft_s").summary.n
        # streamed: the string delta is skipped, the rest of that stream counts; non-streamed: that reply has no
        # content, and is counted as an `empty` error
        assert ok == (4 if stream else 3)
        if not stream:
            assert metric(result.cases[0], "errors_empty").value == 1


# ------------------------------------------------------------------------- bounded size and time

def test_an_endless_500_body_is_http_500_promptly(fake_server: FakeFactory) -> None:
    with fake_server() as srv:
        start = time.perf_counter()
        run = run_load_sync(srv.url, "m", workload(["FAULT=endless500 a", "fine b"]),
                            LoadShape(kind="concurrency", concurrency=2, requests=2), timeout_s=20)
        elapsed = time.perf_counter() - start
    assert kinds(run) == ["http_500", None]
    # Held to the request timeout, not to a budget: a client that reads the endless body waits all of it.
    assert elapsed < 20, f"an endless error body held the run {elapsed:.1f} s, its whole 20 s timeout"
    assert len(run.records[0].error or "") < 300


def test_one_huge_sse_line_fails_that_request_only(fake_server: FakeFactory) -> None:
    with fake_server() as srv:
        run = run_load_sync(srv.url, "m", workload(["FAULT=hugeline a", "fine b", "fine c"]),
                            LoadShape(kind="concurrency", concurrency=3, requests=3), timeout_s=20)
    assert kinds(run) == ["oversize_line", None, None]


def _assembly_cpu_s(size: int) -> float:
    """This thread's CPU time to assemble one `size`-byte line from 16-byte reads (the best of three: CPU
    time, not wall time, so other processes on a busy machine do not count)."""
    best = math.inf
    for _ in range(3):
        splitter = LineSplitter(cap=2 << 20)
        piece = b"x" * 16
        start = time.thread_time()
        for _ in range(size // 16):
            assert splitter.feed(piece) == []
        assert splitter.feed(b"y\nnext\npart") == [b"x" * size + b"y", b"next"]
        best = min(best, time.thread_time() - start)
    return best


def test_line_assembly_is_linear_and_capped() -> None:
    """A 1 MiB line in 16-byte reads: re-joining pending + data per read copied 32 GB; now ~0.1 s.

    Held to the same assembly of a line 16 times shorter, timed in the same test: linear work takes ~16
    times as long, quadratic ~256 times; the bound sits between the two (geometric middle, 64)."""
    small, large = _assembly_cpu_s(64 << 10), _assembly_cpu_s(1 << 20)
    assert large < 64 * small, f"1 MiB took {large:.3f} s of CPU, 64 KiB {small:.4f} s: {large / small:.0f}×"
    small = LineSplitter(cap=64)
    assert small.feed(b"a" * 64 + b"\n") == [b"a" * 64]
    with pytest.raises(OversizeLineError):
        small.feed(b"b" * 40)
        small.feed(b"b" * 40)
    with pytest.raises(OversizeLineError):
        LineSplitter(cap=64).feed(b"c" * 200 + b"\n")


def test_duration_cancels_requests_still_in_flight(fake_server: FakeFactory) -> None:
    """A server that hangs after its headers kept a `--duration 1s` run going for the whole timeout."""
    for shape in (LoadShape(kind="concurrency", concurrency=3, duration_s=1.0),
                  LoadShape(kind="constant", rate_rps=4, duration_s=1.0)):
        with fake_server() as srv:
            start = time.perf_counter()
            run = run_load_sync(srv.url, "m", workload(["FAULT=headers_then_hang x"]), shape, timeout_s=15)
            elapsed = time.perf_counter() - start
        # Held to the request timeout, not to a budget: without the cancel each request waits all of it.
        assert elapsed < 15, f"{shape.kind}: {elapsed:.1f} s for a 1 s level, its requests' whole timeout"
        assert all(r.sent_s <= 1.0 for r in run.records)  # nothing sent after the level's duration
        assert set(kinds(run)) == {"cancelled_at_deadline"}
        case = summarize_load(run, slo=None)
        assert metric(case, "cancelled_at_deadline").value == len(kinds(run)) >= 3
        assert metric(case, "error_rate").value == 0  # never finished: not errors either
        assert "ttft_s" not in {m.name for m in case.metrics}


def test_duration_run_against_an_honest_server_stays_valid(fake_server: FakeFactory) -> None:
    with fake_server(ttft_s=0.002, token_delay_s=0.002) as srv:
        run = run_load_sync(srv.url, "m", workload([f"p{i}" for i in range(8)]),
                            LoadShape(kind="concurrency", concurrency=4, duration_s=1.0))
    case = summarize_load(run, slo=None)
    assert_valid(case)
    assert set(kinds(run)) <= {None, "cancelled_at_deadline"}
    # The level stopped at its duration on its own clock: nothing was sent after it, whatever the machine's load
    # (the run's wall time also holds the answers in flight then, which a busy machine stretches).
    assert run.records and all(r.sent_s <= 1.0 for r in run.records)
    assert any(r.error is None for r in run.records)


def test_default_timeout_scales_with_output_and_a_stall_ends_as_timeout(fake_server: FakeFactory) -> None:
    plan = make_plan(url="http://h", model="m", output_tokens=256)
    assert plan.timeout_s is None and plan.request_timeout_s == default_timeout_s(256) == 30 + 0.5 * 256
    assert make_plan(url="http://h", model="m", timeout_s=5).request_timeout_s == 5
    with fake_server() as srv:
        run = run_load_sync(srv.url, "m", workload(["FAULT=stall a", "fine b"]),
                            LoadShape(kind="concurrency", concurrency=2, requests=2), timeout_s=0.5)
        default = run_load_sync(srv.url, "m", workload(["fine"]), LoadShape(kind="concurrency", concurrency=1,
                                                                            requests=1))
    assert kinds(run) == ["timeout", None]
    assert default.timeout_s == default_timeout_s(TOKENS)


@pytest.mark.parametrize(("options", "message"), [
    ({"rate": 1e9, "duration_s": 1000}, "at most 100,000"),
    ({"rate": 200, "duration_s": 1000, "sweep": (1, 500)}, "at most 100,000"),
    ({"requests": 10**9}, "less than or equal"),
    ({"concurrency": 10**9}, "less than or equal"),
    ({"timeout_s": math.nan}, "finite"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"percentile": 150}, "less than 100"),
    ({"sweep": (1, math.nan)}, "finite"),
    ({"sweep": (1, 1e9)}, "from 1 to 4096"),
])
def test_plans_that_cannot_run_are_refused_before_anything_is_sent(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        make_plan(url="http://127.0.0.1:9", model="m", **options)


# ------------------------------------------------------------------------- the server's numbers

@pytest.mark.parametrize(("config", "reason"), [
    ({"usage_completion": -1471}, "negative"),
    ({"usage_completion": 1.3e11}, "max_tokens"),
    ({"usage_completion": 10**11}, "max_tokens"),
    ({"usage_completion": 0}, "content chunks"),
    ({"usage_completion": math.nan}, "not a whole number"),
    ({"usage_completion": 7.5}, "not a whole number"),
    ({"usage_completion": 1500}, "characters of content"),  # 64 characters; under 100 × max_tokens
    ({"stop_after": 3}, "far fewer tokens than pinned"),
])
def test_impossible_counts_make_the_run_invalid(fake_server: FakeFactory, config: dict[str, Any],
                                                reason: str) -> None:
    texts = [f"p{i}" for i in range(24)]
    with fake_server(**config) as srv:
        run = run_load_sync(srv.url, "m", workload(texts, output_tokens=16),
                            LoadShape(kind="concurrency", concurrency=4, requests=24))
    case = summarize_load(run, slo=None)
    assert "valid" not in case.notes and reason in notes(case), notes(case)
    tps = metric(case, "output_tokens_per_s").value
    assert math.isfinite(tps) and tps >= 0  # never -1,471 or 1.3e11 tokens/s


def test_a_count_that_is_not_a_number_is_ignored_and_noted(fake_server: FakeFactory) -> None:
    with fake_server(usage_completion="16", ttft_s=LAST_TICKS_S) as srv:
        run = run_load_sync(srv.url, "m", workload([f"p{i}" for i in range(24)], output_tokens=16),
                            LoadShape(kind="concurrency", concurrency=4, requests=24))
    case = summarize_load(run, slo=None)
    assert "valid" in case.notes and "usage was ignored" in notes(case), notes(case)
    assert all(r.output_tokens_server is None for r in run.records)


def test_honest_counts_stay_valid(fake_server: FakeFactory) -> None:
    for config in ({}, {"tokens_per_chunk": 3}, {"reject_extras": True}):
        with fake_server(ttft_s=LAST_TICKS_S, **config) as srv:  # the warm-up takes a refusing server's 400s
            run = run_load_sync(srv.url, "m", workload([f"p{i}" for i in range(24)], output_tokens=16),
                                LoadShape(kind="concurrency", concurrency=4, requests=24, warmup_requests=4))
        assert_valid(summarize_load(run, slo=None), config)
        assert not any(r.count_issue for r in run.records)


def test_read_usage_keeps_only_whole_non_negative_counts() -> None:
    assert read_usage({"completion_tokens": 16, "prompt_tokens": 4}).completion == 16
    assert read_usage({"completion_tokens": 16.0}).completion == 16
    assert read_usage({"completion_tokens": -1}).impossible
    assert read_usage({"completion_tokens": math.inf}).impossible
    assert read_usage({"completion_tokens": True}).ignored
    assert read_usage([1]).ignored and read_usage(None).completion is None
    assert read_usage({"completion_tokens": -(10**400)}).impossible  # no OverflowError formatting it


# ------------------------------------------------------------------------- secrets

def test_credentials_in_the_url_never_reach_a_result_or_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig()) as srv:
        url = f"http://admin:{PASSWORD}@127.0.0.1:{srv.port}/v1?api_key={QUERY_KEY}&Token={QUERY_KEY}x&mode=fast"
        texts = ["FAULT=echo a", "fine b", "FAULT=echo c", "fine d"]
        report = api.load(make_plan(url=url, model="m", runs=1, concurrency=2, requests=4, api_key_env="HOSTILE_KEY",
                                    dataset=dataset(tmp_path, texts)), output=out)
        sent = srv.seen[0]
    assert QUERY_KEY in sent["target"] and sent["authorization"] == f"Bearer {KEY}"  # the query is still sent
    case = report.result.cases[0]
    assert metric(case, "ttft_s").summary.n == 2 and metric(case, "errors_http_500").value == 2
    stored = out.read_text() + workload_path(out).read_text() + report.result.model_dump_json()
    for secret in (KEY, PASSWORD, QUERY_KEY):
        assert secret not in stored
    assert "api_key=***" in report.result.job["url"] and "mode=fast" in report.result.job["url"]
    errors = [n for c in report.result.cases for n in c.notes] + [report.result.name]
    assert not any(s in e for e in errors for s in (KEY, PASSWORD, QUERY_KEY))
    assert any("user:password@ was not sent" in n for n in report.result.cases[0].notes)


def test_a_malformed_url_error_does_not_echo_its_password() -> None:
    with pytest.raises(SpecError) as caught:
        endpoint_url(f"http://u:{PASSWORD}@host:99999/v1", "chat")
    assert PASSWORD not in str(caught.value)
    with pytest.raises(SpecError) as caught:
        make_plan(url=f"ftp://u:{PASSWORD}@host/?token={QUERY_KEY}", model="m")
    assert PASSWORD not in str(caught.value) and QUERY_KEY not in str(caught.value)


# ------------------------------------------------------------------------- interrupts

def test_ctrl_c_keeps_the_finished_levels_and_requests(tmp_path: Path) -> None:
    """Ctrl-C 5 requests into level 2 of a sweep: level 1 whole, level 2's finished requests, complete=False."""
    checkpoints: list[BenchResult] = []

    @contextmanager
    def progress(shape: LoadShape) -> Iterator[Callable[[int, int], None]]:
        def update(done: int, total: int) -> None:
            if shape.concurrency == 2 and done == 5:
                os.kill(os.getpid(), signal.SIGINT)  # lands on the next bytecode, mid-level

        yield update

    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig(token_delay_s=0.002)) as srv:
        plan = make_plan(url=srv.url, model="m", runs=1, sweep=(1, 2), requests=30, output_tokens=TOKENS, timeout_s=30)
        outcome = run_plan(plan, output=out, progress=progress, checkpoint=checkpoints.append)
    assert outcome.interrupted and not outcome.result.complete
    assert len(checkpoints) == 1 and len(checkpoints[0].cases) == 1 and not checkpoints[0].complete
    first, second = outcome.result.cases
    assert "valid" in first.notes and metric(first, "ttft_s").summary.n == 30
    assert any(n.startswith("invalid: interrupted by SIGINT") for n in second.notes), second.notes
    assert 5 <= metric(second, "ttft_s").summary.n < 30  # the finished requests of the level in flight
    assert any("interrupted by SIGINT" in n for n in outcome.result.notes)
    assert workload_path(out).is_file()


def test_the_workload_file_is_written_only_with_a_result(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    seen: list[bool] = []

    @contextmanager
    def progress(shape: LoadShape) -> Iterator[None]:
        seen.append(workload_path(out).exists())
        yield None

    with serve_in_thread(FakeConfig()) as srv:
        run_plan(make_plan(url=srv.url, model="m", runs=1, sweep=(1, 2), requests=3), output=out, progress=progress,
                 checkpoint=lambda result: None)
    assert seen == [False, True]  # not before the first level; with its checkpointed result after it
    assert workload_path(out).is_file()


def test_an_interrupt_before_anything_finished_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("previous result")
    workload_path(out).write_text("previous workload")
    with serve_in_thread(FakeConfig()) as srv:
        def interrupt_once_asked() -> None:
            # Ctrl-C once the server holds a request (which hangs), not after a fixed 0.5 s: on a busy
            # machine the run may not have started by then, and the signal would land before the load.
            deadline = time.monotonic() + 120
            while not srv.seen and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        timer = threading.Thread(target=interrupt_once_asked)
        timer.start()
        report = api.load(make_plan(url=srv.url, model="m", runs=1, concurrency=2, requests=4, timeout_s=30,
                                    dataset=dataset(tmp_path, ["FAULT=hang x"])), output=out)
        timer.join()
    assert report.stopped_by == signal.SIGINT and not report.result.cases and report.output is None
    assert out.read_text() == "previous result" and workload_path(out).read_text() == "previous workload"


# ------------------------------------------------------------------------- probe

MALFORMED_REPLIES = {
    "not_http": b"HELLO\r\n\r\n",
    "bad_length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
    "words_length": b"HTTP/1.1 200 OK\r\nContent-Length: twelve\r\n\r\n",
    "bad_chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "huge_header": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 300_000 + b"\r\nContent-Length: 0\r\n\r\n",
    "many_headers": b"HTTP/1.1 200 OK\r\n" + b"X-H: v\r\n" * 20_000 + b"Content-Length: 0\r\n\r\n",
    "status_word": b"HTTP/1.1 OK 200\r\nContent-Length: 0\r\n\r\n",
}


async def _raw_server(reply: bytes) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("name", sorted(MALFORMED_REPLIES))
def test_probe_turns_a_malformed_reply_into_a_measurement_error(name: str) -> None:
    async def main() -> Any:
        server, port = await _raw_server(MALFORMED_REPLIES[name])
        async with server:
            return await probe(f"http://u:{PASSWORD}@127.0.0.1:{port}/x?token={QUERY_KEY}", repeats=2, timeout_s=2)

    result = asyncio.run(main())
    http = [m for m in result.measures if m.name != "tcp_connect_s"]
    assert all(m.errors and not m.samples for m in http), [(m.name, m.errors) for m in http]
    shown = result.model_dump_json() + str(probe_table(result))
    assert PASSWORD not in shown and QUERY_KEY not in shown and "token=***" in result.url
