"""Waits are bounded and said: a trace replay longer than `LONG_WAIT_S` is announced with its wall-clock
span before its first request, a long gap between two sends shows on the progress line as a wait until a
clock time, and every trace level records its planned span in the result.

Against the fake server on 127.0.0.1, with real trace files. Nothing here waits for a long gap: each test
reads the announced figures, then stops the level with a real SIGINT once the requests before the gap have
finished (the way a user stops a run), and checks the figures against the trace, not against the clock.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from fake_openai import FakeConfig, FakeServer, serve_in_thread
from rich.console import Console

from gpuscout import api
from gpuscout.loadgen.context import Progress
from gpuscout.loadgen.plan import make_plan
from gpuscout.loadgen.schedule import LONG_WAIT_S, LoadShape, long_gap_end, replay_span_s
from gpuscout.loadgen.session import ReplaySpan, replay_plan
from gpuscout.loadgen.trace import trace_workload
from gpuscout.report.load import load_progress, replay_notice, waiting_line
from gpuscout.results.store import load_result
from gpuscout.workload.job import Slo

ROOT = Path(__file__).parent.parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def write_trace(path: Path, stamps_ms: list[int]) -> Path:
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 20, "output_length": 2, "hash_ids": [i]})
                            + "\n" for i, t in enumerate(stamps_ms)))
    return path


# ----------------------------------------------------------------------------------- the schedule's figures

def test_a_replay_span_is_the_last_send_over_the_speedup_cut_at_the_duration() -> None:
    arrivals = [0.0, 0.0, 40.0]
    assert replay_span_s(LoadShape(kind="trace", speedup=2.0, requests=3), arrivals) == 20.0
    assert replay_span_s(LoadShape(kind="trace", speedup=2.0, requests=2), arrivals) == 0.0  # --requests trims
    assert replay_span_s(LoadShape(kind="trace", speedup=1.0, requests=3, duration_s=5.0), arrivals) == 5.0
    assert replay_span_s(LoadShape(kind="concurrency", concurrency=2, requests=3), None) == 0.0


def test_only_a_gap_longer_than_the_limit_is_a_wait() -> None:
    offsets = [0.0, 0.0, 1.0, 1.0 + LONG_WAIT_S + 5, 1.0 + LONG_WAIT_S + 6]
    assert long_gap_end(offsets, 0.5) is None  # a 1 s gap
    assert long_gap_end(offsets, 2.0) == offsets[3]  # inside the long gap: until its end
    assert long_gap_end(offsets, offsets[3] + 0.5) is None
    assert long_gap_end(offsets, 100.0) is None  # nothing left to send
    assert long_gap_end(offsets, 2.0, duration_s=offsets[3]) is None  # the level ends before that send


def test_the_plan_says_each_replay_and_the_whole_run(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", [0, 0, 60_000])
    work = trace_workload(trace, tokenizer_path=None, seed=0)
    one = replay_plan(make_plan(url="http://127.0.0.1:9", model="m", trace=trace, speedup=2, runs=3), work)
    assert one == ReplaySpan(requests=3, trace_s=60.0, speedup=2.0, replay_s=30.0, total_s=90.0, search=False)
    sweep = replay_plan(make_plan(url="http://127.0.0.1:9", model="m", trace=trace, sweep=(1, 4), runs=1), work)
    assert sweep is not None and (sweep.speedup, sweep.replay_s, sweep.total_s) == (1.0, 60.0, 75.0)
    # a search measures its lowest speed-up (the ceiling / 16) and its highest, then at most 6 between them
    search = replay_plan(make_plan(url="http://127.0.0.1:9", model="m", trace=trace, speedup=16, search=True,
                                   runs=1, slo=Slo(ttft_p95_s=1.0)), work)
    assert search is not None and search.search and (search.speedup, search.replay_s) == (1.0, 60.0)
    assert search.total_s == 7 * 60.0 + 60.0 / 16
    assert replay_plan(make_plan(url="http://127.0.0.1:9", model="m", concurrency=2), work) is None


def test_the_notice_gives_the_span_and_how_to_shorten_it() -> None:
    text = replay_notice(ReplaySpan(requests=3, trace_s=7200.0, speedup=1.0, replay_s=7200.0, total_s=21600.0,
                                    search=False)).plain
    assert "takes 2.0 h of wall time" in text and "6.0 h for every level and run" in text
    assert "--speedup" in text and "--requests N" in text


def test_the_waiting_line_names_the_clock_time_and_its_date_when_another_day() -> None:
    now = datetime(2026, 12, 3, 9, 0, 0).astimezone().timestamp()
    assert waiting_line(now + 3600, now) == (f"waiting until {datetime.fromtimestamp(now + 3600):%H:%M:%S} (60 min) "
                                              "for the next send")
    assert f"{datetime.fromtimestamp(now + 3 * 86400):%Y-%m-%d %H:%M:%S}" in waiting_line(now + 3 * 86400, now)


# ------------------------------------------------------------------------------------------ a real replay

@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two worker processes"])
def test_a_long_replay_is_announced_and_its_gap_shown_as_a_wait(tmp_path: Path, workers: int) -> None:
    """A trace of two requests at 0 and one 40 s later, at ×2: the replay is said to take 20 s before the
    first request; after the first two answers the bar says it waits until the third's time; Ctrl-C then
    keeps the two, and the level records the planned 20 s."""
    trace = write_trace(tmp_path / "t.jsonl", [0, 0, 40_000])
    said: list[ReplaySpan] = []
    waits: list[tuple[float, float]] = []  # (when it was said, the clock time said)
    screen = io.StringIO()
    sent_stop: list[bool] = []

    @contextmanager
    def progress(shape: LoadShape) -> Iterator[Progress]:
        assert said, "the span is said before the first request"
        with load_progress(shape, Console(file=screen, force_terminal=True, width=120)) as bar:
            def update(done: int, total: int, waiting_until: float | None = None) -> None:
                bar(done, total, waiting_until)
                if waiting_until is not None:
                    waits.append((time.time(), waiting_until))
                if waits and done == 2 and not sent_stop:
                    sent_stop.append(True)
                    os.kill(os.getpid(), signal.SIGINT)  # lands on the next bytecode, inside the wait

            yield update

    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig()) as srv:
        plan = make_plan(url=srv.url, model="m", trace=trace, speedup=2, runs=1, workers=workers, api_key_env=None)
        outcome = api.load(plan, output=out, progress=progress, on_replay=said.append)
    assert said == [ReplaySpan(requests=3, trace_s=40.0, speedup=2.0, replay_s=20.0, total_s=20.0, search=False)]
    assert waits and outcome.interrupted
    at, until = waits[0]
    assert LONG_WAIT_S < until - at <= 20.0  # the third send is 20 s after t0, which was before this call
    frames = ANSI.sub("", screen.getvalue())
    assert f"waiting until {datetime.fromtimestamp(until):%H:%M:%S}" in frames, frames[-400:]
    case = load_result(out).cases[0]
    assert case.params["replay_span_s"] == 20.0
    assert len(srv.records) == 2  # the third request was never sent


# ------------------------------------------------------------------------------------------------ the CLI

def _cli(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpuscout", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})


def _answered(server: FakeServer) -> int:
    return sum(r.end_s is not None for r in list(server.records))


def test_the_cli_says_a_long_replay_before_its_first_request(tmp_path: Path) -> None:
    """A 7-day trace at ×1 (the longest timestamp a trace may hold): the command says up front that it takes
    7.0 days and how to shorten it; Ctrl-C after the first two answers keeps them, the file says 7 days."""
    trace = write_trace(tmp_path / "t.jsonl", [0, 0, 7 * 86_400_000])
    out = tmp_path / "r.json"
    with serve_in_thread(FakeConfig()) as srv:
        proc = _cli(["load", srv.url, "--model", "m", "--trace", str(trace), "--runs", "1", "--no-store",
                     "-o", str(out)])
        deadline = time.monotonic() + 120
        while _answered(srv) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the first two requests were not answered"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    said = " ".join(err.split())
    assert "the trace replay takes 7.0 d of wall time (3 requests over 7.0 d of the trace" in said, err
    assert "--speedup" in said and "--requests N" in said
    assert err.index("trace replay takes") < err.index("trace ×1")  # said before any level's result
    assert load_result(out).cases[0].params["replay_span_s"] == 7 * 86_400.0
    assert len(srv.records) == 2


def test_a_short_replay_is_not_announced_and_its_span_is_in_the_json(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", [0, 100, 200])
    with serve_in_thread(FakeConfig()) as srv:
        proc = _cli(["load", srv.url, "--model", "m", "--trace", str(trace), "--runs", "1", "--no-store",
                     "--percentile", "50", "--json"])
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "trace replay takes" not in err
    assert json.loads(out)["cases"][0]["params"]["replay_span_s"] == 0.2
