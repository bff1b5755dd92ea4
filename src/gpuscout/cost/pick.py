"""Rank rentable offers by the total cost of the whole job: fit, runtime, bill, per-unit cost, SLOs.

For each offer the job is laid out on the whole instance the way a user would run it:
fine-tuning data-parallel over all its GPUs (ZeRO-3 when one GPU cannot hold the states),
serving with the smallest tensor-parallel group that fits and replicas on the rest, images with
one pipeline per GPU. Then the speed model gives the runtime and the billing model the bill.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from pydantic import BaseModel, ConfigDict

from gpuscout.cost.billing import CostOptions, JobCost, price_job
from gpuscout.cost.spot import SpotNeverFinishes
from gpuscout.errors import SpecError
from gpuscout.estimator.memory import Job, Model, estimate_memory
from gpuscout.estimator.speed import SpeedEstimate, estimate_speed
from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer, is_stale, price_warnings
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob

THROUGHPUTS = frozenset({"output_tokens_per_s", "requests_per_s", "images_per_s", "tokens_per_s", "samples_per_s"})


class Placement(BaseModel):
    """How the job runs on one instance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: FinetuneJob | InferenceJob | ImageJob  # the job as laid out on the instance
    gpus_needed: int  # fewest GPUs whose memory holds the job (one replica)
    group: int  # GPUs per replica (data-parallel group for training, TP group for serving)
    replicas: int  # independent copies working in parallel


class PickRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    offer_id: str
    provider: str
    tier: str
    gpu_sku: str
    gpu_count: int
    currency: str
    observed_at: date
    stale: bool
    fits: bool
    gpus_needed: int | None
    runtime_s: float | None
    runtime_low_s: float | None
    runtime_high_s: float | None
    bound: str | None
    total_usd: float | None
    total_p95_usd: float | None
    unit_costs_usd: dict[str, float]
    slo_met: bool | None
    metrics: dict[str, float]
    excluded: str | None  # one-line reason, None when the offer is ranked
    pareto: bool = False
    cost: JobCost | None = None


class PickResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    job_name: str
    rows: tuple[PickRow, ...]  # ranked rows first (cheapest total first), then the excluded
    exchange_rates: tuple[ExchangeRate, ...]
    warnings: tuple[str, ...]


def pick(job: Job, model: Model, offers: Sequence[Offer], *, rates: Sequence[ExchangeRate] = (),
         deadline_s: float | None = None, budget_usd: float | None = None, today: date,
         options: CostOptions | None = None) -> PickResult:
    rows = [judge_offer(job, model, o, rates, deadline_s, budget_usd, today, options) for o in offers]
    ranked = sorted((r for r in rows if r.excluded is None), key=lambda r: r.total_usd or 0.0)
    ranked = mark_pareto(ranked)
    excluded = [r for r in rows if r.excluded is not None]
    return PickResult(job_name=job.name, rows=(*ranked, *excluded), exchange_rates=tuple(rates),
                      warnings=price_warnings(offers, today))


def judge_offer(job: Job, model: Model, offer: Offer, rates: Sequence[ExchangeRate], deadline_s: float | None,
                budget_usd: float | None, today: date, options: CostOptions | None) -> PickRow:
    gpu = find_gpu(offer.gpu)
    base = _row_base(offer, today)
    placement = place(job, model, gpu, offer.gpu_count)
    if placement is None:
        return PickRow(**base | {"fits": False, "excluded": f"does not fit in {offer.gpu_count} × {gpu.name}"})
    speed = estimate_speed(placement.job, model, gpu, gpus=placement.group)
    runtime, low, high = (s / placement.replicas for s in (speed.job_s, speed.job_low_s, speed.job_high_s))
    try:
        cost = price_job(offer, runtime, options)
    except SpotNeverFinishes as exc:
        return PickRow(**base | {"fits": True, "gpus_needed": placement.gpus_needed, "runtime_s": runtime,
                                 "bound": speed.bound, "excluded": f"never finishes on spot: {exc.what}"})
    slo = slo_met(job, speed)
    timing = {"fits": True, "gpus_needed": placement.gpus_needed, "runtime_s": runtime, "runtime_low_s": low,
              "runtime_high_s": high, "bound": speed.bound, "metrics": _scaled_metrics(speed, placement),
              "slo_met": slo, "cost": cost}
    try:
        total, p95 = (to_usd(x, offer.currency, rates) for x in (cost.total, cost.total_p95))
    except SpecError:
        no_rate = f"priced in {offer.currency} and no exchange rate was given (--fx {offer.currency}=<USD per unit>)"
        return PickRow(**base | timing | {"excluded": no_rate})
    units = unit_costs(job, total)
    reason = exclusion(runtime, total, slo, deadline_s, budget_usd)
    return PickRow(**base | timing | {"total_usd": total, "total_p95_usd": p95, "unit_costs_usd": units,
                                      "excluded": reason})


def _row_base(offer: Offer, today: date) -> dict[str, object]:
    return {"offer_id": offer.id, "provider": offer.provider, "tier": offer.tier, "gpu_sku": offer.gpu,
            "gpu_count": offer.gpu_count, "currency": offer.currency, "observed_at": offer.observed_at,
            "stale": is_stale(offer, today), "gpus_needed": None, "runtime_s": None,
            "runtime_low_s": None, "runtime_high_s": None, "bound": None, "total_usd": None,
            "total_p95_usd": None, "unit_costs_usd": {}, "slo_met": None, "metrics": {}}


def place(job: Job, model: Model, gpu: Gpu, count: int) -> Placement | None:
    match job:
        case FinetuneJob():
            return _place_finetune(job, model, gpu, count)
        case InferenceJob():
            return _place_inference(job, model, gpu, count)
        case ImageJob():
            fits = estimate_memory(job, model, gpu).fits
            return Placement(job=job, gpus_needed=1, group=1, replicas=count) if fits else None
    raise AssertionError(job)


def _place_finetune(job: FinetuneJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """All the instance's GPUs train data-parallel; shard with ZeRO-3 if plain DP does not fit."""
    tp = job.tensor_parallel if count % job.tensor_parallel == 0 else 1
    for sharding in dict.fromkeys((job.sharding, "zero3")):
        laid = job.model_copy(update={"gpus": count, "sharding": sharding, "tensor_parallel": tp})
        if not estimate_memory(laid, model, gpu).fits:
            continue
        needed = next(n for n in _counts(count) if estimate_memory(laid, model, gpu, gpus=n).fits)
        return Placement(job=laid, gpus_needed=needed, group=count, replicas=1)
    return None


def _place_inference(job: InferenceJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """The smallest tensor-parallel group that fits; the remaining GPUs serve as replicas."""
    heads = getattr(model, "num_attention_heads", 1)
    for tp in _counts(count):
        if heads % tp:
            continue
        laid = job.model_copy(update={"tensor_parallel": tp})
        if estimate_memory(laid, model, gpu).fits:
            return Placement(job=laid, gpus_needed=tp, group=tp, replicas=count // tp)
    return None


def _counts(limit: int) -> list[int]:
    """1, 2, 4, … up to the instance's GPU count, and the count itself."""
    counts, n = [], 1
    while n < limit:
        counts.append(n)
        n *= 2
    return [*counts, limit]


def _scaled_metrics(speed: SpeedEstimate, placement: Placement) -> dict[str, float]:
    """Throughputs scale with replicas; latencies do not."""
    return {key: value * placement.replicas if key in THROUGHPUTS else value for key, value in speed.metrics.items()}


def slo_met(job: Job, speed: SpeedEstimate) -> bool | None:
    """P95 targets against the pessimistic end of the estimate's band (a mean alone would flatter)."""
    if not isinstance(job, InferenceJob):
        return None
    targets = {"ttft_s": job.slo.ttft_p95_s, "tpot_s": job.slo.tpot_p95_s, "e2e_s": job.slo.e2e_p95_s}
    checks = [speed.metrics[k] * speed.efficiency.band_high <= v for k, v in targets.items()
              if v is not None and k in speed.metrics]
    return all(checks) if checks else None


def unit_costs(job: Job, total_usd: float) -> dict[str, float]:
    match job:
        case FinetuneJob():
            tokens = job.dataset_tokens * job.epochs
            return {"usd_per_epoch": total_usd / job.epochs, "usd_per_job": total_usd,
                    "usd_per_1m_train_tokens": total_usd / tokens * 1e6}
        case InferenceJob():
            return {"usd_per_1m_output_tokens": total_usd / (job.requests * job.output_tokens) * 1e6,
                    "usd_per_request": total_usd / job.requests}
        case ImageJob():
            return {"usd_per_1000_images": total_usd / job.images * 1000}
    raise AssertionError(job)


def exclusion(runtime_s: float, total_usd: float, slo: bool | None, deadline_s: float | None,
              budget_usd: float | None) -> str | None:
    if slo is False:
        return "misses the latency SLO"
    if deadline_s is not None and runtime_s > deadline_s:
        return f"misses the deadline ({runtime_s / 3600:.1f} h > {deadline_s / 3600:.1f} h)"
    if budget_usd is not None and total_usd > budget_usd:
        return f"over budget (${total_usd:,.2f} > ${budget_usd:,.2f})"
    return None


def mark_pareto(rows: list[PickRow]) -> list[PickRow]:
    """Mark rows no other row beats on both runtime and total cost (the time–cost frontier)."""
    def dominated(r: PickRow) -> bool:
        return any((o.runtime_s or 0) <= (r.runtime_s or 0) and (o.total_usd or 0) <= (r.total_usd or 0)
                   and ((o.runtime_s or 0) < (r.runtime_s or 0) or (o.total_usd or 0) < (r.total_usd or 0))
                   for o in rows)
    return [r.model_copy(update={"pareto": not dominated(r)}) for r in rows]
