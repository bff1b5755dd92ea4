"""What the client adds to what it measures, held against the server's own record (fake_openai.Served).

* The send is stamped when the request's bytes are written: at concurrency 64 the request leg (client
  send stamp → server has the body) stays near the machine's floor. With the old HTTP library the
  stamp came before building and dispatching, and this leg was 35–53 ms (docs/measurement.md §2.2).
* At concurrency 64, 10 ms a token (6,400 chunks/s), the client's TTFT is the server's first-byte
  time plus milliseconds, not tens (it was ~55 ms with the old client).
* A client that cannot keep up (its event loop saturated) makes the run invalid, with the reason.
* Each output-token count says where it came from; content chunks are a lower bound and say so.

Timing checks skip with the numbers when the kernel shows the client thread was starved of CPU by
other processes (test_client.Sched), as the other timing tests do.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeConfig, serve_in_process, serve_in_thread
from test_client import KEPT_OFF_CPU, Sched, assert_unless_starved
from tiny_tokenizer import write_tiny_tokenizer

from gpuscout.loadgen import exchange
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import busy_when_late, loop_demand_fraction, summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.sse import parse_object, read_usage
from gpuscout.loadgen.workload import Prompt, Workload

TTFT = 0.050
# Regression guards, not targets: the old client's legs were 35–55 ms, this one's 1–4 ms on a 2-core VM. The
# ≤3 ms target is measured by benchmarks/load_overhead.py; a test held to it failed on a busy CI machine at
# 4.2 ms with the loop thread not starved, which is the machine, not the client.
REQUEST_LEG_TOL_S = 0.010
OVERHEAD_TOL_S = 0.010
SERVER_STARVED_S = 0.002


def unique(n: int, tokens: int, tag: str = "p", spread: int = 0) -> Workload:
    """Unique prompts (the key to the server's record); `spread`: output lengths tokens ± spread, so workers
    finish at different times, as real traffic does, instead of all sending in one burst every round."""
    return Workload(prompts=tuple(Prompt(text=f"{tag} {i}", prompt_tokens=2,
                                         output_tokens=tokens + (i % (2 * spread + 1) - spread if spread else 0))
                                  for i in range(n)), source="synthetic", seed=0, tokenizer=None, description="unique")


def metric(case: Any, name: str) -> Any:
    return {m.name: m for m in case.metrics}[name]


@pytest.mark.slow
def test_at_concurrency_64_the_client_adds_milliseconds_not_tens() -> None:
    work = unique(64 + 192, 16, spread=5)
    shape = LoadShape(kind="concurrency", concurrency=64, requests=192, warmup_requests=64)
    with serve_in_process(TTFT, 0.010) as server:
        before = Sched.now()
        run = run_load_sync(server.url, "m", work, shape, api_key_env=None)
        sched = Sched.since(before)
        served = {s.prompt: s for s in server.records()}
    assert run.t0_perf_counter_s is not None
    t0 = run.t0_perf_counter_s
    legs, overheads, late = [], [], []
    for r in run.records:
        if r.warmup:
            continue
        s = served[work.prompts[(64 + r.index) % len(work.prompts)].text]
        legs.append(s.received_s - (t0 + r.sent_s))
        overheads.append((r.chunk_s[0] - r.sent_s) - (s.writes_s[0] - s.received_s))
        late.append(s.writes_s[0] - s.received_s - TTFT)  # the server's own lateness: a starved server reads late
    print(f"\nrequest leg P50 {statistics.median(legs) * 1e3:.2f} ms, client TTFT − server first byte P50 "
          f"{statistics.median(overheads) * 1e3:.2f} ms; {sched}")
    assert min(legs) >= -0.0001, "a send was stamped after the server already had the request"
    if statistics.median(late) > SERVER_STARVED_S:
        pytest.skip(f"the server was starved of CPU (its first writes {statistics.median(late) * 1e3:.1f} ms late, "
                    f"median): its receipts are late too; request leg P50 {statistics.median(legs) * 1e3:.2f} ms")
    failures = []
    if statistics.median(legs) > REQUEST_LEG_TOL_S:
        failures.append(f"request leg P50 {statistics.median(legs) * 1e3:.2f} ms > {REQUEST_LEG_TOL_S * 1e3:g} ms")
    if statistics.median(overheads) > OVERHEAD_TOL_S:
        failures.append(f"client overhead P50 {statistics.median(overheads) * 1e3:.2f} ms > {OVERHEAD_TOL_S * 1e3:g}")
    assert_unless_starved(failures, sched)


def test_a_saturated_client_makes_the_run_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event read costs the loop 5 ms of CPU (a client far too slow for its traffic): the gate says so.

    The cost is per event, not per read: a slow loop reads less often and finds more events in each read,
    so a cost per read shrinks as the client falls behind and left the loop idle on one CI machine."""
    body = exchange.StreamSink.body

    def slow(self: exchange.StreamSink, data: bytes, now: float) -> None:
        end = time.thread_time() + 0.005 * max(1, data.count(b"data:"))
        while time.thread_time() < end:
            pass
        body(self, data, now)

    shape = LoadShape(kind="concurrency", concurrency=16, requests=32)
    # 16 streams at 5 ms a token: 3,200 events/s, a fraction of a core for the real client, 16 cores for the
    # slowed one, whose every round of 16 answers then takes 1.4 s of CPU against the server's 85 ms: the
    # loop is idle only while a round's first tokens are on their way (at 2 ms an event that idle share
    # reached 15% on a CI machine, and the gate's 0.9 of a core was missed at 0.86)
    with serve_in_process(0.005, 0.005) as server:
        fast = summarize_load(run_load_sync(server.url, "m", unique(32, 16), shape, api_key_env=None), slo=None)
        monkeypatch.setattr(exchange.StreamSink, "body", slow)
        run = run_load_sync(server.url, "m", unique(32, 16, "q"), shape, api_key_env=None)
    case = summarize_load(run, slo=None)
    seen = (f"loop CPU {run.loop_cpu_s} s, waited {run.loop_wait_s} s, wall {run.wall_s:.2f} s, "
            f"lag samples {[round(x * 1e3) for x in run.loop_lag_s]} ms, "
            f"busy {[round(b, 2) for b in run.loop_lag_busy]}")
    # On a machine whose other work holds the cores the same loop shows as kept off the CPU: invalid too,
    # for the reason the kernel gives.
    flagged = [n for n in case.notes if n.startswith("invalid") and ("client was saturated" in n or KEPT_OFF_CPU in n)]
    if not flagged and busy_when_late(run) < 0.9 and loop_demand_fraction(run) < 0.9:
        # The loop lost wall time through its late ticks neither on a CPU nor waiting for one: a VM's steal
        # time, or threads other tests left in this process holding the GIL (CI, twice: 1.7 s late ticks at
        # 0.86–0.89 busy, no run-queue wait). The gate does not judge a blocked loop (docs/measurement.md
        # §2.3), and a user's client on a quiet machine is not one.
        others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
        pytest.skip(f"the loop was held by something outside it (other threads: {others[:5] or 'none'}): {seen}")
    assert flagged, (case.notes, seen)
    assert metric(case, "client_cpu_fraction").value >= 0.5, seen  # the loop thread was busy, not only descheduled
    assert not any("client was saturated" in n for n in fast.notes), (fast.notes, metric(fast, "client_cpu_fraction"))


@pytest.fixture(scope="module")
def small_run() -> Any:
    with serve_in_thread(FakeConfig()) as server:
        return run_load_sync(server.url, "m", unique(24, 8), LoadShape(kind="concurrency", concurrency=4, requests=24),
                             api_key_env=None)


@pytest.mark.parametrize(("cpu", "wait", "lag", "busy", "says"), [
    (0.95, 0.00, 0.020, 0.5, "client was saturated"),  # busy with its own work
    # 0.86 of a core over the run (idle while the server was slow), but running its own callbacks through
    # every late tick: CI saw this, 700 ms late, with the run valid before the busy share was recorded
    (0.86, 0.01, 0.700, 0.98, "client was saturated"),
    (0.40, 0.55, 0.020, 0.4, KEPT_OFF_CPU),  # ready to run, other processes held the cores
    (0.95, 0.00, 0.001, 1.0, None),  # busy but punctual: its callbacks did not queue
    (0.40, 0.10, 0.020, 0.3, None),  # late while mostly asleep: neither, a note says so (below)
])
def test_the_gate_tells_a_saturated_client_from_one_kept_off_the_cpu(small_run: Any, cpu: float, wait: float,
                                                                     lag: float, busy: float,
                                                                     says: str | None) -> None:
    """Known loop accounts (fractions of the run's wall time, and the loop's CPU share through each lag
    tick) and a known lateness: the reason, or none."""
    wall = small_run.wall_s
    run = small_run.model_copy(update={"loop_cpu_s": (cpu * wall,), "loop_wait_s": (wait * wall,),
                                       "loop_lag_s": (lag,) * 20, "loop_lag_busy": (busy,) * 20})
    case = summarize_load(run, slo=None)
    flagged = [n for n in case.notes if "client was saturated" in n or KEPT_OFF_CPU in n]
    held = [n for n in case.notes if "something outside it held it" in n]
    if says is None:
        assert not flagged, case.notes
        assert len(held) == (lag > 0.002), case.notes  # a late loop with no cause it records is noted, not refused
    else:
        assert not held, case.notes
        assert len(flagged) == 1 and says in flagged[0] and flagged[0].startswith("invalid"), case.notes


def test_token_counts_say_where_they_came_from(tmp_path: Path) -> None:
    """A server that sends no usage and two tokens a chunk: chunk counts are half the truth and say so; the
    tokenizer, given, counts them all."""
    tokenizer = str(write_tiny_tokenizer(tmp_path / "tok"))
    shape = LoadShape(kind="concurrency", concurrency=2, requests=8)
    with serve_in_thread(FakeConfig(tokens_per_chunk=2, no_usage=True)) as server:
        bare = run_load_sync(server.url, "m", unique(8, 16), shape, api_key_env=None)
        work = unique(8, 16, "t").model_copy(update={"tokenizer": tokenizer})
        counted = run_load_sync(server.url, "m", work, shape, api_key_env=None)
        told = run_load_sync(server.url, "m", unique(8, 16, "u"), shape, api_key_env=None, stream=False)
    assert {r.output_tokens_source for r in bare.records} == {"chunks"}
    case = summarize_load(bare, slo=None)
    assert metric(case, "tokens_per_chunk").value == 1.0  # 8 chunks counted as 8 tokens: the lower bound
    assert any("counts of content chunks" in n and "lower bound" in n for n in case.notes), case.notes
    assert {r.output_tokens_source for r in counted.records} == {"tokenizer"}
    assert all(r.output_tokens_client == 16 for r in counted.records)  # the 16 "tok" words, exactly
    assert metric(summarize_load(counted, slo=None), "output_tokens_from_tokenizer").value == 8
    assert {r.output_tokens_source for r in told.records} == {"server"}  # a plain reply carries usage


def test_llamacpp_timings_count_as_the_servers_usage() -> None:
    event = parse_object({"choices": [{"delta": {}}], "timings": {"predicted_n": 16, "prompt_n": 4, "cache_n": 60}},
                         chat=True, delta=True)
    usage = read_usage(event.usage)
    assert (usage.completion, usage.prompt, usage.cached) == (16, 64, 60)
    assert read_usage({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}).cached is None
