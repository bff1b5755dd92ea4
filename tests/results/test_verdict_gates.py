"""The verdict names a winner only when the evidence carries it (docs/measurement.md §1.4).

Each gate on known samples: runs that drift between them, a throttle in the recorded telemetry,
one run a side, a difference below the minimum effect, and the cases that must still name a winner
(a real 25% slowdown over three runs, a large single-run gap).
"""

from __future__ import annotations

import pytest

from gpuscout.errors import SpecError
from gpuscout.results.compare import compare_results
from gpuscout.results.ratios import CompareOptions, compare_options
from gpuscout.results.verdict import decide

from . import A100, BASE_TPS, bench_result, runs_case

# Three runs of one machine whose run means drift by a few percent (another tenant, clocks): the
# repeats inside each run are tight, so a one-level bootstrap would be confident about nothing.
DRIFT = (1.00, 0.97, 1.03)


def scaled(factor: float, drift: tuple[float, ...] = DRIFT) -> list[list[float]]:
    return [[t * factor * d for t in BASE_TPS] for d in drift]


def tokens_ratio(c: object) -> object:
    return next(m for m in c.cases[0].metrics if m.name == "tokens_per_s").ratios[1]  # type: ignore[attr-defined]


def test_an_a_a_comparison_with_drift_between_runs_names_no_winner() -> None:
    a = bench_result("A", cases=[runs_case(scaled(1.0))])
    b = bench_result("B", cases=[runs_case(scaled(1.0, (1.03, 1.00, 0.98)))])
    c = compare_results([a, b])
    r = tokens_ratio(c)
    assert r.runs == (3, 3) and r.ci95_low < 1 < r.ci95_high  # type: ignore[attr-defined]
    verdict = decide(c)
    assert verdict.winner is None and verdict.outcome == "no difference"
    assert any("tokens_per_s: no measurable difference" in reason for reason in verdict.reasons)
    assert "3 runs per side" in verdict.text


def test_the_same_samples_in_one_run_each_would_have_named_a_winner() -> None:
    """Why runs matter: pooled into one run, the between-run drift looks like a tight 3% lead."""
    pooled_a = [t for run in scaled(1.0, (0.97, 1.00)) for t in run]
    pooled_b = [t for run in scaled(1.0, (1.03, 1.00)) for t in run]
    c = compare_results([bench_result("A", tps=pooled_a), bench_result("B", tps=pooled_b)])
    r = tokens_ratio(c)
    assert r.finding in ("no meaningful difference", "below the noise floor")  # type: ignore[attr-defined]
    assert decide(c).winner is None


def test_a_real_25_percent_slowdown_over_three_runs_is_found_with_the_right_winner() -> None:
    a = bench_result("A", cases=[runs_case(scaled(1.0))])
    b = bench_result("B", cases=[runs_case(scaled(1 / 1.25, (1.02, 0.99, 1.00)))])
    c = compare_results([a, b])
    assert tokens_ratio(c).finding == "worse"  # type: ignore[attr-defined]
    verdict = decide(c)
    assert verdict.winner == "A" and verdict.outcome == "winner"
    assert "1.25× sooner" in verdict.text or "1.24× sooner" in verdict.text or "1.26× sooner" in verdict.text


def test_runs_that_disagree_make_the_verdict_inconclusive() -> None:
    wild = scaled(1.0, (1.0, 0.70, 1.25))  # run means vary by about 28%
    c = compare_results([bench_result("A", cases=[runs_case(scaled(1.0))]),
                         bench_result("B", cases=[runs_case([[t * 2 for t in r] for r in wild])])])
    verdict = decide(c)
    assert verdict.winner is None and verdict.outcome == "inconclusive"
    assert verdict.text.startswith("Inconclusive — noisy") and "--runs 5" in verdict.text
    # Named by its label, with its own figure, and only the noisy side.
    assert len(verdict.reasons) == 1
    assert verdict.reasons[0].startswith("tokens_per_s: B's runs disagree: its run means vary by 28%")


def test_three_results_name_each_noisy_side_once_with_its_own_figure() -> None:
    c = compare_results([bench_result("A", cases=[runs_case(scaled(1.0, (1.0, 0.7, 1.3)))]),
                         bench_result("B", cases=[runs_case(scaled(1.0))]),
                         bench_result("C", tps=BASE_TPS)])  # one run: it has no between-run variation
    reasons = decide(c).reasons
    assert len(reasons) == 1 and reasons[0].startswith("tokens_per_s: A's runs disagree: its run means vary by 30%")


def test_repeats_that_spread_widely_make_the_verdict_inconclusive() -> None:
    spread = [1000.0, 600.0, 1400.0, 700.0, 1300.0, 650.0, 1350.0, 1000.0]
    c = compare_results([bench_result("A"), bench_result("B", tps=[t * 2 for t in spread])])
    assert decide(c).outcome == "inconclusive"


def test_one_run_a_side_calls_no_difference_below_the_noise_floor() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=[t * 1.15 for t in BASE_TPS], gpu=A100)])
    r = tokens_ratio(c)
    assert r.finding == "below the noise floor" and "noise floor of 25%" in r.reason  # type: ignore[attr-defined]
    assert decide(c).winner is None
    lower = compare_results([bench_result("A"), bench_result("B", tps=[t * 1.15 for t in BASE_TPS])],
                            options=CompareOptions(noise_floor=0.10))
    assert decide(lower).winner == "B"


def test_a_large_single_run_gap_still_names_a_winner() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=[t * 1.5 for t in BASE_TPS])])
    assert decide(c).winner == "B"


def test_a_difference_below_the_minimum_effect_is_no_meaningful_difference() -> None:
    a = bench_result("A", cases=[runs_case(scaled(1.0, (1.0, 1.0, 1.0)))])
    b = bench_result("B", cases=[runs_case(scaled(1.03, (1.0, 1.0, 1.0)))])
    c = compare_results([a, b])
    r = tokens_ratio(c)
    assert r.ci95_low > 1 and r.finding == "no meaningful difference"  # type: ignore[attr-defined]
    verdict = decide(c)
    assert verdict.winner is None and "No meaningful difference" in verdict.text
    assert decide(compare_results([a, b], options=CompareOptions(min_effect=0.01))).winner == "B"


def test_an_interval_reaching_below_the_minimum_effect_names_no_winner() -> None:
    """A 6% lead whose interval allows less than 5% is not called (the A/A pair once gave 1.06×, CI 1.00–1.12×);
    the same lead with tight runs is."""
    a = bench_result("A", cases=[runs_case(scaled(1.0, (1.0, 0.99, 1.01)))])
    b = bench_result("B", cases=[runs_case(scaled(1.06, (1.02, 0.98, 1.0)))])
    r = tokens_ratio(compare_results([a, b]))
    assert 1 < r.ci95_low < 1.05 and r.advantage > 1.05  # type: ignore[attr-defined]
    assert r.finding == "no meaningful difference" and "allows an effect of only" in r.reason  # type: ignore[attr-defined]
    assert decide(compare_results([a, b])).winner is None
    tight_a = bench_result("A", cases=[runs_case(scaled(1.0, (1.0, 1.0, 1.0)))])
    tight_b = bench_result("B", cases=[runs_case(scaled(1.06, (1.0, 1.0, 1.0)))])
    assert decide(compare_results([tight_a, tight_b])).winner == "B"


def test_a_thermal_throttle_in_the_recorded_telemetry_blocks_the_verdict() -> None:
    a = bench_result("A", cases=[runs_case(scaled(1.0))])
    b = bench_result("B", gpu=A100, cases=[runs_case(scaled(0.6), gpu="a100", throttled_run=2)])
    c = compare_results([a, b])
    assert c.machines[1].disturbances and not c.machines[0].disturbances
    assert c.machines[1].disturbances[0].startswith("train, run 2: thermal throttling in 35% of busy samples")
    verdict = decide(c)
    assert verdict.winner is None and verdict.outcome == "disturbed"
    assert "telemetry shows B disturbed" in verdict.text and "--allow-diff" in verdict.text
    allowed = decide(compare_results([a, b], allow_diff=True))
    assert allowed.winner == "A" and "Caution" in allowed.text


def test_clean_telemetry_does_not_block() -> None:
    c = compare_results([bench_result("A", cases=[runs_case(scaled(1.0))]),
                         bench_result("B", cases=[runs_case(scaled(2.0))])])
    assert not any(m.disturbances for m in c.machines) and c.machines[0].telemetry_runs == 3
    assert decide(c).winner == "B"


@pytest.mark.parametrize("field", ["region", "billing"])
def test_a_region_or_billing_difference_blocks_the_verdict(field: str) -> None:
    a, b = bench_result("A"), bench_result("B", tps=[t * 2 for t in BASE_TPS])
    a = a.model_copy(update={"fixed": a.fixed.model_copy(update={field: "us-east-1" if field == "region" else
                                                                   "on-demand"})})
    b = b.model_copy(update={"fixed": b.fixed.model_copy(update={field: "eu-west-1" if field == "region" else
                                                                   "spot"})})
    verdict = decide(compare_results([a, b], allow_diff=True).model_copy(update={"allow_diff": False}))
    assert verdict.winner is None and verdict.outcome == "unfair"
    assert any(reason.startswith(f"{field}: ") for reason in verdict.reasons)


@pytest.mark.parametrize(("flag", "value"), [("min_effect", 1.5), ("noise_floor", -0.1)])
def test_an_out_of_range_option_is_a_clear_error(flag: str, value: float) -> None:
    with pytest.raises(SpecError, match="--" + flag.replace("_", "-")):
        compare_options(**{flag: value})


def test_a_side_without_telemetry_is_not_counted_as_undisturbed() -> None:
    """The disturbance gate cannot run on a side that recorded no telemetry: the verdict says so."""
    watched = bench_result("A", cases=[runs_case(scaled(1.0))])
    unwatched_case = runs_case(scaled(2.0)).model_copy(update={"telemetry": ()})
    unwatched = bench_result("B", cases=[unwatched_case], gpu=A100)
    verdict = decide(compare_results([watched, unwatched]))
    assert "Caution: B recorded no telemetry, so throttling, a degraded link or another tenant during its runs was " \
           "not checked." in verdict.text
    both = decide(compare_results([watched, bench_result("C", cases=[runs_case(scaled(2.0))], gpu=A100)]))
    assert "recorded no telemetry" not in both.text
