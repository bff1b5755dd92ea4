"""Statistics of raw samples: percentiles, confidence intervals, spread, bootstrap ratios.

Pure Python and seeded, so results are reproducible and the module is cheap to import.

* Percentiles use linear interpolation between order statistics (numpy's default, "type 7").
* The 95% CI of the mean is mean ± t(0.975, n−1) · s/√n (AIPerf's multi-run CI;
  docs/measurement.md §1).
* Spread is IQR / median; above 10% it is flagged, as torch.utils.benchmark warns.
* The CI of a ratio of two machines' means is a seeded percentile bootstrap over both samples.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

SPREAD_FLAG = 0.10  # torch.utils.benchmark warns when IQR/median > 10%

# Two-sided 97.5% quantiles of Student's t for small n − 1; 1.96 beyond the table.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

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


def bootstrap_ratio_ci(a: Sequence[float], b: Sequence[float], *, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float, float]:
    """mean(b) / mean(a) and its 95% percentile-bootstrap interval (a and b resampled independently)."""
    if not a or not b:
        raise ValueError("bootstrap of empty samples")
    point = statistics.fmean(b) / statistics.fmean(a)
    rng = random.Random(seed)
    ratios = sorted(
        statistics.fmean(rng.choices(b, k=len(b))) / statistics.fmean(rng.choices(a, k=len(a)))
        for _ in range(resamples)
    )
    return point, percentile(ratios, 2.5), percentile(ratios, 97.5)
