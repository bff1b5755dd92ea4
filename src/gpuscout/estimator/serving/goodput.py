"""A simulated run judged against a serving SLO: goodput and the bounds it misses.

Goodput is DistServe's: requests that meet every bound of the SLO, each judged on its own latencies,
per second of the run; `gpuscout load` computes its measured goodput_rps the same way, so the two
stand side by side. The SLO's bounds are P95 targets: the run misses one when its P95 is above it.
"""

from __future__ import annotations

from gpuscout.estimator.serving.model import SimResult
from gpuscout.workload.job import Slo


def goodput(result: SimResult, slo: Slo) -> float:
    """Requests a second that met every bound of `slo` (TTFT, TPOT and e2e, each per request)."""
    if result.duration_s <= 0:
        return 0.0
    good = sum(1 for ttft, tpot, e2e in result.per_request
               if (slo.ttft_p95_s is None or ttft <= slo.ttft_p95_s)
               and (slo.tpot_p95_s is None or tpot <= slo.tpot_p95_s)
               and (slo.e2e_p95_s is None or e2e <= slo.e2e_p95_s))
    return good / result.duration_s


def slo_misses(result: SimResult, slo: Slo) -> tuple[str, ...]:
    """Each bound the run's P95 is above ("P95 TTFT 2.75 s > 1 s"); an unstable run misses them all,
    whatever its completed requests showed, and says so first."""
    misses: list[str] = []
    if result.unstable is not None:
        misses.append(result.unstable)
    for name, bound, got in (("TTFT", slo.ttft_p95_s, result.ttft_s.p95), ("TPOT", slo.tpot_p95_s, result.tpot_s.p95),
                             ("e2e", slo.e2e_p95_s, result.e2e_s.p95)):
        if bound is not None and got > bound:
            misses.append(f"P95 {name} {got:.3g} s > {bound:.3g} s")
    return tuple(misses)
