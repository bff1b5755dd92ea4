"""Sweeps over load levels and the search for the most load that still meets the SLO.

`search_max_load` bisects over concurrency (integers) or request rate (floats), assuming latency
grows with load (docs/measurement.md §2.7: users ask for "the max sustainable load under my
SLO"; GuideLLM's sweep only samples the range). It measures the lowest and the highest level
first, then halves the interval between the highest passing and the lowest failing level, keeping
every measured case. A level passes when the P95 of each SLO metric (`summary.p95` of the case's
`ttft_s`, `tpot_s`, `e2e_s`) is within its target and the case did not fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.results.schema import E2E_FROM_INTENDED_S, E2E_S, TPOT_S, TTFT_FROM_INTENDED_S, TTFT_S, Case, Metric
from gpuscout.stats import percentile
from gpuscout.workload.job import Slo

Level = int | float
Shape = TypeVar("Shape")
Outcome = Literal["found", "lowest_fails", "ceiling_not_reached"]
LatencyFrom = Literal["send", "intended"]

# SLO field → metric name measured from the actual send, and from the intended send time.
_SLO_METRICS = (("ttft_p95_s", TTFT_S, TTFT_FROM_INTENDED_S), ("tpot_p95_s", TPOT_S, TPOT_S),
                ("e2e_p95_s", E2E_S, E2E_FROM_INTENDED_S))


class SearchStep(Frozen):
    """One measured level: its case, whether it met the SLO, and why not."""

    level: Level
    passed: bool
    reasons: tuple[str, ...]  # each missed target, e.g. "P95 ttft_s 0.512 s > 0.3 s"
    case: Case


class SearchResult(Frozen):
    best_level: Level | None  # the highest level that met every target; None when even the lowest failed
    best_case: Case | None
    goodput_rps: float | None  # the best case's goodput_rps metric, when it has one
    outcome: Outcome
    message: str  # the verdict in words, e.g. "the ceiling was not reached"
    steps: tuple[SearchStep, ...]  # every measured level, in the order measured

    @property
    def cases(self) -> tuple[Case, ...]:
        return tuple(step.case for step in self.steps)


def sweep(levels: list[Level], make_shape: Callable[[Level], Shape],
          run_one: Callable[[Shape], Case]) -> list[Case]:
    """Run every level in the order given and return their cases."""
    if not levels or any(level <= 0 for level in levels):
        raise SpecError(f"Sweep levels {levels} are not all positive.",
                        "A sweep runs one case per concurrency or request rate.",
                        "Pass positive levels, e.g. --sweep 1,2,4,8.")
    return [run_one(make_shape(level)) for level in levels]


def search_max_load(run_one: Callable[[Shape], Case], make_shape: Callable[[Level], Shape], *, slo: Slo,
                    lo: Level, hi: Level, steps: int, latency_from: LatencyFrom = "send") -> SearchResult:
    """The highest level in [lo, hi] whose P95 latencies meet `slo`, by bisection.

    Integer bounds search integers (concurrency); otherwise rates. `steps` bounds the bisection
    runs after the two ends (integer searches also stop when the gap closes to one). With
    `latency_from="intended"` TTFT and e2e are read from the intended send time, so a lagging
    client cannot hide queueing (docs/measurement.md §1).
    """
    _check_search(slo, lo, hi, steps)
    integer = isinstance(lo, int) and isinstance(hi, int)
    measured: list[SearchStep] = []

    def measure(level: Level) -> bool:
        case = run_one(make_shape(level))
        reasons = slo_misses(case, slo, latency_from=latency_from)
        measured.append(SearchStep(level=level, passed=not reasons, reasons=tuple(reasons), case=case))
        return not reasons

    if not measure(lo):
        return _result(None, measured, "lowest_fails",
                       f"even the lowest level {lo:g} misses the SLO ({'; '.join(measured[-1].reasons)})")
    if hi == lo or measure(hi):
        return _result(hi, measured, "ceiling_not_reached",
                       f"the highest level tried, {hi:g}, meets the SLO: the ceiling was not reached")
    good, bad = lo, hi
    for _ in range(steps):
        mid: Level = (good + bad) // 2 if integer else (good + bad) / 2
        if mid in (good, bad):
            break
        good, bad = (mid, bad) if measure(mid) else (good, mid)
    return _result(good, measured, "found", f"highest level meeting the SLO: {good:g} (fails at {bad:g})")


def slo_misses(case: Case, slo: Slo, *, latency_from: LatencyFrom = "send") -> list[str]:
    """Every SLO target the case misses, in words; empty when it meets them all."""
    if case.failure is not None:
        return [f"the case failed: {case.failure.kind}: {case.failure.message}"]
    metrics = {metric.name: metric for metric in case.metrics}
    misses = []
    for field, from_send, from_intended in _SLO_METRICS:
        target = getattr(slo, field)
        if target is None:
            continue
        name = from_intended if latency_from == "intended" else from_send
        p95 = _p95(metrics.get(name))
        if p95 is None:
            misses.append(f"no {name} samples to compare with the P95 target {target:g} s")
        elif p95 > target:
            misses.append(f"P95 {name} {p95:.4g} s > {target:g} s")
    return misses


def _p95(metric: Metric | None) -> float | None:
    if metric is None:
        return None
    if metric.summary is not None:
        return metric.summary.p95
    return percentile(metric.samples, 95) if metric.samples else None


def _result(best: Level | None, measured: list[SearchStep], outcome: Outcome, message: str) -> SearchResult:
    best_case = next((s.case for s in reversed(measured) if s.level == best and s.passed), None)
    goodput = None
    if best_case is not None:
        goodput = next((m.value for m in best_case.metrics if m.name == "goodput_rps"), None)
    return SearchResult(best_level=best, best_case=best_case, goodput_rps=goodput, outcome=outcome,
                        message=message, steps=tuple(measured))


def _check_search(slo: Slo, lo: Level, hi: Level, steps: int) -> None:
    if slo.ttft_p95_s is None and slo.tpot_p95_s is None and slo.e2e_p95_s is None:
        raise SpecError("The SLO search has no target.", "It looks for the most load that meets P95 latency targets.",
                        "Pass at least one of --ttft-p95, --tpot-p95, --e2e-p95.")
    if not 0 < lo <= hi:
        raise SpecError(f"Search bounds {lo:g}..{hi:g} are not 0 < low ≤ high.",
                        "The search bisects between the lowest and highest load.",
                        "Pass a positive low bound no higher than the high bound.")
    if steps < 0:
        raise SpecError(f"Search steps {steps} is negative.", "Steps count the bisection runs.", "Pass steps ≥ 0.")
