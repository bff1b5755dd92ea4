"""One offer's row in a ranking: what `pick` and the measured-capacity pricing (`capacity`) both fill.

The row, its empty start from the offer, the job's per-unit costs and the one-line reason a fitting
offer is left out live here, apart from either, so the estimate's ranking (`pick`) and the pricing
from a measured capacity (`capacity`) each import them and neither imports the other's caller.
"""

from __future__ import annotations

from datetime import date
from typing import Any, ClassVar

from gpuscout.cost.billing import JobCost
from gpuscout.cost.machine import MachineCheck
from gpuscout.cost.spot_prior import InterruptionPrior
from gpuscout.estimator.compat import Finding
from gpuscout.estimator.fit import Suggestion
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import USD, DisplayCurrency, amount_text, from_usd
from gpuscout.hardware.offers import Offer, is_stale
from gpuscout.units import HOUR_S
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob


class OfferFacts(Frozen):
    """What every priced row says of its offer: which one, in what currency, seen when."""

    offer_id: str
    provider: str
    tier: str
    gpu_sku: str
    gpu_count: int
    currency: str
    observed_at: date
    stale: bool
    placeholder: bool = False  # a price nobody observed (`placeholder = true` in the sheet): ranked only when asked
    # What the source said of capacity (`Offer.available`, `Offer.stock`); None: it did not say. An
    # unavailable row is ranked after every available one.
    available: bool | None = None
    stock: int | None = None
    quiet_defaults: ClassVar[dict[str, Any]] = {"available": None, "stock": None}  # older dumps stay byte for byte

    @property
    def unavailable(self) -> bool:
        """The source said it cannot be rented now (`available = false`, or a stock of 0)."""
        return self.available is False or self.stock == 0


def offer_facts(offer: Offer, today: date) -> dict[str, object]:
    return {"offer_id": offer.id, "provider": offer.provider, "tier": offer.tier, "gpu_sku": offer.gpu,
            "gpu_count": offer.gpu_count, "currency": offer.currency, "observed_at": offer.observed_at,
            "stale": is_stale(offer, today), "placeholder": offer.placeholder, "available": offer.available,
            "stock": offer.stock}


class PickRow(OfferFacts):
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
    plan: tuple[Suggestion, ...] = ()  # changes that keep the task, applied so that it fits (empty: as written)
    options: tuple[Suggestion, ...] = ()  # changes that alter the task, offered (never applied) when unfit
    machine: MachineCheck | None = None  # the host: RAM, vCPUs, disk and the dataset's pull (docs/cost.md §2.14)
    # A spot row whose sheet gives no interruption rate: the band it was priced under (the user's rate,
    # their Spot Advisor band, or the default prior), and whether nothing at all was known (docs/cost.md §2.11).
    interruption_prior: InterruptionPrior | None = None
    interruption_risk_unknown: bool = False
    # The total's band (docs/cost.md §6.1): priced at the runtime band's ends, the high end at the spot
    # P95; the expected `total_usd` orders the rows. None where the row has no total.
    total_low_usd: float | None = None
    total_high_usd: float | None = None
    separable: bool | None = None  # False: its band overlaps the winner's (None: the winner, or unranked)
    # The GPU layout: GPUs per replica (the data-parallel or tensor-parallel group) and replicas.
    gpus_per_replica: int | None = None
    replicas: int | None = None
    parallel: str = ""  # "data" (training, a copy per replica), "zero3"/"fsdp" (one sharded copy), "tensor"
    # (serving, a copy per tensor-parallel group), "" (images and video: one pipeline a GPU)
    # The compatibility rules' findings on this offer's GPU (estimator/compat.py): an excluded row's reason
    # and fix, or the slower fallback its runtime is priced with (no P2P: collectives through host memory).
    compat: tuple[Finding, ...] = ()
    # fits / tight / does not fit against the estimator's error band (estimator/margin.py). A tight row
    # is ranked but marked; oom_risk_usd is what an out-of-memory first attempt would add to its bill
    # (a billed failed start + the fallback plan's total − this total; docs/cost.md §2.15).
    fit_verdict: str = "fits"
    oom_risk_usd: float = 0.0
    # Serving: where the SLO verdict, replicas and runtime came from: "simulated" (one replica simulated at
    # the job's load, the band's slow end), "measured" (a `load` result's capacity), "single-request
    # estimate" (the speed model's lone request, no queueing: where the simulation cannot run). None: no SLO.
    slo_source: str | None = None
    slo_note: str | None = None  # simulated over several instances: what one alone would miss

    @property
    def instances(self) -> float:
        """Instances of the offer the total pays for: a serving load one instance cannot hold is priced
        as several (`metrics["instances"]`, set by the serving verdict); 1 otherwise."""
        return max(self.metrics.get("instances", 1.0), 1.0)


def row_base(offer: Offer, today: date) -> dict[str, object]:
    return {**offer_facts(offer, today), "gpus_needed": None, "runtime_s": None,
            "runtime_low_s": None, "runtime_high_s": None, "bound": None, "total_usd": None,
            "total_p95_usd": None, "unit_costs_usd": {}, "slo_met": None, "metrics": {}}


def unit_costs(job: Job, total_usd: float) -> dict[str, float]:
    match job:
        case FinetuneJob():
            tokens = job.dataset_tokens * job.epochs
            return {"usd_per_epoch": total_usd / job.epochs, "usd_per_job": total_usd,
                    "usd_per_1m_train_tokens": total_usd / tokens * 1e6}
        case InferenceJob():
            # Co-served models: the cost is of every model's requests and tokens.
            requests = job.requests + sum(c.requests for c in job.co_served)
            tokens = job.requests * job.output_tokens + sum(c.requests * c.output_tokens for c in job.co_served)
            return {"usd_per_1m_output_tokens": total_usd / tokens * 1e6, "usd_per_request": total_usd / requests}
        case ImageJob():
            return {"usd_per_1000_images": total_usd / job.images * 1000}
        case VideoJob():
            return {"usd_per_clip": total_usd / job.clips}
    raise AssertionError(job)


def exclusion(runtime_s: float, total_usd: float, slo_miss: str | None, deadline_s: float | None,
              budget_usd: float | None, currency: DisplayCurrency = USD, *, pull_s: float = 0.0) -> str | None:
    """The one-line reason an offer that fits is left out, or None; `slo_miss` names the missed targets.
    The deadline is on when the job ends: after the dataset's pull (`pull_s`) and the runtime."""
    if slo_miss is not None:
        return f"misses the latency SLO: {slo_miss}"
    if deadline_s is not None and runtime_s + pull_s > deadline_s:
        pulled = f" with the {pull_s / HOUR_S:.1f} h dataset pull" if pull_s else ""
        return f"misses the deadline ({(runtime_s + pull_s) / HOUR_S:.1f} h{pulled} > {deadline_s / HOUR_S:.1f} h)"
    if budget_usd is not None and total_usd > budget_usd:
        total, budget = (from_usd(x, currency) for x in (total_usd, budget_usd))
        return f"over budget ({amount_text(total, currency.code)} > {amount_text(budget, currency.code)})"
    return None
