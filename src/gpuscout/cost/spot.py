"""Spot runs: interruptions, lost work and restarts, in closed form and in a seeded simulation.

The model (docs/cost.md §2.11): interruptions arrive as a Poisson process at λ per running
second of work. Work is checkpointed every C seconds; an interruption loses the work since the
last checkpoint and ends a billed segment. The next segment pays the restart overhead R
(re-provision, setup, reload) and, being a new start, the minimum charge and the rounding again.

Closed form. A chunk of c seconds of work succeeds with probability e^(−λc); failures before the
success are geometric, so it takes e^(λc) − 1 interruptions on average, and the time spent on it
(work plus wasted partial attempts) averages (e^(λc) − 1)/λ — which tends to c + λc²/2, the
"half a checkpoint interval lost per interruption" rule, when λc is small.

Bounded work, whatever the numbers (docs/cost.md §2.11). A job whose spot run would take more than
MAX_SPOT_OVERHEAD times its work (interruptions far more frequent than checkpoints) does not
finish in any useful sense: `SpotNeverFinishes` says so, with the fix, before anything overflows.
The P95 comes from the seeded simulation while it simulates at most SIMULATED_INTERRUPTIONS
interruptions over all runs; beyond that, from a normal approximation of the sum of independent
checkpoint chunks with the exact mean and variance of each (a chunk's failed attempts are
geometric, each wasting an exponential time truncated to the chunk, plus the restart overhead).
"""

from __future__ import annotations

import math
import random

from gpuscout.cost.billed_time import billed_seconds, billed_startup_s
from gpuscout.errors import GpuscoutError
from gpuscout.frozen import Frozen
from gpuscout.hardware.offers import Offer, interruption_rate
from gpuscout.units import HOUR_S

MAX_SPOT_OVERHEAD = 10.0  # a spot run longer than 10× its work is reported as never finishing
MAX_EXPONENT = 50.0  # λ·c above this: e^50 ≈ 5e21 restarts per chunk; refused before exp() overflows
SIMULATED_INTERRUPTIONS = 200_000  # simulation budget over all runs; beyond it, the normal approximation
Z_95 = 1.6448536269514722  # one-sided 95% quantile of the standard normal


class SpotNeverFinishes(GpuscoutError):
    """Spot interruptions come so often, against the checkpoint interval, that the job never finishes."""


class SpotOutcome(Frozen):
    billed_s: float
    running_s: float
    interruptions: float


def _chunks(work_s: float, interval_s: float) -> tuple[int, float]:
    full = int(work_s // interval_s)
    return full, work_s - full * interval_s


def _per_chunk(full: int, value: float | None) -> float:
    """`full` chunks of `value` each; none when the interval is longer than the work (a checkpoint
    interval of 10^8 s means "never within this job"), whose per-chunk figure is then never computed."""
    return full * value if full and value is not None else 0.0


def expected_chunk_s(chunk_s: float, rate_per_s: float) -> float:
    """Expected time to get `chunk_s` of work checkpointed, including wasted partial attempts."""
    return math.expm1(rate_per_s * chunk_s) / rate_per_s


def check_spot_finishes(offer: Offer, work_s: float) -> None:
    """Raise `SpotNeverFinishes` when the expected spot run exceeds MAX_SPOT_OVERHEAD × the work."""
    lam = interruption_rate(offer) / HOUR_S
    chunk = min(offer.checkpoint_interval_s, work_s)
    exponent = lam * chunk
    overhead = math.inf if exponent > MAX_EXPONENT else expected_chunk_s(chunk, lam) / chunk
    if overhead > MAX_SPOT_OVERHEAD:
        every_min = 60.0 / interruption_rate(offer)
        raise SpotNeverFinishes(
            f"{offer.id}: spot interruptions every {every_min:.3g} min on average against checkpoints every "
            f"{offer.checkpoint_interval_s / 60:.3g} min: the job would run "
            + ("more than 10^20 times" if math.isinf(overhead) else f"{overhead:,.0f}×") + " its work time.",
            "Work since the last checkpoint is lost at every interruption; when interruptions come much more "
            "often than checkpoints, almost no chunk of work ever completes.",
            "Checkpoint more often (checkpoint_interval_s well below the mean time between interruptions), "
            "check interruptions_per_hour, or use on-demand capacity.")


def expected_spot_run(offer: Offer, work_s: float) -> SpotOutcome:
    """Expected billed time and interruptions; rounding is approximated as half an increment per segment."""
    check_spot_finishes(offer, work_s)
    lam = interruption_rate(offer) / HOUR_S
    full, rest = _chunks(work_s, offer.checkpoint_interval_s)
    interval = offer.checkpoint_interval_s if full else None  # check_spot_finishes bounded λ·interval then
    interruptions = _per_chunk(full, math.expm1(lam * interval) if interval else None) + math.expm1(lam * rest)
    working = _per_chunk(full, expected_chunk_s(interval, lam) if interval else None) + (
        expected_chunk_s(rest, lam) if rest else 0)
    running = billed_startup_s(offer) + working + interruptions * offer.restart_overhead_s + offer.idle_tail_s
    rounding = (interruptions + 1) * offer.billing_increment_s / 2 if offer.billing_increment_s > 1 else 0.0
    return SpotOutcome(billed_s=running + rounding, running_s=running, interruptions=interruptions)


def spot_p95_billed_s(offer: Offer, work_s: float, *, runs: int, seed: int) -> tuple[float, str]:
    """The 95th percentile of the billed time, and how it was found (simulated, or approximated)."""
    expected = expected_spot_run(offer, work_s)
    if expected.interruptions * runs <= SIMULATED_INTERRUPTIONS:
        ordered = sorted(s.billed_s for s in simulate_spot_run(offer, work_s, runs=runs, seed=seed))
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)], f"seeded simulation of {runs} runs"
    return expected.billed_s + Z_95 * math.sqrt(running_variance(offer, work_s)), (
        f"normal approximation ({expected.interruptions:,.0f} interruptions expected: too many to simulate)")


def running_variance(offer: Offer, work_s: float) -> float:
    """Variance of the running time: independent chunks, each c + Σ_(failures) (wasted time + restart)."""
    lam = interruption_rate(offer) / HOUR_S
    full, rest = _chunks(work_s, offer.checkpoint_interval_s)
    whole = _chunk_variance(offer.checkpoint_interval_s, lam, offer.restart_overhead_s) if full else None
    return _per_chunk(full, whole) + (_chunk_variance(rest, lam, offer.restart_overhead_s) if rest else 0.0)


def _chunk_variance(chunk_s: float, lam: float, restart_s: float) -> float:
    """Var[T] = m·Var[X] + m(m+1)·E[X]², m = e^(λc) − 1 failures on average (geometric), X = W + restart."""
    m = math.expm1(lam * chunk_s)
    mean_w, mean_w2 = _truncated_exponential_moments(chunk_s, lam)
    mean_x = mean_w + restart_s
    return m * (mean_w2 - mean_w**2) + m * (m + 1) * mean_x**2


def _truncated_exponential_moments(chunk_s: float, lam: float) -> tuple[float, float]:
    """E[W], E[W²] of the time into a chunk when an interruption hits (Exp(λ) truncated to [0, c]).

    E[W] = 1/λ − c/m and E[W²] = 2/λ² − (c² + 2c/λ)/m with m = e^(λc) − 1; for small λc these
    cancel badly, so the series c/2 − λc²/12 and c²/3 − λc³/12 (uniform on [0, c] to first order) is used.
    """
    x = lam * chunk_s
    if x < 1e-3:
        return chunk_s / 2 - lam * chunk_s**2 / 12, chunk_s**2 / 3 - lam * chunk_s**3 / 12
    m = math.expm1(x)
    return 1 / lam - chunk_s / m, 2 / lam**2 - (chunk_s**2 + 2 * chunk_s / lam) / m


def simulate_spot_run(offer: Offer, work_s: float, *, runs: int, seed: int) -> list[SpotOutcome]:
    """Monte Carlo of `runs` spot runs with exact per-segment minimums and rounding.

    Callers keep the expected interruptions × runs within SIMULATED_INTERRUPTIONS (`spot_p95_billed_s`).
    """
    rng = random.Random(seed)
    lam = interruption_rate(offer) / HOUR_S
    full, rest = _chunks(work_s, offer.checkpoint_interval_s)
    out = []
    for _ in range(runs):
        segments = _simulate_segments(rng, lam, full, rest, offer)
        billed = sum(billed_seconds(s, offer) for s in segments)
        out.append(SpotOutcome(billed_s=billed, running_s=sum(segments), interruptions=len(segments) - 1))
    return out


def _simulate_segments(rng: random.Random, lam: float, full: int, rest: float, offer: Offer) -> list[float]:
    """Billed segment lengths of one run: each interruption closes a segment."""
    segments: list[float] = []
    current = billed_startup_s(offer)  # the launch phases after the meter starts, then setup
    for chunk_s, count in ((offer.checkpoint_interval_s, full), (rest, 1 if rest > 0 else 0)):
        fail_p = -math.expm1(-lam * chunk_s)
        left: float = count
        while left > 0:
            done = _successes_before_failure(rng, fail_p)
            if done >= left:
                current += left * chunk_s
                break
            left -= done
            current += done * chunk_s + _wasted(rng, lam, chunk_s, fail_p)
            segments.append(current)
            current = offer.restart_overhead_s
    segments.append(current + offer.idle_tail_s)
    return segments


def _successes_before_failure(rng: random.Random, fail_p: float) -> float:
    """Geometric number of chunks that complete before the next interruption."""
    if fail_p <= 0:
        return math.inf
    if fail_p >= 1:
        return 0
    return math.floor(math.log(1.0 - rng.random()) / math.log1p(-fail_p))


def _wasted(rng: random.Random, lam: float, chunk_s: float, fail_p: float) -> float:
    """Time into a chunk when the interruption hits: exponential, truncated to the chunk."""
    return -math.log1p(-rng.random() * fail_p) / lam if lam > 0 else chunk_s
