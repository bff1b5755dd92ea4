"""How much load one replica holds at a serving SLO: the largest concurrency or request rate whose
simulated run meets every bound, found by bisection over simulated runs.

Monotone assumptions (what makes bisection valid): more users, or a higher rate, never lowers the
P95 latencies. The scheduler makes this hold closely (a larger batch makes every step longer, a
fuller queue waits longer); where it holds only roughly (a closed loop's lockstep waves, a KV cache
at the edge of preempting), the answer is a point that meets the SLO with the next step up missing
it, not necessarily the largest such point.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuscout.estimator.serving.goodput import slo_misses
from gpuscout.estimator.serving.model import (
    MAX_SIM_CONCURRENCY,
    MAX_SIM_REQUESTS,
    Arrivals,
    ServingValue,
    SimConfig,
    SimResult,
)
from gpuscout.estimator.serving.simulate import saturated_rate, simulate
from gpuscout.workload.job import Slo

RATE_TOLERANCE = 0.01  # bisection on a rate stops when the bracket is within 1% of its top
LOWEST_RATE_SHARE = 0.001  # the lowest rate tried, as a share of what a full replica holds: a lone request
REQUESTS_PER_USER = 5  # a closed loop runs at least this many requests per user, for its P95 to be a steady one


class SimCapacity(ServingValue):
    """The most load that met the SLO, the run at that load, and what binds one step past it."""

    concurrency: int | None = Field(None, ge=0)  # users held (closed loop); 0: not even one
    rate_per_s: float | None = Field(None, ge=0)  # requests a second held (open loop); 0: not even a trickle
    result: SimResult  # the run at that load (at the lowest load tried when none met the SLO)
    binding: tuple[str, ...]  # the SLO misses one step past it (empty when the search reached its top)
    searched_to: float = Field(ge=0)  # the highest load tried: the answer is "at least" this when nothing missed


def max_concurrency_at_slo(config: SimConfig, slo: Slo, *, prompt_tokens: int, output_tokens: int,
                           requests: int = 1000, seed: int = 0, max_concurrency: int | None = None) -> SimCapacity:
    """The most concurrent users (each sending its next request when its reply ends) meeting `slo`.

    Doubles the users from 1 until the SLO is missed, then bisects between the last met and the
    first missed. `max_concurrency` caps the search (default: 4 × max_num_seqs, past which users
    only queue).
    """
    top = max_concurrency or min(MAX_SIM_CONCURRENCY, 4 * config.limits.max_num_seqs)

    def run(users: int) -> tuple[SimResult, tuple[str, ...]]:
        n = min(MAX_SIM_REQUESTS, max(requests, REQUESTS_PER_USER * users))
        result = simulate(config, Arrivals(kind="concurrency", concurrency=users, requests=n,
                                           prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=seed))
        return result, slo_misses(result, slo)

    first, missed = run(1)
    if missed:
        return SimCapacity(concurrency=0, result=first, binding=missed, searched_to=1)
    good, good_result = 1, first
    bad: int | None = None
    bad_misses: tuple[str, ...] = ()
    users = 1
    while bad is None and users < top:
        users = min(top, users * 2)
        result, missed = run(users)
        if missed:
            bad, bad_misses = users, missed
        else:
            good, good_result = users, result
    if bad is None:
        return SimCapacity(concurrency=good, result=good_result, binding=(), searched_to=top)
    while bad - good > 1:
        mid = (good + bad) // 2
        result, missed = run(mid)
        if missed:
            bad, bad_misses = mid, missed
        else:
            good, good_result = mid, result
    return SimCapacity(concurrency=good, result=good_result, binding=bad_misses, searched_to=bad)


def max_rate_at_slo(config: SimConfig, slo: Slo, *, prompt_tokens: int, output_tokens: int, requests: int = 1000,
                    seed: int = 0, kind: Literal["poisson", "constant"] = "poisson") -> SimCapacity:
    """The highest open-loop request rate (Poisson by default, or "constant") meeting `slo`.

    Bisects between a trickle (0.1% of what a full replica holds: each request alone) and the full
    replica's rate, past which the queue grows without bound.
    """
    ceiling = saturated_rate(config, prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=seed)

    def run(rate: float) -> tuple[SimResult, tuple[str, ...]]:
        result = simulate(config, Arrivals(kind=kind, rate_per_s=rate, requests=requests,
                                           prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=seed))
        return result, slo_misses(result, slo)

    lo = ceiling * LOWEST_RATE_SHARE
    first, missed = run(lo)
    if missed:
        return SimCapacity(rate_per_s=0.0, result=first, binding=missed, searched_to=lo)
    top_result, top_missed = run(ceiling)
    if not top_missed:
        return SimCapacity(rate_per_s=ceiling, result=top_result, binding=(), searched_to=ceiling)
    good, good_result, bad, bad_misses = lo, first, ceiling, top_missed
    while bad - good > RATE_TOLERANCE * bad:
        mid = (good + bad) / 2
        result, missed = run(mid)
        if missed:
            bad, bad_misses = mid, missed
        else:
            good, good_result = mid, result
    return SimCapacity(rate_per_s=good, result=good_result, binding=bad_misses, searched_to=bad)
