"""Load shapes and their send schedules.

Open-loop shapes (constant, Poisson, gamma) get every send time up front as an ABSOLUTE offset from
the run's start t0, so a late send never shifts later ones and lag cannot accumulate (the legacy vLLM
script slept one relative gap after each send, so lag added up: docs/measurement.md §2.1).
Inter-arrival gaps follow vLLM's model: Gamma(shape=k, scale=1/(λ·k)) has mean 1/λ and coefficient of
variation 1/√k; k = 1 is Poisson, k < 1 burstier, k → ∞ constant. Seeded, so schedules are reproducible.
Closed loop (fixed concurrency) has no schedule: each worker sends when its previous request ends.
Two more shapes come from the workload: `trace` replays a trace's own arrival times (divided by
`speedup`), and `sessions` runs `concurrency` users through multi-turn conversations, each turn sent
`think_s` after the previous answer ended (a closed loop per user).

Waits are said (`LONG_WAIT_S`): a replay longer than that is announced with its span before its first
request (`replay_span_s`), and a gap longer than that between two sends shows on the progress line as a
wait until the next send (`long_gap_end`).

A level sends at most `MAX_REQUESTS_PER_LEVEL` measured requests with at most `MAX_CONCURRENCY` in
flight (docs/measurement.md §2.1): every request's record is kept in memory until the level ends, and
an open-loop schedule is built up front, so `--rate 1e9 --duration 1000s` is refused, not attempted.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from gpuscout.frozen import Frozen

ShapeKind = Literal["concurrency", "constant", "poisson", "gamma", "trace", "sessions"]
CLOSED = frozenset({"concurrency", "sessions"})
MAX_REQUESTS_PER_LEVEL = 100_000  # records stay in memory (~16 KB each at 128 output tokens); 3 min at 600 rps
MAX_CONCURRENCY = 4096  # one connection (and client) each; this client sustains 64 on 2 cores
# A wait longer than this is said, never silent: 10 s is the limit for keeping a user's attention on a task
# without feedback (J. Nielsen, "Response Times: The 3 Important Limits", Nielsen Norman Group, 1993).
LONG_WAIT_S = 10.0


class LoadShape(Frozen):
    kind: ShapeKind
    concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)  # closed loop: this many in flight
    rate_rps: float | None = Field(None, gt=0)  # open loop rates
    burstiness: float = Field(1.0, gt=0)  # gamma shape k (1.0 = Poisson; < 1 burstier)
    requests: int | None = Field(None, gt=0, le=MAX_REQUESTS_PER_LEVEL)
    duration_s: float | None = Field(None, gt=0)
    warmup_requests: int = Field(0, ge=0, le=MAX_REQUESTS_PER_LEVEL)
    seed: int = 0
    speedup: float = Field(1.0, gt=0, le=1e6)  # trace: arrival times divided by this
    think_s: float = Field(0.0, ge=0, le=86_400)  # sessions: pause between an answer and the next turn

    @model_validator(mode="after")
    def _consistent(self) -> LoadShape:
        if self.kind in CLOSED and self.concurrency is None:
            raise ValueError("a closed-loop shape needs concurrency")
        if self.kind not in CLOSED and self.kind != "trace" and self.rate_rps is None:
            raise ValueError(f"a {self.kind} shape needs rate_rps")
        if self.requests is None and self.duration_s is None:
            raise ValueError("a shape needs a request count or a duration")
        if self.requests is None and self.rate_rps is not None and self.duration_s is not None:
            check_schedule_size(self.rate_rps, self.duration_s)
        return self


def check_schedule_size(rate_rps: float, duration_s: float) -> None:
    """Refuse an open-loop level that would schedule more than MAX_REQUESTS_PER_LEVEL requests."""
    if not rate_rps * duration_s <= MAX_REQUESTS_PER_LEVEL:
        raise ValueError(f"rate {rate_rps:g}/s × duration {duration_s:g} s schedules {rate_rps * duration_s:.3g} "
                         f"requests in one level; gpuscout sends at most {MAX_REQUESTS_PER_LEVEL:,} per level: lower "
                         "the rate or the duration, or pass a request count")


def planned_requests(shape: LoadShape) -> int:
    """Measured requests the shape will send at most (a duration limit may stop it earlier)."""
    if shape.requests is not None:
        return shape.requests
    assert shape.duration_s is not None  # guaranteed by the validator
    if shape.rate_rps is not None:
        return max(1, min(MAX_REQUESTS_PER_LEVEL, math.ceil(shape.rate_rps * shape.duration_s)))
    return MAX_REQUESTS_PER_LEVEL  # closed loop bounded by time: the level also ends at this many


def send_offsets(shape: LoadShape, n: int, arrivals: list[float] | None = None) -> list[float] | None:
    """Absolute send offsets (s from t0) of n open-loop requests; None for closed loop. First send at 0.
    A trace's offsets are its `arrivals` (s from its first request) / speedup."""
    if shape.kind in CLOSED:
        return None
    if shape.kind == "trace":
        first = min(arrivals or [0.0])
        return [(a - first) / shape.speedup for a in (arrivals or [])[:n]]
    assert shape.rate_rps is not None
    rate = shape.rate_rps
    if shape.kind == "constant":
        return [i / rate for i in range(n)]
    k = 1.0 if shape.kind == "poisson" else shape.burstiness
    rng = random.Random(shape.seed)
    offsets, t = [], 0.0
    for _ in range(n):
        offsets.append(t)
        t += rng.expovariate(rate) if k == 1.0 else rng.gammavariate(k, 1.0 / (rate * k))
    return offsets


def arrivals_of(shape: LoadShape, prompts: Sequence[object]) -> list[float] | None:
    """A trace's arrival times (s from its start), one per prompt, for `send_offsets`; None for other shapes."""
    return [getattr(p, "arrival_s", None) or 0.0 for p in prompts] if shape.kind == "trace" else None


def replay_span_s(shape: LoadShape, arrivals: list[float] | None) -> float:
    """Wall seconds from a level's first scheduled send to its last (a trace: its arrivals / speedup), cut
    at the level's duration: how long an open-loop level takes at least; 0 for a closed loop."""
    offsets = send_offsets(shape, planned_requests(shape), arrivals) or [0.0]
    span = max(offsets, default=0.0)
    return min(span, shape.duration_s) if shape.duration_s is not None else span


def long_gap_end(offsets: Sequence[float], elapsed_s: float, duration_s: float | None = None) -> float | None:
    """The offset of the next send when the schedule (sorted offsets from t0) is `elapsed_s` into a gap
    between two sends longer than `LONG_WAIT_S`; None when it is not (or nothing is left to send)."""
    i = bisect.bisect_right(offsets, elapsed_s)
    if i == 0 or i >= len(offsets) or (duration_s is not None and offsets[i] >= duration_s):
        return None
    return offsets[i] if offsets[i] - offsets[i - 1] > LONG_WAIT_S else None
