"""The load client against the fake server: measured timing matches the server's, errors are data, no leaks.

Timing is judged against what the server recorded it did (fake_openai.Served, on the client's clock:
CLOCK_MONOTONIC is one clock for every process on a Linux host), never against a wall-clock budget:
* causality, exact up to clock reads, always: client send ≤ server receipt, server write k ≤ client arrival k;
* the client's stamps: median (client first-chunk arrival − server first write) ≤ 2 ms at concurrency 1,
  ≤ 5 ms at 32 (measured 0.4–0.6 ms and 2–3.4 ms on this 2-core VM), so a client 10 ms off fails; median
  |client TPOT − server TPOT| ≤ 5% of the token delay. If these fail while the kernel says the client thread
  was starved (it waited ≥ 1 ms for a CPU per timeslice on average: other processes held the cores; a
  quiet VM shows 0.1–0.5 ms), the test skips with the numbers, since the machine, not the client's code,
  delayed the stamps; on an uncontended machine they fail.
* whether the server honoured the injected delays is a separate test, skipped with the numbers when the
  server's own record shows it was starved.
Concurrency 32 streams at 40 ms a token (800 chunks/s), not 10 ms: at 3200 chunks/s the client alone
needs a whole core of this VM (thread CPU 1.05 s in 1.09 s wall, no run-queue wait) and then lags the
server by 20–70 ms, which would test its capacity, not its stamps. The request leg (client send stamp →
server has the body) is printed, not bounded: in the first round all 32 sends leave together and the
client's send path costs ~1 ms of CPU each, so that leg is 30–45 ms there.
The server runs in its own process, as a real one does, so the two share no GIL.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_openai import Served, serve_in_process

from gpuscout.errors import SpecError
from gpuscout.loadgen.client import LoadRun, RequestRecord, endpoint_url, run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import Prompt, Workload, synthetic_workload
from gpuscout.results.schema import Case

TTFT, DELAY, TOKENS = 0.050, 0.010, 8
LENGTHS = (6, 7, 8, 9, 10)
CAUSALITY_EPS_S = 0.0001  # clock reads on different cores; causality itself leaves no slack
TPOT_REL_TOL = 0.05  # median |client TPOT − server TPOT| / injected token delay
STARVED_WAIT_S = 0.001  # the client's mean run-queue wait per timeslice beyond which the machine starved it
EARLY_TOL_S = 0.0005  # the server may never write before its deadline (the loop's timers round up)
SERVER_STARVED_S = 0.005  # server's median lateness beyond this: the machine, not the code, missed the delays


def metric(case: Any, name: str) -> Any:
    return {m.name: m for m in case.metrics}[name]


def workload(n: int = 8, output_tokens: int = TOKENS, texts: list[str] | None = None) -> Workload:
    if texts is None:
        return synthetic_workload(n, prompt_tokens=16, output_tokens=output_tokens)
    return Workload(prompts=tuple(Prompt(text=t, prompt_tokens=4, output_tokens=output_tokens) for t in texts),
                    source="synthetic", seed=0, tokenizer=None, description="test prompts")


@dataclass(frozen=True)
class Scenario:
    concurrency: int
    requests: int
    token_delay_s: float
    first_chunk_tol_s: float  # median client first-chunk arrival − server first write


SCENARIOS = (Scenario(1, 20, DELAY, 0.002), Scenario(32, 96, 0.040, 0.005))


@dataclass(frozen=True)
class Sched:
    """The kernel's account of one thread (/proc/thread-self/schedstat): CPU time, time spent runnable but
    waiting for a CPU (other processes held the cores), and timeslices run."""

    cpu_s: float
    wait_s: float
    slices: int

    @staticmethod
    def now() -> Sched | None:
        try:
            cpu, wait, slices = (int(x) for x in Path("/proc/thread-self/schedstat").read_text().split())
        except (OSError, ValueError):
            return None  # not Linux, or a kernel without sched_info: starvation cannot be shown
        return Sched(cpu / 1e9, wait / 1e9, slices)

    @staticmethod
    def since(before: Sched | None) -> Sched | None:
        """This thread's account from `before` until now (None where there is no schedstat)."""
        now = Sched.now()
        if now is None or before is None:
            return None
        return Sched(now.cpu_s - before.cpu_s, now.wait_s - before.wait_s, now.slices - before.slices)

    @property
    def starved(self) -> bool:
        return self.mean_wait_s >= STARVED_WAIT_S

    @property
    def mean_wait_s(self) -> float:
        return self.wait_s / max(1, self.slices)

    def __str__(self) -> str:
        return (f"client thread CPU {self.cpu_s:.3f} s, waited for a CPU {self.wait_s:.3f} s over "
                f"{self.slices} timeslices (mean {self.mean_wait_s * 1e3:.2f} ms)")


@dataclass(frozen=True)
class Pair:
    """One measured request as the client saw it and as the server did it."""

    client: RequestRecord
    server: Served
    t0: float  # the client's t0 on the shared clock: client times are t0 + *_s

    @property
    def request_leg_s(self) -> float:  # client send stamp → server has the body
        return self.server.received_s - (self.t0 + self.client.sent_s)

    def chunk_legs_s(self) -> list[float]:  # server write k → client arrival k
        return [self.t0 + c - w for c, w in zip(self.client.chunk_s, self.server.writes_s, strict=True)]

    @property
    def server_ttft_s(self) -> float:
        return self.server.writes_s[0] - self.server.received_s

    @property
    def tpot_error_s(self) -> float:
        """Client TPOT − server TPOT: the same formula (first token excluded) on both timelines."""
        n, c, w = sum(self.server.tokens), self.client.chunk_s, self.server.writes_s
        return ((c[-1] - c[0]) - (w[-1] - w[0])) / (n - 1)

    def lateness_s(self, token_delay_s: float) -> list[float]:
        """Per content write: the server's delay since receipt − the injected delay for its last token."""
        late: list[float] = []
        k = 0
        for write, tokens in zip(self.server.writes_s, self.server.tokens, strict=True):
            k += tokens
            late.append(write - self.server.received_s - (TTFT + (k - 1) * token_delay_s))
        return late


@dataclass(frozen=True)
class Timed:
    scenario: Scenario
    run: LoadRun
    case: Case
    pairs: list[Pair]
    client_sched: Sched | None  # over the whole run, warm-up included


def varied_workload(n: int) -> Workload:
    """Unique prompts (the pairing key), output lengths 6–10 (mean 8): workers finish at different times
    after the warm-up, as real traffic does, instead of all leaving in one burst every round."""
    return Workload(prompts=tuple(Prompt(text=f"prompt {i}", prompt_tokens=4, output_tokens=LENGTHS[i % 5])
                                  for i in range(n)), source="synthetic", seed=0, tokenizer=None,
                    description="lengths 6-10")


def pair_up(run: LoadRun, prompts: Workload, served: list[Served]) -> list[Pair]:
    """Measured request i carried prompt (warm-up + i) mod len(prompts) (client._phases); every prompt is sent
    once, so the prompt text names the server's record. Output lengths differ by prompt, so a wrong pairing
    shows as a token-count mismatch (test_every_request_succeeds_and_pairs_with_the_servers_record)."""
    assert run.t0_perf_counter_s is not None
    by_prompt = {s.prompt: s for s in served}
    assert len(by_prompt) == len(served) == len(prompts.prompts), "a prompt was sent twice: pairing is ambiguous"
    offset, n = run.shape.warmup_requests, len(prompts.prompts)
    return [Pair(r, by_prompt[prompts.prompts[(offset + r.index) % n].text], run.t0_perf_counter_s)
            for r in run.records if not r.warmup]


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda s: f"concurrency{s.concurrency}")
def timed(request: pytest.FixtureRequest) -> Iterator[Timed]:
    """One closed-loop run against a server in its own process, with the server's records and the kernel's
    account of the client thread; shared by the timing tests of one scenario."""
    sc: Scenario = request.param
    prompts = varied_workload(sc.requests + sc.concurrency)
    shape = LoadShape(kind="concurrency", concurrency=sc.concurrency, requests=sc.requests,
                      warmup_requests=sc.concurrency)
    with serve_in_process(TTFT, sc.token_delay_s) as server:
        before = Sched.now()
        run = run_load_sync(server.url, "m", prompts, shape)  # runs its event loop in this thread
        sched = Sched.since(before)
        served = server.records()
    yield Timed(sc, run, summarize_load(run, slo=None), pair_up(run, prompts, served), sched)


def assert_unless_starved(failures: list[str], sched: Sched | None) -> None:
    """Fail on `failures`, unless the kernel shows other processes kept the client off the CPU: then the
    machine, not the client's code, made it late, and the test skips with both sets of numbers."""
    if failures and sched is not None and sched.starved:
        pytest.skip(f"{'; '.join(failures)}, but the machine starved the client: {sched}")
    assert not failures, "; ".join(failures)


KEPT_OFF_CPU = "the client was kept waiting for a CPU"


def assert_valid(case: Case, context: object = None) -> None:
    """The run is valid; or invalid only because other processes kept the client off the CPU (the gate's own
    record of this machine, not of the code under test): then the test skips with that reason."""
    reasons = [n for n in case.notes if n.startswith("invalid")]
    if reasons and all(KEPT_OFF_CPU in n for n in reasons):
        pytest.skip(f"this machine kept the client off the CPU: {reasons[0]}")
    assert "valid" in case.notes, (context, case.notes)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    return (f"P50 {statistics.median(ordered) * 1e3:.3f} P90 {ordered[int(0.9 * (len(ordered) - 1))] * 1e3:.3f} "
            f"max {ordered[-1] * 1e3:.3f} ms")


def test_every_request_succeeds_and_pairs_with_the_servers_record(timed: Timed) -> None:
    assert metric(timed.case, "error_rate").value == 0
    assert metric(timed.case, "tokens_per_chunk").value == 1.0
    outputs = [r.output_tokens_server or 0 for r in timed.run.records if not r.warmup]
    assert metric(timed.case, "output_tokens_server").value == sum(outputs) and set(outputs) <= set(LENGTHS)
    assert len(metric(timed.case, "chunk_gap_s").samples) == sum(n - 1 for n in outputs)
    for p in timed.pairs:
        assert p.server.status == 200 and p.server.end_s is not None
        assert len(p.client.chunk_s) == len(p.server.writes_s) == sum(p.server.tokens) == p.client.output_tokens_server


def test_client_never_stamps_before_the_server_acts(timed: Timed) -> None:
    """Causality holds on any machine, however busy: a violation is a client (or clock) bug."""
    requests = [p.request_leg_s for p in timed.pairs]
    chunks = [leg for p in timed.pairs for leg in p.chunk_legs_s()]
    assert min(requests) >= -CAUSALITY_EPS_S, "a send was stamped after the server already had the request"
    assert min(chunks) >= -CAUSALITY_EPS_S, "a chunk was stamped before the server wrote it"


def test_client_timing_matches_the_servers_record(timed: Timed) -> None:
    sc, pairs = timed.scenario, timed.pairs
    first = [p.chunk_legs_s()[0] for p in pairs]
    tpot_error = [abs(p.tpot_error_s) for p in pairs]
    print(f"\nconcurrency {sc.concurrency}, token delay {sc.token_delay_s * 1e3:g} ms: client TTFT P50 "
          f"{metric(timed.case, 'ttft_s').summary.p50 * 1e3:.2f} ms, server TTFT P50 "
          f"{statistics.median(p.server_ttft_s for p in pairs) * 1e3:.2f} ms (injected {TTFT * 1e3:g}); "
          f"server first write → client first chunk {_ms(first)}; every chunk "
          f"{_ms([leg for p in pairs for leg in p.chunk_legs_s()])}; client send → server receipt "
          f"{_ms([p.request_leg_s for p in pairs])}; client TPOT P50 "
          f"{metric(timed.case, 'tpot_s').summary.p50 * 1e3:.3f} ms, |client − server TPOT| {_ms(tpot_error)}; "
          f"{timed.client_sched or 'no schedstat'}")
    failures = []
    if statistics.median(first) > sc.first_chunk_tol_s:
        failures.append(f"first chunk stamped {statistics.median(first) * 1e3:.2f} ms after the server wrote it "
                        f"(median; limit {sc.first_chunk_tol_s * 1e3:g} ms)")
    if statistics.median(tpot_error) > TPOT_REL_TOL * sc.token_delay_s:
        failures.append(f"client TPOT off the server's by {statistics.median(tpot_error) * 1e3:.3f} ms (median; "
                        f"limit {TPOT_REL_TOL * sc.token_delay_s * 1e3:g} ms)")
    assert_unless_starved(failures, timed.client_sched)


def test_the_server_honoured_the_injected_delays(timed: Timed) -> None:
    """The fake itself: never early, and on time where the machine gives it the CPU (else skip, with numbers)."""
    delay = timed.scenario.token_delay_s
    first = [p.lateness_s(delay)[0] for p in timed.pairs]
    every = [late for p in timed.pairs for late in p.lateness_s(delay)]
    numbers = f"first write late {_ms(first)}, every write late {_ms(every)}"
    print(f"\nconcurrency {timed.scenario.concurrency}: server vs injected: {numbers}")
    assert min(every) >= -EARLY_TOL_S, f"the server wrote before its deadline: {numbers}"
    if max(statistics.median(first), statistics.median(every)) > SERVER_STARVED_S:
        pytest.skip(f"the server was starved of CPU (its own record: {numbers}); the client was still checked "
                    "against that record")


def test_warmup_requests_are_excluded(fake_server: Callable[..., AbstractContextManager[Any]]) -> None:
    with fake_server() as srv:
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="concurrency", concurrency=2, requests=6,
                                                                warmup_requests=3))
    assert len(srv.seen) == 9 and sum(r.warmup for r in run.records) == 3
    case = summarize_load(run, slo=None)
    assert metric(case, "ttft_s").summary.n == 6 and len(metric(case, "send_lag_s").samples) == 6
    assert all(r.sent_s < 0 for r in run.records if r.warmup)


def test_each_error_kind_is_counted_not_fatal(fake_server: Callable[..., AbstractContextManager[Any]]) -> None:
    texts = ["fine", "FAULT=500 x", "FAULT=hang x", "FAULT=drop x", "FAULT=malformed x", "fine too"]
    with fake_server() as srv:
        run = run_load_sync(srv.url, "m", workload(texts=texts), LoadShape(kind="concurrency", concurrency=6,
                                                                           requests=6), timeout_s=0.5)
    errors = [r.error.split(":")[0] if r.error else None for r in run.records]
    assert errors == [None, "http_500", "timeout", "dropped_stream", "malformed_sse", None]
    case = summarize_load(run, slo=None)
    assert metric(case, "error_rate").value == pytest.approx(4 / 6)
    for kind in ("http_500", "timeout", "dropped_stream", "malformed_sse"):
        assert metric(case, f"errors_{kind}").value == 1
    assert any("error rate" in n for n in case.notes if n.startswith("invalid"))


def test_refused_connections_are_a_result_with_a_warning() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    run = run_load_sync(f"http://127.0.0.1:{port}", "m", workload(), LoadShape(kind="concurrency", concurrency=2,
                                                                                 requests=4))
    assert all(r.error and r.error.startswith("connect") for r in run.records)
    assert any("every request failed to connect" in n for n in run.notes)
    assert metric(summarize_load(run, slo=None), "error_rate").value == 1.0


def test_malformed_url_is_a_user_error() -> None:
    with pytest.raises(SpecError, match="not an http"):
        endpoint_url("ftp://x", "chat")
    assert endpoint_url("http://h:8/v1/", "completions") == "http://h:8/v1/completions"
    assert endpoint_url("http://user:pw@h:8", "chat") == "http://h:8/v1/chat/completions"


def test_api_key_is_sent_but_never_leaks(fake_server: Callable[..., AbstractContextManager[Any]],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-secret-0123456789"
    monkeypatch.setenv("GS_TEST_KEY", key)
    with fake_server(api_key="another-key") as srv:
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="concurrency", concurrency=1, requests=2),
                            api_key_env="GS_TEST_KEY")
    assert srv.seen[0]["authorization"] == f"Bearer {key}"
    assert all(r.error and r.error.startswith("http_401") for r in run.records)
    assert key not in run.model_dump_json() and key not in summarize_load(run, slo=None).model_dump_json()


def test_pinning_extras_and_usage_are_requested(fake_server: Callable[..., AbstractContextManager[Any]]) -> None:
    with fake_server() as srv:
        run_load_sync(srv.url, "m", workload(), LoadShape(kind="concurrency", concurrency=1, requests=1))
    body = srv.seen[0]["body"]
    assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"] == TOKENS
    assert body["stream_options"] == {"include_usage": True} and body["stream"] is True


@pytest.mark.parametrize("status", [400, 422])  # 422: FastAPI's refusal of undeclared fields (transformers serve)
def test_a_server_rejecting_extras_gets_one_retry_without_them(
        fake_server: Callable[..., AbstractContextManager[Any]], status: int) -> None:
    with fake_server(reject_extras=True, reject_status=status) as srv:
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="concurrency", concurrency=1, requests=3))
    assert all(r.error is None for r in run.records)
    assert len(srv.seen) == 4 and "ignore_eos" not in srv.seen[-1]["body"]
    assert any(f"answered {status}" in n and "retried without them" in n for n in run.notes)


@pytest.mark.parametrize(("endpoint", "stream"), [("completions", True), ("chat", False), ("completions", False)])
def test_completions_and_non_streaming(fake_server: Callable[..., AbstractContextManager[Any]], endpoint: str,
                                       stream: bool) -> None:
    with fake_server(ttft_s=0.01, token_delay_s=0.002) as srv:
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="concurrency", concurrency=2, requests=4),
                            endpoint=endpoint, stream=stream)
    assert srv.seen[0]["path"].endswith(f"/{'chat/completions' if endpoint == 'chat' else 'completions'}")
    assert all(r.error is None and r.output_tokens_server == TOKENS for r in run.records)
    assert all(len(r.chunk_s) == (TOKENS if stream else 1) for r in run.records)
    assert json.loads(run.model_dump_json())["stream"] is stream


def test_open_loop_sends_on_its_absolute_schedule(fake_server: Callable[..., AbstractContextManager[Any]]) -> None:
    with fake_server() as srv:
        before = Sched.now()
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="poisson", rate_rps=100, requests=50, seed=3))
        sched = Sched.since(before)
    from gpuscout.loadgen.schedule import send_offsets

    offsets = send_offsets(run.shape, 50)
    assert [r.intended_s for r in run.records] == pytest.approx(offsets, abs=1e-9)
    case = summarize_load(run, slo=None)
    # The schedule itself is exact (above); the lag bound is loose because the server shares this
    # process and the machine's two cores with whatever else runs (CI, other tests), and waived when
    # the kernel shows the client was kept off the CPU (a CPU-bound neighbour took 22 ms P95 here).
    lag = metric(case, "send_lag_s").summary.p95
    assert_unless_starved([f"P95 send lag {lag * 1e3:.1f} ms ≥ 20 ms"] if lag >= 0.02 else [], sched)


def test_an_overloaded_client_is_marked_invalid(fake_server: Callable[..., AbstractContextManager[Any]]) -> None:
    # 4000 rps with the server sharing this process's 2 cores and GIL. A few connections then wait in the
    # kernel's accept queue for ~35 s (TCP retransmission back-off): a long timeout lets them finish rather
    # than end as timeouts, which this test is not about.
    with fake_server() as srv:
        run = run_load_sync(srv.url, "m", workload(), LoadShape(kind="constant", rate_rps=4000, requests=800),
                            timeout_s=600)
    case = summarize_load(run, slo=None)
    assert any("fell behind its schedule" in n for n in case.notes), case.notes
