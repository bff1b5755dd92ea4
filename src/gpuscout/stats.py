"""Statistics of raw samples: percentiles, confidence intervals, spread, bootstrap ratios.

Seeded, so results are reproducible; the bootstrap uses numpy (vectorised replicates).

* Percentiles use linear interpolation between order statistics (numpy's default, "type 7").
* The 95% CI of the mean is mean ± t(0.975, n−1) · s/√n (AIPerf's multi-run CI;
  docs/measurement.md §1).
* Spread is IQR / median; above 10% it is flagged, as torch.utils.benchmark warns.
* The CI of a ratio of two machines' means is a seeded, two-level percentile bootstrap: resample
  the runs, then the samples within each chosen run, so the interval holds the variation between
  runs (another tenant, clocks, thermals) as well as within one (docs/measurement.md §1.4).
* With few runs the percentile bootstrap under-covers: it can only draw from the handful of run
  means there are. So wherever both sides have two runs or more, the interval is widened to at
  least Student's t interval over the run means (Welch's, on the log of the ratio), which is the
  standard small-sample interval for means of independent runs.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np

from gpuscout.frozen import Frozen

T = TypeVar("T")

SPREAD_FLAG = 0.10  # torch.utils.benchmark warns when IQR/median > 10%
# A run with more samples than this has its resampled mean drawn from the normal distribution the
# central limit theorem gives (mean, s/√n) instead of resampling every sample: exact enough at
# that size, and bounded work whatever a result holds.
RESAMPLE_LIMIT = 100

# Two-sided 97.5% quantiles of Student's t for small n − 1; 1.96 beyond the table.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


class Summary(Frozen):
    n: int
    mean: float
    stdev: float
    p50: float
    p95: float
    p99: float
    min: float
    max: float
    ci95_low: float
    ci95_high: float
    spread: float  # IQR / median
    spread_flag: bool


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def t975(dof: int) -> float:
    """Student's t quantile for a two-sided 95% interval (table lookup, conservative in between)."""
    if dof <= 0:
        return math.inf
    eligible = [k for k in _T975 if k <= dof]
    return _T975[max(eligible)] if dof <= 120 else 1.96


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("summary of no values")
    n = len(values)
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if n > 1 else 0.0
    half = t975(n - 1) * stdev / math.sqrt(n) if n > 1 else 0.0
    median = percentile(values, 50)
    iqr = percentile(values, 75) - percentile(values, 25)
    spread = iqr / median if median else 0.0
    return Summary(n=n, mean=mean, stdev=stdev, p50=median, p95=percentile(values, 95), p99=percentile(values, 99),
                   min=min(values), max=max(values), ci95_low=mean - half, ci95_high=mean + half,
                   spread=spread, spread_flag=spread > SPREAD_FLAG)


def run_mean(runs: Sequence[Sequence[float]]) -> float:
    """The mean of the run means: every run weighs the same, however many samples it holds."""
    return statistics.fmean(statistics.fmean(r) for r in runs)


def between_run_cv(runs: Sequence[Sequence[float]]) -> float | None:
    """Standard deviation of the run means over their mean; None with fewer than two runs."""
    if len(runs) < 2:
        return None
    means = [statistics.fmean(r) for r in runs]
    centre = statistics.fmean(means)
    return statistics.stdev(means) / abs(centre) if centre else None


def bootstrap_ratio_ci(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float, float]:
    """run_mean(b) / run_mean(a) and its 95% two-level percentile-bootstrap interval.

    Each side is resampled independently: first its runs (with replacement), then the samples
    within each chosen run. With one run per side this is the ordinary bootstrap of the samples.
    """
    if not a or not b or not all(a) or not all(b):
        raise ValueError("bootstrap of empty samples")
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # a replicate with a zero mean has no ratio
        ratios = _resampled_means(b, resamples, rng) / _resampled_means(a, resamples, rng)
    ratios = ratios[np.isfinite(ratios)]
    base = run_mean(a)
    point = run_mean(b) / base if base else math.nan
    if ratios.size < resamples / 2:  # most replicates undefined: so is the interval
        return point, math.nan, math.nan
    low, high = np.percentile(ratios, [2.5, 97.5])
    return point, float(low), float(high)


def mean_ci(runs: Sequence[Sequence[float]], *, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of run means: the two-level bootstrap (one run: of its samples),
    widened to Student's t interval over the run means when there are two runs or more."""
    if not runs or not all(runs):
        raise ValueError("interval of empty samples")
    low, high = np.percentile(_resampled_means(runs, resamples, np.random.default_rng(seed)), [2.5, 97.5])
    if len(runs) < 2:
        return float(low), float(high)
    means = [statistics.fmean(r) for r in runs]
    half = t975(len(means) - 1) * statistics.stdev(means) / math.sqrt(len(means))
    centre = statistics.fmean(means)
    return min(float(low), centre - half), max(float(high), centre + half)


def welch_log_ratio_ci(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """95% Welch t interval of run_mean(b) / run_mean(a) from the logs of the run means.

    None when a side has fewer than two runs or a run mean is not positive. The degrees of freedom
    (Welch–Satterthwaite) are rounded down, which makes t larger: conservative.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    a_means, b_means = [statistics.fmean(r) for r in a], [statistics.fmean(r) for r in b]
    if min(a_means) <= 0 or min(b_means) <= 0:
        return None
    la, lb = [math.log(x) for x in a_means], [math.log(x) for x in b_means]
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    centre = math.log(run_mean(b) / run_mean(a))
    if va + vb == 0:
        return math.exp(centre), math.exp(centre)
    dof = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    half = t975(max(int(dof), 1)) * math.sqrt(va + vb)
    return math.exp(centre - half), math.exp(centre + half)


def _resampled_means(runs: Sequence[Sequence[float]], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` bootstrap replicates of the mean of run means (two levels: runs, then samples)."""
    count = len(runs)
    chosen = rng.integers(0, count, size=(resamples, count))
    # For every run, a resampled mean for every (replicate, slot); slot k of replicate i uses run chosen[i, k].
    within = np.stack([_within_run_means(np.asarray(r, dtype=float), (resamples, count), rng) for r in runs])
    picked = np.take_along_axis(within, chosen[np.newaxis, :, :], axis=0)[0]
    means: np.ndarray = picked.mean(axis=1)
    return means


def _within_run_means(samples: np.ndarray, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Means of samples resampled with replacement, one per cell of `shape`."""
    n = samples.size
    if n == 1:
        return np.full(shape, samples[0])
    if n > RESAMPLE_LIMIT:
        return rng.normal(samples.mean(), samples.std(ddof=1) / math.sqrt(n), size=shape)
    resampled: np.ndarray = samples[rng.integers(0, n, size=(*shape, n))].mean(axis=-1)
    return resampled


def reservoir(items: Iterable[T], at_most: int | None, rng: random.Random) -> tuple[list[T], int]:
    """(a seeded uniform sample of at most `at_most` of `items` (all of them when None), how many there were).

    Algorithm R (Vitter 1985): the n-th item replaces a kept one with probability at_most / n, so a stream of
    any length is sampled holding only what is kept."""
    kept: list[T] = []
    total = 0
    for item in items:
        total += 1
        if at_most is None or len(kept) < at_most:
            kept.append(item)
        elif (slot := rng.randrange(total)) < at_most:
            kept[slot] = item
    return kept, total
