"""How one measurement stands against another, and whether the difference is real.

A ratio is an "advantage" oriented by `Metric.higher_is_better` (above 1 = better than the
baseline). Its 95% confidence interval comes from the two-level bootstrap (`stats`): resample
the runs, then the samples within each run, so drift between runs (another tenant, clocks,
thermals, a busy CPU) is inside the interval; with two runs or more a side it is widened to at
least the Welch t interval over the run means, because a bootstrap over three runs under-covers.
Then, in this order (docs/measurement.md §1.4):

1. noisy — either side's runs disagree by more than `noisy_cv` (coefficient of variation of the
   run means), or a bench metric's repeats spread more than `noisy_spread` (IQR / median): the
   evidence cannot carry a verdict; more runs, a quieter machine, or the telemetry will say why;
2. no measurable difference — the interval contains 1;
3. no meaningful difference — the interval excludes 1 but the effect, or the interval's end
   nearest 1, is below `min_effect` (a difference that may be smaller than matters is not called);
4. below the noise floor — one side ran only once, so its between-run variation is unknown, and
   the effect is below `noise_floor`;
5. better / worse.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, ValidationError

from gpuscout.errors import option_error
from gpuscout.frozen import Frozen
from gpuscout.results.runs import metric_runs
from gpuscout.results.schema import Metric
from gpuscout.stats import bootstrap_ratio_ci, run_mean, welch_log_ratio_ci

BOOTSTRAP_SEED = 0  # fixed, so the same files always give the same intervals

Finding = Literal["baseline", "better", "worse", "no measurable difference", "no meaningful difference",
                  "below the noise floor", "noisy", "single reading"]
DECISIVE: frozenset[str] = frozenset({"better", "worse"})


class CompareOptions(Frozen):
    """What counts as a real difference (defaults and their reasons: docs/measurement.md §1.4)."""

    # Below 5% a difference rarely changes a decision: it is within the price differences between
    # offers of one GPU and the band of the estimate, and within drift that more runs would show.
    min_effect: float = Field(0.05, ge=0, lt=1)
    # With one run on a side, the between-run variation is unknown. Identical single runs on one
    # shared VM differed by up to 2.9× (docs/measurement.md §1.4); on a dedicated GPU a few percent.
    # A single-run difference below 25% is not called; use --runs to measure the variation instead.
    noise_floor: float = Field(0.25, ge=0, lt=10)
    # Run means that vary by more than 10% (CV) say the machine was not steady: no verdict.
    noisy_cv: float = Field(0.10, gt=0)
    # Repeats of the same bench step spread by more than 25% (IQR / median): no verdict. Load-test
    # latencies are spread by nature (queueing), so this applies to bench results only.
    noisy_spread: float = Field(0.25, gt=0)


def compare_options(**options: float) -> CompareOptions:
    """`CompareOptions` from keyword options; an invalid one is a SpecError naming its flag."""
    try:
        return CompareOptions(**options)
    except ValidationError as exc:
        raise option_error(exc, "The minimum effect and the noise floor are fractions: 0.05 is 5%.",
                           "Pass {flag} as a fraction, e.g. {flag} 0.05.") from None


class Ratio(Frozen):
    ratio: float | None  # value(this) / value(baseline), unoriented; None when the baseline is zero
    advantage: float | None  # > 1: better than the baseline (oriented by higher_is_better)
    ci95_low: float | None  # of the advantage; None without repeated samples on both sides
    ci95_high: float | None
    finding: Finding
    runs: tuple[int, int] = (1, 1)  # runs behind the baseline's figure and this one's
    reason: str = ""  # why the finding is what it is, in words


def ratio(base: Metric, other: Metric, *, options: CompareOptions, bench: bool = True,
          is_baseline: bool = False) -> Ratio:
    """How `other` stands against `base`, oriented so that an advantage above 1 means better."""
    if is_baseline:
        return Ratio(ratio=1.0, advantage=1.0, ci95_low=1.0, ci95_high=1.0, finding="baseline",
                     runs=(runs_of(base), runs_of(base)))
    base_runs, other_runs = metric_runs(base), metric_runs(other)
    base_mean, other_mean = run_mean(base_runs), run_mean(other_runs)
    runs = (len(base_runs), len(other_runs))
    if not base_mean or not other_mean:  # a ratio to zero (no errors, no goodput) is undefined
        same = base_mean == other_mean
        return Ratio(ratio=1.0 if same else None, advantage=1.0 if same else None, ci95_low=None,
                     ci95_high=None, finding="no measurable difference" if same else "single reading", runs=runs,
                     reason="both zero" if same else "one side is zero: no ratio")
    point = other_mean / base_mean
    advantage = point if base.higher_is_better else 1 / point
    if not _repeated(base_runs) or not _repeated(other_runs):
        return Ratio(ratio=point, advantage=advantage, ci95_low=None, ci95_high=None, finding="single reading",
                     runs=runs, reason="single readings: no interval")
    first, second = (base_runs, other_runs) if base.higher_is_better else (other_runs, base_runs)
    _, low, high = bootstrap_ratio_ci(first, second, seed=BOOTSTRAP_SEED)
    welch = welch_log_ratio_ci(first, second)  # few runs: the bootstrap alone under-covers
    if welch is not None:
        low, high = min(low, welch[0]), max(high, welch[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        return Ratio(ratio=point, advantage=advantage, ci95_low=None, ci95_high=None, finding="single reading",
                     runs=runs, reason="too many zero readings for an interval")
    finding, reason = judge(advantage, low, high, base, other, options=options, bench=bench)
    return Ratio(ratio=point, advantage=advantage, ci95_low=low, ci95_high=high, finding=finding, runs=runs,
                 reason=reason)


def judge(advantage: float, low: float, high: float, base: Metric, other: Metric, *, options: CompareOptions,
          bench: bool) -> tuple[Finding, str]:
    """The finding for an advantage and its interval (the order of the module docstring)."""
    noisy = noise(base, "the baseline", options, bench) or noise(other, "this side", options, bench)
    if noisy:
        return "noisy", noisy
    if low <= 1 <= high:
        return "no measurable difference", f"the 95% interval {low:.2f}–{high:.2f}× includes 1"
    effect = max(advantage, 1 / advantage) - 1
    if effect < options.min_effect:
        return "no meaningful difference", f"{effect:.1%} is below the minimum effect of {options.min_effect:.0%}"
    # The interval excludes 1 on one side; its end nearest 1 is the smallest effect it allows.
    near = (low if advantage > 1 else 1 / high) - 1
    if near < options.min_effect:
        return "no meaningful difference", (f"the 95% interval {low:.2f}–{high:.2f}× allows an effect of only "
                                            f"{near:.1%}, below the minimum effect of {options.min_effect:.0%}")
    single = runs_of(base) == 1 or runs_of(other) == 1
    if single and effect < options.noise_floor:
        return "below the noise floor", (f"one run on a side, so its between-run variation is unknown, and "
                                         f"{effect:.0%} is below the noise floor of {options.noise_floor:.0%}")
    return ("better" if advantage > 1 else "worse"), f"the 95% interval {low:.2f}–{high:.2f}× excludes 1"


def noise(metric: Metric, side: str, options: CompareOptions, bench: bool) -> str:
    """Why this side's figure is too noisy to decide on, or ""."""
    if metric.between_run_cv is not None and metric.between_run_cv > options.noisy_cv:
        return (f"{side}'s runs disagree: its run means vary by {metric.between_run_cv:.0%} "
                f"(more than {options.noisy_cv:.0%})")
    spread = metric.summary.spread if metric.summary is not None else 0.0
    if bench and spread > options.noisy_spread:
        return f"{side}'s repeats spread by {spread:.0%} (IQR / median, more than {options.noisy_spread:.0%})"
    return ""


def runs_of(metric: Metric) -> int:
    return max(len(metric.runs), 1)


def _repeated(runs: list[list[float]]) -> bool:
    """Enough readings for an interval: two runs, or one run of two samples or more."""
    return len(runs) > 1 or len(runs[0]) > 1
