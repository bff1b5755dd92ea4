"""A serving job's offers priced from a measured capacity: `gpuscout load` on one replica → `pick`.

A load result measured one replica on a known GPU (`load --server-gpu`, or the GPU of `--offer`,
recorded in the result's fingerprint: for a load test its GPU fields name the server's GPUs).
Its capacity is the most load it carried while meeting the job's SLO: among its valid levels whose
P95 latencies (TTFT and e2e from the intended send, TPOT) meet the job's targets, the one with the
most requests per second (docs/cost.md §5.4). For every offer on that GPU with room for a replica:

    replicas per instance = offer GPUs // GPUs per replica
    with a target rate R:   replicas = ⌈R / capacity⌉, instances = ⌈replicas / replicas per instance⌉,
                            the job's requests take requests / R seconds, on every instance
    without one:            one instance, its replicas serving at capacity: requests / (capacity × replicas)
    $/1M output tokens at the SLO = the bill / (requests × output tokens) × 1e6

This replaces the roofline estimate on those offers (the row's bound reads "measured"). The
measurement holds for the prompt and output lengths it was taken at; a note says when the job's
differ. No level meeting the SLO excludes the GPU's offers with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date

from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.pick_row import PickRow, exclusion, row_base, unit_costs
from gpuscout.cost.spot import SpotNeverFinishes
from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import (
    E2E_FROM_INTENDED_S,
    TPOT_S,
    TTFT_FROM_INTENDED_S,
    BenchResult,
    Case,
    level_verdict,
)
from gpuscout.workload.job import InferenceJob, Slo

# SLO target → (metric from the intended send, where one exists): a lagging client cannot hide queueing.
_TARGETS = (("ttft_p95_s", TTFT_FROM_INTENDED_S), ("tpot_p95_s", TPOT_S), ("e2e_p95_s", E2E_FROM_INTENDED_S))


class MeasuredCapacity(Frozen):
    source: str  # the result's name
    gpu: str  # catalog SKU
    gpus: int  # per replica
    case: str | None  # the level the capacity comes from; None when no level met the SLO
    requests_per_s: float  # per replica
    output_tokens_per_s: float
    miss: str | None = None  # why no level met the SLO
    notes: tuple[str, ...] = ()


def capacity_from_result(result: BenchResult, job: InferenceJob) -> MeasuredCapacity:
    """The replica's capacity at the job's SLO, from a load result that names its GPU."""
    named = result.fingerprint.gpu_sku or result.fingerprint.gpu_name
    if result.kind != "load" or not named:
        raise SpecError(f"{result.name!r} is not a load result that names its server's GPU.",
                        "Its capacity replaces the estimate only on offers with the GPU it was measured on.",
                        "Measure with `gpuscout load … --server-gpu h100-sxm5-80gb` (or --offers/--offer).")
    gpu = find_gpu(named).sku
    gpus = max(1, result.fingerprint.gpu_count)
    notes = _length_notes(result, job)
    passing = [(c, _rate(c, "requests_per_s")) for c in result.cases if _valid(c) and not slo_misses(c, job.slo)]
    if not passing:
        why = "; ".join(f"{c.name}: {'; '.join(slo_misses(c, job.slo)) or _unusable(c)}" for c in result.cases[:4])
        return MeasuredCapacity(source=result.name, gpu=gpu, gpus=gpus, case=None, requests_per_s=0.0,
                                output_tokens_per_s=0.0, miss=why or "no measured level", notes=notes)
    best, rps = max(passing, key=lambda pair: pair[1])
    return MeasuredCapacity(source=result.name, gpu=gpu, gpus=gpus, case=best.name, requests_per_s=rps,
                            output_tokens_per_s=_rate(best, "output_tokens_per_s"), notes=notes)


def slo_misses(case: Case, slo: Slo) -> list[str]:
    metrics = {m.name: m for m in case.metrics}
    misses = []
    for field, name in _TARGETS:
        target = getattr(slo, field)
        metric = metrics.get(name)
        if target is None:
            continue
        if metric is None or metric.summary is None:
            misses.append(f"no {name} measured")
        elif metric.summary.p95 > target:
            misses.append(f"P95 {name} {metric.summary.p95:.3g} s > {target:g} s")
    return misses


def replicas_and_instances(cap: MeasuredCapacity, gpu_count: int, target_rps: float | None) -> tuple[int, int, float]:
    """(replicas per instance, instances, requests/s served) on an offer of `gpu_count` GPUs."""
    per_instance = gpu_count // cap.gpus
    if target_rps is None:
        return per_instance, 1, cap.requests_per_s * per_instance
    replicas = math.ceil(target_rps / cap.requests_per_s - 1e-9)
    return per_instance, math.ceil(replicas / per_instance), target_rps


def find_capacity(capacities: Sequence[MeasuredCapacity], gpu: str, gpu_count: int) -> MeasuredCapacity | None:
    return next((c for c in capacities if c.gpu == gpu and c.gpus <= gpu_count), None)


def _valid(case: Case) -> bool:
    """Valid by every check of the load gate: a level where one could not run is not used as capacity."""
    return level_verdict(case) == "valid" and case.failure is None


def _unusable(case: Case) -> str:
    """Why a level that met the SLO is not a capacity: its gate failed, or could not run a check."""
    return "validity not measured" if case.failure is None and level_verdict(case) == "not measured" else "invalid"


def _rate(case: Case, name: str) -> float:
    return next((m.value for m in case.metrics if m.name == name), 0.0)


def _length_notes(result: BenchResult, job: InferenceJob) -> tuple[str, ...]:
    settings = result.fixed.settings
    measured_out = settings.get("output_tokens")
    if isinstance(measured_out, int) and measured_out != job.output_tokens:
        return (f"{result.name} was measured at {measured_out} output tokens a request, the job asks "
                f"{job.output_tokens}: its capacity holds for the measured lengths",)
    return ()


def judge_measured(job: InferenceJob, offer: Offer, cap: MeasuredCapacity, target_rps: float | None,
                   rates: Sequence[ExchangeRate], deadline_s: float | None, budget_usd: float | None, today: date,
                   options: CostOptions | None, currency: DisplayCurrency) -> PickRow:
    """One offer priced from the measured capacity instead of the roofline."""
    base = row_base(offer, today) | {"fits": True, "gpus_needed": cap.gpus, "bound": "measured",
                                     "slo_source": "measured"}
    if cap.case is None:
        return PickRow(**base | {"slo_met": False, "excluded": f"misses the latency SLO: measured by {cap.source}: "
                                                                f"{cap.miss}"})
    per_instance, instances, served = replicas_and_instances(cap, offer.gpu_count, target_rps)
    runtime = job.requests / served
    try:
        cost = price_job(offer, runtime, options)
        total, p95 = (to_usd(x, offer.currency, rates) * instances for x in (cost.total, cost.total_p95))
    except (SpotNeverFinishes, SpecError) as exc:
        return PickRow(**base | {"excluded": f"cannot be billed: {exc}"})
    metrics = {"requests_per_s": served, "replicas": float(per_instance * instances), "instances": float(instances),
               "output_tokens_per_s": cap.output_tokens_per_s * served / cap.requests_per_s}
    units = unit_costs(job, total)
    reason = exclusion(runtime, total, None, deadline_s, budget_usd, currency)
    return PickRow(**base | {"runtime_s": runtime, "runtime_low_s": runtime, "runtime_high_s": runtime,
                             "total_usd": total, "total_p95_usd": p95, "unit_costs_usd": units, "slo_met": True,
                             "metrics": metrics, "cost": cost, "excluded": reason})


def capacity_warnings(capacities: Sequence[MeasuredCapacity], target_rps: float | None) -> tuple[str, ...]:
    lines = []
    for cap in capacities:
        if cap.case is None:
            lines.append(f"{cap.source}: no measured level met the SLO on {cap.gpu} ({cap.miss})")
            continue
        target = f"; replicas for {target_rps:g} req/s" if target_rps else ""
        lines.append(f"{cap.gpu} priced from {cap.source} ({cap.case}): {cap.requests_per_s:.3g} req/s per "
                     f"{cap.gpus}-GPU replica at the SLO{target}, replacing the estimate")
        lines += cap.notes
    return tuple(lines)
