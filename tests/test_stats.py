"""Statistics: summaries, and the two-level bootstrap of a ratio against hand-computed cases."""

from __future__ import annotations

import random
from itertools import chain

import pytest

from gpuscout.stats import between_run_cv, bootstrap_ratio_ci, mean_ci, run_mean, summarize, welch_log_ratio_ci


def test_two_level_bootstrap_matches_a_hand_computed_distribution() -> None:
    """A: runs of constant samples 1 and 3; B: two runs of 2. Resampling A's runs gives means 1, 2, 3
    with probabilities 1/4, 1/2, 1/4 (samples within a run are all equal, so they add nothing), so
    B/A is 2, 1 or 2/3: the 95% interval runs from 2/3 to 2, and the point is 2/2 = 1."""
    point, low, high = bootstrap_ratio_ci([[1, 1], [3, 3]], [[2, 2], [2, 2]], resamples=20_000)
    assert point == 1.0 and low == pytest.approx(2 / 3) and high == pytest.approx(2.0)


def test_one_run_per_side_is_the_ordinary_bootstrap() -> None:
    rng = random.Random(1)
    a = [rng.gauss(10, 1) for _ in range(40)]
    b = [rng.gauss(12, 1) for _ in range(40)]
    point, low, high = bootstrap_ratio_ci([a], [b])
    assert low < point < high and low > 1.1  # a 20% difference with n = 40 is resolved
    assert point == pytest.approx(sum(b) / sum(a))


def test_between_run_drift_widens_the_interval() -> None:
    """The same samples, split into runs whose means drift, give a wider interval than one pooled run."""
    rng = random.Random(2)
    drift = [[rng.gauss(m, 0.2) for _ in range(20)] for m in (9.0, 10.0, 11.0)]
    steady = [[rng.gauss(10, 0.2) for _ in range(20)] for _ in range(3)]
    _, low_pooled, high_pooled = bootstrap_ratio_ci([list(chain(*steady))], [list(chain(*drift))])
    _, low_runs, high_runs = bootstrap_ratio_ci(steady, drift)
    assert high_runs - low_runs > 3 * (high_pooled - low_pooled)
    assert between_run_cv(drift) == pytest.approx(0.1, rel=0.2) and between_run_cv([[1.0]]) is None


def test_large_runs_are_resampled_from_their_normal_approximation_in_bounded_time() -> None:
    rng = random.Random(3)
    a = [[rng.gauss(1.0, 0.1) for _ in range(50_000)] for _ in range(3)]
    b = [[rng.gauss(1.05, 0.1) for _ in range(50_000)] for _ in range(3)]
    point, low, high = bootstrap_ratio_ci(a, b)
    assert low < point < high and low > 1.04 and high < 1.06


def test_run_mean_weighs_runs_equally_and_summaries_hold() -> None:
    assert run_mean([[1.0], [3.0, 3.0, 3.0]]) == 2.0
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s.n == 4 and s.mean == 2.5 and s.p50 == 2.5 and s.ci95_low < 2.5 < s.ci95_high


def test_welch_interval_on_log_run_means_matches_a_hand_computation() -> None:
    """Run means A: 1, 2 (logs 0, ln 2); B: 2, 4 (logs ln 2, ln 4). Each side's log variance over n is
    (ln 2)² / 4; Welch's dof is exactly 2, so t = 4.303. The ratio of run means is 3 / 1.5 = 2 and the
    interval is 2 · exp(±4.303 · ln 2 / √2)."""
    import math

    interval = welch_log_ratio_ci([[1.0, 1.0], [2.0, 2.0]], [[2.0], [4.0]])
    assert interval is not None
    low, high = interval
    half = 4.303 * math.log(2) / math.sqrt(2)
    assert low == pytest.approx(2 * math.exp(-half)) and high == pytest.approx(2 * math.exp(half))
    assert welch_log_ratio_ci([[1.0, 2.0]], [[2.0], [4.0]]) is None  # one run: between-run variance unknown


def test_three_runs_that_drift_widen_the_mean_interval_to_students_t() -> None:
    """Three run means 90, 100, 110: the bootstrap can only mix those three values, Student's t with
    2 degrees of freedom is 100 ± 4.303 · 10 / √3 = 100 ± 24.8."""
    low, high = mean_ci([[90.0, 90.0], [100.0, 100.0], [110.0, 110.0]])
    assert low == pytest.approx(100 - 4.303 * 10 / 3**0.5) and high == pytest.approx(100 + 4.303 * 10 / 3**0.5)


def test_reservoir_keeps_all_or_a_seeded_sample_of_the_stream() -> None:
    import random

    from gpuscout.stats import reservoir

    assert reservoir(iter(range(5)), None, random.Random(0)) == ([0, 1, 2, 3, 4], 5)
    assert reservoir(iter(range(3)), 10, random.Random(0)) == ([0, 1, 2], 3)
    kept, total = reservoir(iter(range(1000)), 10, random.Random(7))
    assert total == 1000 and len(set(kept)) == 10
    assert (kept, total) == reservoir(iter(range(1000)), 10, random.Random(7))  # the seed decides
    # Uniform: over many seeds each item of a 20-item stream is kept about half the time with at_most 10.
    counts = [0] * 20
    for seed in range(2000):
        for item in reservoir(iter(range(20)), 10, random.Random(seed))[0]:
            counts[item] += 1
    assert all(850 < c < 1150 for c in counts), counts  # 1000 expected, binomial sd ~22
