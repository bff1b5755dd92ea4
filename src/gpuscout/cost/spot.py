"""Spot runs: interruptions, lost work and restarts, in closed form and in a seeded simulation.

The model (docs/cost.md §2.11): interruptions arrive as a Poisson process at λ per running
second of work. Work is checkpointed every C seconds; an interruption loses the work since the
last checkpoint and ends a billed segment. The next segment pays the restart overhead R
(re-provision, setup, reload) and, being a new start, the minimum charge and the rounding again.

Closed form. A chunk of c seconds of work succeeds with probability e^(−λc); failures before the
success are geometric, so it takes e^(λc) − 1 interruptions on average, and the time spent on it
(work plus wasted partial attempts) averages (e^(λc) − 1)/λ — which tends to c + λc²/2, the
"half a checkpoint interval lost per interruption" rule, when λc is small.
"""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict

from gpuscout.cost.billed_time import billed_seconds
from gpuscout.hardware.offers import Offer

HOUR_S = 3600.0


class SpotOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    billed_s: float
    running_s: float
    interruptions: float


def _chunks(work_s: float, interval_s: float) -> tuple[int, float]:
    full = int(work_s // interval_s)
    return full, work_s - full * interval_s


def expected_chunk_s(chunk_s: float, rate_per_s: float) -> float:
    """Expected time to get `chunk_s` of work checkpointed, including wasted partial attempts."""
    return math.expm1(rate_per_s * chunk_s) / rate_per_s


def expected_spot_run(offer: Offer, work_s: float) -> SpotOutcome:
    """Expected billed time and interruptions; rounding is approximated as half an increment per segment."""
    lam = offer.interruptions_per_hour / HOUR_S
    full, rest = _chunks(work_s, offer.checkpoint_interval_s)
    interruptions = full * math.expm1(lam * offer.checkpoint_interval_s) + math.expm1(lam * rest)
    working = full * expected_chunk_s(offer.checkpoint_interval_s, lam) + (expected_chunk_s(rest, lam) if rest else 0)
    running = offer.startup_s + working + interruptions * offer.restart_overhead_s + offer.idle_tail_s
    rounding = (interruptions + 1) * offer.billing_increment_s / 2 if offer.billing_increment_s > 1 else 0.0
    return SpotOutcome(billed_s=running + rounding, running_s=running, interruptions=interruptions)


def simulate_spot_run(offer: Offer, work_s: float, *, runs: int, seed: int) -> list[SpotOutcome]:
    """Monte Carlo of `runs` spot runs with exact per-segment minimums and rounding."""
    rng = random.Random(seed)
    lam = offer.interruptions_per_hour / HOUR_S
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
    current = offer.startup_s
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
