"""The harness: one process per case, failures recorded (never raised), timing counts, statistics."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

from gpuscout.errors import UnsupportedHere
from gpuscout.measure.harness import (
    BenchSettings,
    PlannedCase,
    classify_failure,
    derived_metric,
    run_isolated,
    time_first_then_repeats,
    time_repeats,
    timed_metric,
)
from gpuscout.measure.progress import Advance, no_progress, progress_for
from gpuscout.results.schema import Case, Metric

SIZE = {"micro_batch": 8, "seq_len": 4096}


# Case functions run in a spawned child, so they live at module level (pickled by reference).
def ok_case(name: str) -> Case:
    return Case(name=name, params={"x": 1}, metrics=(Metric(name="step_s", unit="s", value=0.5),))


def crashing_case(name: str) -> Case:
    raise ValueError(f"bad shape in {name}")


def oom_case(name: str) -> Case:
    raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")


def dying_case(name: str) -> Case:
    os._exit(3)


def sleeping_case(name: str) -> Case:
    time.sleep(30)
    return ok_case(name)


def unsupported_case(name: str) -> Case:
    raise UnsupportedHere("QLoRA needs CUDA")


def test_run_isolated_returns_the_childs_case() -> None:
    case = run_isolated(ok_case, "a", case="a", size=SIZE)
    assert case.failure is None and case.metrics[0].value == 0.5
    assert case.wall_s > 0  # the parent's view: process start, imports and the case


@pytest.mark.parametrize(("fn", "kind", "words"), [
    (crashing_case, "crash", "ValueError: bad shape in c"),
    (oom_case, "oom", "out of memory"),
    (dying_case, "crash", "exit code 3"),
    (unsupported_case, "unsupported", "QLoRA needs CUDA"),
])
def test_failures_are_recorded_with_the_size_that_failed(fn: object, kind: str, words: str) -> None:
    case = run_isolated(fn, "c", case="c", size=SIZE)  # type: ignore[arg-type]
    assert case.failure is not None
    assert case.failure.kind == kind
    assert words in case.failure.message
    assert case.failure.size == SIZE and case.params == SIZE


def test_a_hard_death_does_not_stop_the_next_case() -> None:
    from gpuscout.measure.bench import run_planned

    plan = [PlannedCase("dies", dying_case, ("dies",), SIZE), PlannedCase("crashes", crashing_case, ("crashes",)),
            PlannedCase("ok", ok_case, ("ok",))]
    cases, complete, notes = run_planned(plan, BenchSettings(), progress=None)
    assert [c.failure.kind if c.failure else None for c in cases] == ["crash", "crash", None]
    assert complete and not notes


def test_run_planned_reports_each_case_to_the_display_it_is_given() -> None:
    """The bench draws nothing itself: it opens the display it was given for every case run and
    reports each case as it starts and ends (report.progress draws the bar)."""
    from gpuscout.measure.bench import run_planned

    seen: list[tuple[str, bool]] = []
    opened: list[int] = []

    @contextlib.contextmanager
    def display(total: int) -> Iterator[Advance]:
        opened.append(total)
        yield lambda name, done: seen.append((name, done))

    plan = [PlannedCase("a", ok_case, ("a",)), PlannedCase("b", ok_case, ("b",))]
    cases, complete, _ = run_planned(plan, BenchSettings(runs=2), progress=display)
    assert complete and len(cases) == 2 and opened == [4]
    assert seen == [(f"{n} (run {r} of 2)", done) for r in (1, 2) for n in ("a", "b") for done in (False, True)]


def test_progress_for() -> None:
    def display(total: int) -> contextlib.AbstractContextManager[Advance]:
        return no_progress(total)

    assert progress_for(display) is display
    assert progress_for(None) is no_progress


def test_a_case_past_its_timeout_is_killed_and_recorded() -> None:
    start = time.perf_counter()
    case = run_isolated(sleeping_case, "slow", case="slow", size=SIZE, timeout_s=2.0)
    assert case.failure is not None and case.failure.kind == "timeout"
    assert time.perf_counter() - start < 15


def test_classify_failure() -> None:
    assert classify_failure(MemoryError()) == "oom"
    assert classify_failure(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried")) == "oom"
    assert classify_failure(UnsupportedHere("x")) == "unsupported"
    assert classify_failure(NotImplementedError("x")) == "unsupported"
    assert classify_failure(KeyboardInterrupt()) == "interrupted"
    assert classify_failure(ValueError("x")) == "crash"


def test_time_repeats_warms_up_then_times_each_repeat() -> None:
    calls: list[int] = []
    samples = time_repeats(lambda: calls.append(1), warmup=3, repeats=5, device="cpu")
    assert len(calls) == 8 and len(samples) == 5 and all(s >= 0 for s in samples)


@pytest.mark.parametrize(("warmup", "calls_expected"), [(0, 4), (1, 5), (3, 7)])
def test_first_step_is_the_first_call(warmup: int, calls_expected: int) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        time.sleep(0.02 if len(calls) == 1 else 0.0)  # the first call is the slow, cold one

    first, samples = time_first_then_repeats(step, warmup=warmup, repeats=4, device="cpu")
    assert len(calls) == calls_expected and len(samples) == 4
    assert first >= 0.02
    assert (samples[0] == first) == (warmup == 0)


def test_metrics_keep_raw_samples_and_summaries() -> None:
    m = timed_metric("step_s", "s", [1.0, 1.1, 0.9, 1.0])
    assert m.value == pytest.approx(1.0) and m.samples == (1.0, 1.1, 0.9, 1.0)
    assert m.summary is not None and m.summary.n == 4 and m.summary.ci95_low < 1.0 < m.summary.ci95_high
    d = derived_metric("tokens_per_s", "tokens/s", [100.0, 200.0], extrapolated=True)
    assert d.higher_is_better and d.extrapolated and d.summary is not None and d.summary.p50 == 150.0


def test_settings_reject_zero_repeats() -> None:
    with pytest.raises(ValueError, match="repeats"):
        BenchSettings(repeats=0)
