"""Per-request records → one results `Case`: docs/measurement.md §1 metrics, token counts, a validity verdict.

Formulas (printed in reports; docs/measurement.md §3.6 for how other tools name them):
* ttft_s = first content chunk − actual send; e2e_s = last content chunk − actual send;
  the *_from_intended_s variants use the intended (scheduled) send time, so a lagging client cannot
  hide queueing (coordinated omission, MLPerf LoadGen's rule, docs/measurement.md §3.5).
* tpot_s = (e2e − ttft) / (output_tokens − 1), first token excluded (vLLM TPOT = AIPerf ITL).
* chunk_gap_s = every gap between consecutive content chunks, pooled (vLLM "ITL", AIPerf inter-chunk).
* tokens_per_chunk = output_tokens / content chunks, per request.
* output_tokens_per_s = Σ output tokens / run duration; requests_per_s = successes / duration;
  goodput_rps = successes meeting every SLO bound / duration (DistServe; vLLM, docs/measurement.md §3.1). The bound is
  applied per request to latency from the intended send time.
Output tokens come from the server's usage when present (and possible, `counts`), else the tokenizer,
else the chunk count. Requests cancelled at a level's `--duration` deadline are counted
(`cancelled_at_deadline`) but are neither successes nor errors: they never finished, so they enter no
latency and no error rate.
"""

from __future__ import annotations

import math
from collections import Counter

from gpuscout.loadgen import detail
from gpuscout.loadgen.client import CANCELLED_AT_DEADLINE, STOPPED_OVERSATURATED, LoadRun, RequestRecord
from gpuscout.loadgen.counts import short_output
from gpuscout.loadgen.monitor import LAG_TICK_S
from gpuscout.results.schema import (
    E2E_FROM_INTENDED_S,
    E2E_S,
    INVALID_PREFIX,
    NOT_MEASURED_PREFIX,
    TPOT_S,
    TTFT_FROM_INTENDED_S,
    TTFT_S,
    VALID_NOTE,
    Case,
    Metric,
)
from gpuscout.stats import percentile
from gpuscout.workload.job import Slo

# P95 send lag beyond this: the client fell behind (Perf Analyzer warns at 1% late, docs/measurement.md §3.4).
MAX_LAG_S = 0.010
LAG_FRACTION = 0.05  # … or beyond 5% of the mean inter-arrival gap of an open-loop schedule
LAG_FLOOR_S = 0.002  # but never stricter than the event loop's ~1 ms timer granularity allows
MAX_ERROR_RATE = 0.01
# The client's own saturation (measured: runs at 0.9–1.0 of a core stayed valid while their TTFT held tens
# of ms of client queueing, docs/measurement.md §5): CPU near one core with the event loop running late. A
# loop late and ready to run that long without the CPU (run-queue wait, Linux schedstat) was kept off the
# cores by other processes: also invalid, with that reason. A loop late with its thread mostly asleep is
# neither: the send-lag check covers it.
SATURATED_CPU_FRACTION = 0.9  # of one core (or of the run ready to run), per client process
SATURATED_LOOP_LAG_S = 0.002  # P95 lateness of a 10 ms timer beyond which the loop is queueing callbacks
# An image generation answers with one body: no first token, no tokens (its e2e is the latency).
TOKEN_ONLY = frozenset({TTFT_S, TTFT_FROM_INTENDED_S, TPOT_S, "chunk_gap_s", "tokens_per_chunk",
                        "output_tokens_per_s", "goodput_output_tokens_per_s", "ttft_s_p50_bound", "ttft_s_p95_bound",
                        "ttft_s_p99_bound", "tpot_s_p50_bound", "tpot_s_p95_bound", "tpot_s_p99_bound"})


def output_tokens(r: RequestRecord) -> int:
    if r.output_tokens_server is not None:
        return r.output_tokens_server
    if r.output_tokens_client is not None:
        return r.output_tokens_client
    return len(r.chunk_s)


def successful(run: LoadRun) -> list[RequestRecord]:
    return [r for r in run.records if not r.warmup and r.error is None and r.chunk_s]


def cancelled(r: RequestRecord) -> bool:
    """Still running when the level's duration ended (or it was stopped): neither a success nor an error."""
    return r.error is not None and r.error.startswith((CANCELLED_AT_DEADLINE, STOPPED_OVERSATURATED))


def summarize_load(run: LoadRun, *, slo: Slo | None, percentile_needed: float = 95, max_lag_s: float = MAX_LAG_S,
                   max_error_rate: float = MAX_ERROR_RATE) -> Case:
    ok = successful(run)
    measured = [r for r in run.records if not r.warmup]
    counted = [r for r in measured if not cancelled(r)]
    duration = run.wall_s if run.wall_s > 0 else math.nan
    n_out = [output_tokens(r) for r in ok]
    latencies = {TTFT_S: [r.chunk_s[0] - r.sent_s for r in ok], E2E_S: [r.chunk_s[-1] - r.sent_s for r in ok],
                 TPOT_S: [(r.chunk_s[-1] - r.chunk_s[0]) / (n - 1) for r, n in zip(ok, n_out, strict=True) if n > 1]}
    if run.endpoint == "images":  # one body per answer: its e2e is the only latency
        latencies = {E2E_S: latencies[E2E_S]}
    bounds, bound_notes = detail.percentile_bounds(latencies)
    sources, source_notes = detail.token_sources(ok) if run.endpoint != "images" else ([], [])
    cpu_fraction = client_cpu_fraction(run)
    metrics = [
        detail.metric(TTFT_S, "s", [r.chunk_s[0] - r.sent_s for r in ok], "first content chunk − send"),
        detail.metric(E2E_S, "s", [r.chunk_s[-1] - r.sent_s for r in ok], "last content chunk − send"),
        detail.metric(TTFT_FROM_INTENDED_S, "s", [r.chunk_s[0] - r.intended_s for r in ok],
                "first content chunk − intended send (coordinated omission)"),
        detail.metric(E2E_FROM_INTENDED_S, "s", [r.chunk_s[-1] - r.intended_s for r in ok],
                "last content chunk − intended send (coordinated omission)"),
        detail.metric(TPOT_S, "s", [(r.chunk_s[-1] - r.chunk_s[0]) / (n - 1) for r, n in zip(ok, n_out, strict=True)
                                if n > 1], "(e2e − ttft) / (output_tokens − 1), first token excluded"),
        detail.metric("chunk_gap_s", "s", [b - a for r in ok for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False)],
                "every gap between consecutive content chunks, pooled"),
        detail.metric("tokens_per_chunk", "tokens", [n / len(r.chunk_s) for r, n in zip(ok, n_out, strict=True)],
                "output tokens / content chunks, per request"),
        detail.metric("send_lag_s", "s", [r.sent_s - r.intended_s - r.connect_s for r in measured],
                "actual send (bytes written) − intended send − time opening a new connection"),
        detail.metric("connect_s", "s", [r.connect_s for r in measured if r.connect_s > 0],
                "opening a new connection, for the requests that needed one"),
        detail.metric("client_loop_lag_s", "s", run.loop_lag_s, "how late the client's 10 ms loop timer fired"),
        _single("output_tokens_per_s", "tokens/s", sum(n_out) / duration, "Σ output tokens / run duration", True),
        _single("requests_per_s", "requests/s", len(ok) / duration, "successful requests / run duration", True),
        *_goodput(ok, n_out, slo, duration),
        _single("error_rate", "fraction", (len(counted) - len(ok)) / len(counted) if counted else 0.0,
                "failed requests / measured requests (cancelled at the deadline excluded)"),
        _single("client_cpu_s", "s", run.client_cpu_s, "process CPU seconds over the measured phase"),
        _single("client_cpu_fraction", "fraction", cpu_fraction,
                "CPU seconds of the client's event-loop thread / run duration, the busiest one with --workers "
                "(1.0 = one core busy)"),
        _single("client_workers", "processes", run.workers, "client processes sharing the schedule")
        if run.workers > 1 else None,
        *_token_metrics(ok), *sources, *bounds,
        *(detail.steady_metrics(run, ok, n_out) if run.endpoint != "images" else ()),
        *detail.prefix_metrics(ok, [r.prompt_tokens or r.prompt_tokens_server or 0 for r in ok]),
        *detail.turn_metrics(ok), *detail.server_metric_list(run, sum(n_out)),
        *(detail.image_metrics(ok, duration) if run.endpoint == "images" else ()),
        *_error_metrics(counted, ok),
        _single(CANCELLED_AT_DEADLINE, "requests", len(measured) - len(counted),
                "measured requests still running when the duration ended or the level was stopped (not in any "
                "statistic)") if len(counted) < len(measured) else None,
    ]
    kept = tuple(m for m in metrics if m is not None and not (run.endpoint == "images" and m.name in TOKEN_ONLY))
    case = Case(name=case_name(run), params=case_params(run), metrics=kept,
                wall_s=run.wall_s, notes=run.notes + _usage_notes(ok) + tuple(source_notes + bound_notes))
    valid, reasons = validity(run, case, max_lag_s=max_lag_s, max_error_rate=max_error_rate,
                              percentile=percentile_needed)
    missing = not_measured(run, {m.name: m for m in kept})
    verdict = (VALID_NOTE,) if valid and not missing else tuple(f"{INVALID_PREFIX}{r}" for r in reasons)
    verdict += tuple(f"{NOT_MEASURED_PREFIX}{m}" for m in missing)
    held = held_up(run, {m.name: m for m in kept})
    return case.model_copy(update={"notes": case.notes + ((held,) if held else ()) + verdict})


def validity(run: LoadRun, case: Case, *, max_lag_s: float = MAX_LAG_S, max_error_rate: float = MAX_ERROR_RATE,
             percentile: float = 95) -> tuple[bool, list[str]]:
    """(valid, reasons): the client kept its schedule, errors stayed rare, enough samples for the percentile.
    Only the checks that ran: one that could not is in `not_measured`, and the level is then not valid."""
    reasons: list[str] = []
    values = {m.name: m for m in case.metrics}
    lag = values.get("send_lag_s")
    limit = lag_limit_s(run, max_lag_s)
    if lag is not None and lag.summary is not None and lag.summary.p95 > limit:
        reasons.append(f"the client fell behind its schedule: P95 send lag {lag.summary.p95 * 1e3:.1f} ms > "
                       f"{limit * 1e3:.1f} ms (lower the rate or concurrency, or use a bigger client machine)")
    reasons += saturation(run, values)
    if run.stopped:
        reasons.append(f"stopped early, {run.stopped}")
    error_rate = values["error_rate"].value
    if error_rate > max_error_rate:
        reasons.append(f"error rate {error_rate:.1%} > {max_error_rate:.1%}")
    needed = samples_needed(percentile)
    ok = successful(run)
    if len(ok) < needed:
        reasons.append(f"{len(ok)} successful request(s); P{percentile:g} needs at least {needed}")
    reasons += count_problems(ok, max_error_rate)
    rate_name = "images_per_s" if run.endpoint == "images" else "output_tokens_per_s"
    throughput = values[rate_name].value if rate_name in values else 0.0
    if ok and not (math.isfinite(throughput) and throughput > 0):
        unit = "images/s" if run.endpoint == "images" else "tokens/s"
        reasons.append(f"output throughput {throughput:g} {unit} is not a positive number")
    return not reasons, reasons


def not_measured(run: LoadRun, values: dict[str, Metric]) -> list[str]:
    """The gate's checks that could not run, each with why and what to do; a level with any is not valid.

    The client's saturation is judged from the lag of a `LAG_TICK_S` timer of its event loop (`saturation`):
    a level that ended before the first tick fired (and whose loop was never late enough to leave a tick
    overdue at its end) has no lag sample, so whether the client kept up is unknown, not passed."""
    lag = values.get("client_loop_lag_s")
    if lag is not None and lag.summary is not None:
        return []
    return [f"the client's saturation: the level lasted {run.wall_s * 1e3:.1f} ms and the lag monitor of its "
            f"event loop (a {LAG_TICK_S * 1e3:g} ms timer) took no sample, so whether the client kept up is "
            "unknown; the level is neither valid nor invalid (send more requests, --requests N, or give the "
            "level a --duration)"]


def client_cpu_fraction(run: LoadRun) -> float:
    """CPU seconds / run duration of the busiest event loop (one thread each; its process's CPU when unknown)."""
    if run.wall_s <= 0:
        return 0.0
    return max(run.loop_cpu_s or run.worker_cpu_s or (run.client_cpu_s,)) / run.wall_s


def saturation(run: LoadRun, values: dict[str, Metric]) -> list[str]:
    """The client's loop running late while busy, or while kept waiting for a CPU: either way its queueing is
    inside every latency it records. The two are told apart: the first is the client's own load (fewer
    requests per process), the second other processes on the client's machine."""
    lag = values.get("client_loop_lag_s")
    loop_p95 = lag.summary.p95 if lag is not None and lag.summary is not None else 0.0
    if loop_p95 <= SATURATED_LOOP_LAG_S:
        return []
    used, wanted, busy = values["client_cpu_fraction"].value, loop_demand_fraction(run), busy_when_late(run)
    late = f"ran {loop_p95 * 1e3:.1f} ms late (P95)"
    if used >= SATURATED_CPU_FRACTION or busy >= SATURATED_CPU_FRACTION:
        how = (f"used {used:.2f} of a core" if used >= SATURATED_CPU_FRACTION else
               f"was running its own work for {busy:.2f} of the time it was late ({used:.2f} of a core overall)")
        return [f"the client was saturated: its event loop {how} and {late}, so its own queueing is inside the "
                "latencies (use --workers N, a lower level, or a client machine with cores to spare)"]
    if wanted >= SATURATED_CPU_FRACTION:
        return [f"the client was kept waiting for a CPU: its event loop was ready to run for {wanted:.2f} of the "
                f"run but ran for {used:.2f}, as other processes held the cores, and {late}, so that wait is inside "
                "the latencies (run the client where it has a core to itself)"]
    return []


def held_up(run: LoadRun, values: dict[str, Metric]) -> str | None:
    """A note where the loop ran late although it was neither busy with its own work nor kept waiting for a
    CPU (`saturation` said nothing): its time went to another thread of its process holding the interpreter,
    the hypervisor, or a blocking call. Not a reason to refuse the run, since the cause is outside what the
    client records, but the latencies may hold up to that much delay, so the reader is told."""
    lag = values.get("client_loop_lag_s")
    loop_p95 = lag.summary.p95 if lag is not None and lag.summary is not None else 0.0
    if loop_p95 <= SATURATED_LOOP_LAG_S or saturation(run, values):
        return None
    return (f"the client's event loop ran {loop_p95 * 1e3:.1f} ms late (P95) while using "
            f"{values['client_cpu_fraction'].value:.2f} of a core and neither busy through its late ticks nor "
            "waiting for a CPU: something outside it held it (another thread of the process, the hypervisor), "
            "so latencies may hold up to that much of the client's delay")


def busy_when_late(run: LoadRun) -> float:
    """The loop thread's CPU share over the lag ticks that fired late: near 1, its own callbacks made it late
    (a run can average under 0.9 of a core while waiting on the server, yet queue hundreds of ms whenever
    data comes); 0 where the samples were not recorded."""
    if len(run.loop_lag_busy) != len(run.loop_lag_s):
        return 0.0
    late = [b for lag, b in zip(run.loop_lag_s, run.loop_lag_busy, strict=True) if lag > SATURATED_LOOP_LAG_S]
    return sum(late) / len(late) if late else 0.0


def loop_demand_fraction(run: LoadRun) -> float:
    """(CPU + run-queue wait) / duration of the busiest event-loop thread: the share of a core it wanted."""
    if run.wall_s <= 0 or not run.loop_wait_s or len(run.loop_wait_s) != len(run.loop_cpu_s):
        return 0.0
    return max(c + w for c, w in zip(run.loop_cpu_s, run.loop_wait_s, strict=True)) / run.wall_s


def count_problems(ok: list[RequestRecord], max_error_rate: float = MAX_ERROR_RATE) -> list[str]:
    """The server's token counts against its stream (`counts`): any impossible count, or outputs not pinned."""
    reasons = []
    impossible = [r for r in ok if r.count_issue]
    if impossible:
        reasons.append(f"the server's token counts are impossible on {len(impossible)} of {len(ok)} request(s) "
                       f"({impossible[0].count_issue}): its throughput cannot be trusted")
    short = [r for r in ok if short_output(_pinned_count(r), r.max_tokens, r.pinned)]
    if len(short) > max_error_rate * len(ok):
        r = short[0]
        reasons.append(f"{len(short)} of {len(ok)} request(s) returned far fewer tokens than pinned (e.g. "
                       f"{_pinned_count(r)} of {r.max_tokens}) although the server accepted ignore_eos/min_tokens: "
                       "output lengths are not pinned, so throughput is not comparable")
    return reasons


def _pinned_count(r: RequestRecord) -> int | None:
    """Tokens to hold against max_tokens: the server's count, else the tokenizer's (chunks may hold several)."""
    return r.output_tokens_server if r.output_tokens_server is not None else r.output_tokens_client


def _usage_notes(ok: list[RequestRecord]) -> tuple[str, ...]:
    ignored = [r.usage_ignored for r in ok if r.usage_ignored]
    if not ignored:
        return ()
    return (f"the server's usage was ignored on {len(ignored)} request(s) ({ignored[0]}); output tokens counted "
            "from the tokenizer or the content chunks",)


def mark_interrupted(case: Case, why: str) -> Case:
    """A level cut short by an interrupt: its finished requests are kept, and it is not a valid measurement."""
    notes = tuple(n for n in case.notes if n != VALID_NOTE)
    return case.model_copy(update={"notes": (*notes, f"{INVALID_PREFIX}{why} before the level ended")})


def samples_needed(percentile: float) -> int:
    """Fewest samples whose top 1 − p tail holds at least one sample: P95 → 20, P99 → 100."""
    return max(1, math.ceil(100 / (100 - percentile) - 1e-9)) if percentile < 100 else 1000


def lag_limit_s(run: LoadRun, max_lag_s: float) -> float:
    if run.shape.rate_rps is None:
        return max_lag_s
    return min(max_lag_s, max(LAG_FRACTION / run.shape.rate_rps, LAG_FLOOR_S))


def case_name(run: LoadRun) -> str:
    s = run.shape
    if s.kind == "concurrency":
        return f"concurrency {s.concurrency}"
    if s.kind == "sessions":
        return f"{s.concurrency} users"
    if s.kind == "trace":
        return f"trace ×{s.speedup:g}"
    burst = f", k={s.burstiness:g}" if s.kind == "gamma" else ""
    return f"{s.kind} {s.rate_rps:g} rps{burst}"


def case_params(run: LoadRun) -> dict[str, str | int | float | bool | None]:
    s = run.shape
    params: dict[str, str | int | float | bool | None] = {
        "arrival": s.kind, "concurrency": s.concurrency, "rate_rps": s.rate_rps,
        "burstiness": s.burstiness if s.kind == "gamma" else None, "requests": s.requests,
        "duration_s": s.duration_s, "warmup": s.warmup_requests}
    if s.kind == "trace":
        params["speedup"] = s.speedup
    if s.kind == "sessions":
        params["think_s"] = s.think_s
    if run.workers > 1:
        params["workers"] = run.workers
    return params


def _meets(r: RequestRecord, n: int, slo: Slo | None) -> bool:
    if slo is None:
        return True
    ttft, e2e = r.chunk_s[0] - r.intended_s, r.chunk_s[-1] - r.intended_s
    tpot = (r.chunk_s[-1] - r.chunk_s[0]) / (n - 1) if n > 1 else 0.0  # vLLM: N_out ≤ 1 counts as TPOT 0
    return ((slo.ttft_p95_s is None or ttft <= slo.ttft_p95_s) and (slo.tpot_p95_s is None or tpot <= slo.tpot_p95_s)
            and (slo.e2e_p95_s is None or e2e <= slo.e2e_p95_s))


def _goodput(ok: list[RequestRecord], n_out: list[int], slo: Slo | None, duration: float) -> list[Metric | None]:
    """Goodput exists only against an SLO (DistServe); without one it is not reported."""
    if slo is None:
        return []
    good = [n for r, n in zip(ok, n_out, strict=True) if _meets(r, n, slo)]
    return [_single("goodput_rps", "requests/s", len(good) / duration,
                    "requests meeting every SLO bound (from the intended send) / run duration", True),
            _single("goodput_output_tokens_per_s", "tokens/s", sum(good) / duration,
                    "output tokens of requests meeting every SLO bound / run duration", True)]


def _token_metrics(ok: list[RequestRecord]) -> list[Metric | None]:
    server = [r.output_tokens_server for r in ok if r.output_tokens_server is not None]
    client = [r.output_tokens_client for r in ok if r.output_tokens_client is not None]
    both = [r for r in ok if r.output_tokens_server is not None and r.output_tokens_client is not None]
    mismatch = sum(r.output_tokens_server != r.output_tokens_client for r in both) / len(both) if both else None
    return [
        _single("output_tokens_server", "tokens", sum(server), f"from server usage ({len(server)} requests)")
        if server else None,
        _single("output_tokens_client", "tokens", sum(client), f"by the local tokenizer ({len(client)} requests)")
        if client else None,
        _single("token_count_mismatch_rate", "fraction", mismatch,
                "requests whose server and tokenizer counts differ") if mismatch is not None else None,
    ]


def _error_metrics(counted: list[RequestRecord], ok: list[RequestRecord]) -> list[Metric | None]:
    good = {id(r) for r in ok}
    kinds = Counter((r.error or "empty: no content").split(":", 1)[0] for r in counted if id(r) not in good)
    return [_single(f"errors_{kind}", "requests", count, "measured requests that failed this way")
            for kind, count in sorted(kinds.items())]


def _single(name: str, unit: str, value: float, note: str, higher: bool = False) -> Metric:
    return Metric(name=name, unit=unit, value=0.0 if math.isnan(value) else value, higher_is_better=higher, note=note)


def p95(case: Case, name: str) -> float | None:
    """The P95 of one metric of a case, or None when it was not measured."""
    for m in case.metrics:
        if m.name == name and m.samples:
            return percentile(m.samples, 95)
    return None
