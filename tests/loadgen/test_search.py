"""Sweep and SLO search against a synthetic server whose latency is a known function of load."""

from __future__ import annotations

import pytest

from gpuscout.errors import SpecError
from gpuscout.loadgen.search import Level, search_max_load, slo_misses, sweep
from gpuscout.results.schema import Case, Failure, Metric
from gpuscout.stats import summarize
from gpuscout.workload.job import Slo


def _metric(name: str, samples: list[float], *, with_summary: bool = True) -> Metric:
    return Metric(name=name, unit="s", value=sum(samples) / len(samples), samples=tuple(samples),
                  summary=summarize(samples) if with_summary else None)


def synthetic_case(level: Level) -> Case:
    """TTFT = 10 ms × level (P95 exactly that: every sample equal), TPOT 1 ms + 0.1 ms × level."""
    ttft = 0.01 * level
    return Case(name=f"load {level:g}", params={"level": level}, metrics=(
        _metric("ttft_s", [ttft] * 20),
        _metric("ttft_from_intended_s", [2 * ttft] * 20),
        _metric("tpot_s", [0.001 + 0.0001 * level] * 20, with_summary=False),
        _metric("e2e_s", [ttft + 0.1] * 20),
        Metric(name="goodput_rps", unit="requests/s", value=level * 2.0, higher_is_better=True),
    ))


class Recorder:
    def __init__(self) -> None:
        self.levels: list[Level] = []

    def __call__(self, shape: Level) -> Case:
        self.levels.append(shape)
        return synthetic_case(shape)


def test_sweep_runs_every_level_in_order() -> None:
    run = Recorder()
    cases = sweep([1, 2, 4, 8], lambda level: level, run)
    assert run.levels == [1, 2, 4, 8] and [c.params["level"] for c in cases] == [1, 2, 4, 8]
    with pytest.raises(SpecError):
        sweep([], lambda level: level, run)
    with pytest.raises(SpecError):
        sweep([1, 0], lambda level: level, run)


def test_integer_search_finds_the_exact_concurrency() -> None:
    run = Recorder()
    result = search_max_load(run, lambda level: level, slo=Slo(ttft_p95_s=0.1), lo=1, hi=64, steps=20)
    assert result.outcome == "found" and result.best_level == 10
    assert run.levels == [1, 64, 32, 16, 8, 12, 10, 11]  # bisection stops when the gap closes to one
    assert len(result.cases) == len(run.levels)  # every measured case is kept
    assert result.best_case is not None and result.best_case.params["level"] == 10
    assert result.goodput_rps == 20.0
    failed = next(s for s in result.steps if s.level == 11)
    assert not failed.passed and "P95 ttft_s" in failed.reasons[0]


def test_rate_search_bisects_floats_within_steps() -> None:
    run = Recorder()
    result = search_max_load(run, lambda level: level, slo=Slo(ttft_p95_s=0.1), lo=1.0, hi=20.0, steps=8)
    assert result.outcome == "found" and result.best_level is not None
    assert len(run.levels) == 2 + 8
    assert 10 - 19 / 2**8 <= result.best_level <= 10  # within one final interval below the true limit


def test_every_target_counts() -> None:
    tpot_bound = search_max_load(Recorder(), lambda level: level, slo=Slo(ttft_p95_s=1.0, tpot_p95_s=0.0015),
                                 lo=1, hi=64, steps=20)
    assert tpot_bound.best_level == 5  # tpot 1 ms + 0.1 ms × 5 = 1.5 ms
    e2e_bound = search_max_load(Recorder(), lambda level: level, slo=Slo(e2e_p95_s=0.14), lo=1, hi=64, steps=20)
    assert e2e_bound.best_level == 4


def test_latency_from_intended_send_time() -> None:
    result = search_max_load(Recorder(), lambda level: level, slo=Slo(ttft_p95_s=0.1), lo=1, hi=64, steps=20,
                             latency_from="intended")
    assert result.best_level == 5  # from-intended TTFT is twice the actual


def test_lowest_level_failing_is_reported() -> None:
    run = Recorder()
    result = search_max_load(run, lambda level: level, slo=Slo(ttft_p95_s=0.001), lo=2, hi=64, steps=5)
    assert result.outcome == "lowest_fails" and result.best_level is None and result.best_case is None
    assert run.levels == [2] and "even the lowest level 2" in result.message


def test_ceiling_not_reached_is_reported() -> None:
    run = Recorder()
    result = search_max_load(run, lambda level: level, slo=Slo(ttft_p95_s=5.0), lo=1, hi=64, steps=5)
    assert result.outcome == "ceiling_not_reached" and result.best_level == 64
    assert run.levels == [1, 64] and "ceiling was not reached" in result.message


def test_failed_case_and_missing_metric_miss_the_slo() -> None:
    failed = Case(name="x", params={}, failure=Failure(case="x", kind="crash", message="boom"))
    assert "failed" in slo_misses(failed, Slo(ttft_p95_s=1.0))[0]
    empty = Case(name="y", params={})
    assert "no ttft_s samples" in slo_misses(empty, Slo(ttft_p95_s=1.0))[0]


@pytest.mark.parametrize(("slo", "lo", "hi", "steps"), [
    (Slo(), 1, 8, 3), (Slo(ttft_p95_s=1.0), 0, 8, 3), (Slo(ttft_p95_s=1.0), 9, 8, 3),
    (Slo(ttft_p95_s=1.0), 1, 8, -1),
])
def test_bad_search_arguments(slo: Slo, lo: int, hi: int, steps: int) -> None:
    with pytest.raises(SpecError):
        search_max_load(Recorder(), lambda level: level, slo=slo, lo=lo, hi=hi, steps=steps)
