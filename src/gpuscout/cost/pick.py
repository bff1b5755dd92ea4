"""Rank rentable offers by the total cost of the whole job: fit, runtime, bill, per-unit cost, SLOs.

For each offer the job is laid out on the whole instance the way a user would run it:
fine-tuning data-parallel over all its GPUs (ZeRO-3 when one GPU cannot hold the states),
serving with the smallest tensor-parallel group that fits and replicas on the rest, images with
one pipeline per GPU. Where the job as written does not fit, the estimator's changes that keep the
task (micro-batch with more accumulation, chunked loss, checkpointing, 8-bit or offloaded optimizer,
fp8 KV cache, VAE tiling …) are applied, cheapest in speed first, and the runtime is estimated
under that plan; changes that alter the task are only offered. Then the speed model gives the
runtime and the billing model the bill. Offers share instance shapes (GPU × count), so each
shape is laid out once per ranking.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from datetime import date
from functools import partial

from pydantic import Field

from gpuscout.cost.billed_time import billed_seconds, billed_startup_s
from gpuscout.cost.billing import CostOptions, rate_per_s
from gpuscout.cost.capacity import MeasuredCapacity, capacity_warnings, find_capacity, judge_measured
from gpuscout.cost.cost_band import priced_band, separable_flags, total_band
from gpuscout.cost.machine import MachineCheck, check_machine, host_needs, machine_offer, price_on_machine
from gpuscout.cost.pick_row import PickRow, exclusion, row_base, unit_costs
from gpuscout.cost.simulated import (
    SOURCE_ESTIMATE,
    SOURCE_SIMULATED,
    SimulatedLoad,
    miss_words,
    one_instance_words,
    simulate_layout,
)
from gpuscout.cost.spot import SpotNeverFinishes
from gpuscout.cost.spot_prior import InterruptionPrior, SpotKnowledge, prior_for, with_prior
from gpuscout.cost.trial_price import TrialAdvice
from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.estimator.compat import Finding, check, exclusion_reason
from gpuscout.estimator.fit import (
    Suggestion,
    plan_keeping_task,
    plan_slowdown,
    planned_job,
    task_changing_options,
)
from gpuscout.estimator.host import HostNeeds
from gpuscout.estimator.margin import FITS, TIGHT, Band, band_for, judge_fit
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.speed.estimate import SpeedEstimate, estimate_speed
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.hardware.currency import (
    USD,
    DisplayCurrency,
    ExchangeRate,
    missing_rate_fix,
    to_usd,
)
from gpuscout.hardware.offers import Offer, price_warnings
from gpuscout.results.schema import E2E_S, TPOT_S, TTFT_S
from gpuscout.workload.colocated import ColocatedShape
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.model import Model

THROUGHPUTS = frozenset({"output_tokens_per_s", "requests_per_s", "images_per_s", "clips_per_s", "tokens_per_s",
                         "samples_per_s"})
RATES = THROUGHPUTS | {"mfu", "achieved_tflops"}  # a plan's unmodelled slowdown divides these, multiplies the rest
SLO_METRICS = {TTFT_S: "TTFT", TPOT_S: "TPOT", E2E_S: "E2E"}
# The most one offer's job may cost and still be ranked: ten times AWS's net sales in 2024 ($107.6 B,
# Amazon.com 2024 Form 10-K). A total past it comes from an absurd number in the offer (a price,
# a restart overhead, a stopped time), never from a rental: the offer is excluded, saying so.
MAX_TOTAL_USD = 1e12
# A tight layout gives way to a plan that leaves the error band's headroom when that plan's runtime is
# at most this much longer. "Little": 5% is inside every speed band (training 0.75–1.6 ×, the
# narrowest, decode, 0.8–1.4 ×, docs/estimator.md §3.8), so the ranking could not tell the two apart
# anyway, while an out-of-memory first attempt costs a failed start and the rerun (docs/cost.md §2.15).
MARGIN_PLAN_LITTLE = 0.05


class Placement(Frozen):
    """How the job runs on one instance."""


    job: Job  # the job as laid out on the instance
    gpus_needed: int  # fewest GPUs whose memory holds the job (one replica)
    group: int  # GPUs per replica (data-parallel group for training, TP group for serving)
    replicas: int  # independent copies working in parallel
    plan: tuple[Suggestion, ...] = ()  # changes that keep the task, applied so that it fits (empty: as written)


class Layout(Frozen):
    """The job on one instance shape (GPU × count): how it runs and how fast, or why it cannot."""


    placement: Placement | None
    unfit: str | None  # why it does not fit (None when placed)
    options: tuple[Suggestion, ...] = ()  # changes that alter the task, offered when nothing else fits
    speed: SpeedEstimate | None = None  # of the placed (planned) job, before replicas and slowdowns
    runtime_s: float = 0.0  # whole job on the instance: replicas and the plan's slowdown applied
    runtime_low_s: float = 0.0
    runtime_high_s: float = 0.0
    metrics: dict[str, float] = Field(default_factory=dict)
    slo_miss: str | None = None  # 'TPOT 0.070 s > 0.05 s at the band's slow end'
    slo_met: bool | None = None
    compat: tuple[Finding, ...] = ()  # the compatibility rules' findings for the placed job (estimator/compat.py)
    fit_verdict: str = FITS  # of the placed job against the error band (estimator/margin.py)
    fallback_runtime_s: float | None = None  # tight: the runtime under a plan that leaves the band's headroom
    # Serving: one replica simulated at the job's load (cost/simulated.py); the SLO verdict, the runtime and
    # the replicas come from it. None where it cannot run (`slo_source` says the single-request estimate).
    sim: SimulatedLoad | None = None
    slo_source: str | None = None  # where the SLO verdict came from: simulated / single-request estimate
    sim_skipped: str | None = None  # why the simulation could not run
    slo_note: str | None = None  # several instances: what one alone misses at the job's users


class PickResult(Frozen):
    job_name: str
    rows: tuple[PickRow, ...]  # ranked rows first (cheapest total first), then the excluded
    exchange_rates: tuple[ExchangeRate, ...]
    warnings: tuple[str, ...]
    as_written: bool = False  # plans were turned off: only the job as written was placed
    currency: DisplayCurrency = USD  # totals are ranked in USD and shown in this currency (docs/cost.md §3)
    today: date | None = None  # the day prices were aged on (each row's price age)
    trial: TrialAdvice | None = None  # whether a trial pays to settle the leaders, its price and commands


def pick(job: Job, model: Model, offers: Sequence[Offer], *, rates: Sequence[ExchangeRate] = (),
         deadline_s: float | None = None, budget_usd: float | None = None, today: date,
         options: CostOptions | None = None, currency: DisplayCurrency = USD, as_written: bool = False,
         capacities: Sequence[MeasuredCapacity] = (), target_rps: float | None = None,
         include_placeholders: bool = False, spot: SpotKnowledge | None = None,
         margin_pct: float | None = None) -> PickResult:
    """Rank offers by total job cost; `as_written` places only the job as written (no plans).
    `capacities`: measured serving capacities (`cost.capacity`), used instead of the estimate on their GPU.
    Placeholder prices are left unranked unless `include_placeholders`; spot rows without a stated
    interruption rate are priced under `spot`'s rate or advisor band, else the default prior band.
    `margin_pct`: the headroom a fit must leave, % of the peak, in place of the validated error band."""
    layouts: dict[tuple[str, int], Layout] = {}  # many offers share a GPU and a count
    hosts: dict[tuple[str, int], HostNeeds] = {}  # and so the host RAM and disk the job needs there
    rows = []
    for given in offers:
        prior = prior_for(given, spot)  # a spot row without a stated interruption rate: priced under a band
        o = with_prior(given, prior)
        cap = find_capacity(capacities, o.gpu, o.gpu_count) if isinstance(job, InferenceJob) else None
        if cap is not None and isinstance(job, InferenceJob):
            rows.append(vouched(guarded(o, today, partial(judge_measured, job, o, cap, target_rps, rates, deadline_s,
                                                          budget_usd, today, options, currency)),
                                prior, include_placeholders))
            continue
        rows.append(vouched(guarded(o, today, partial(judge_offer, job, model, o, rates, deadline_s, budget_usd,
                                                      today, options, currency, layouts=layouts, hosts=hosts,
                                                      as_written=as_written, margin_pct=margin_pct,
                                                      target_rps=target_rps)),
                            prior, include_placeholders))
    ranked = sorted((r for r in rows if r.excluded is None), key=lambda r: r.total_usd or 0.0)
    ranked = mark_pareto(ranked, separable_flags(ranked))
    excluded = [r for r in rows if r.excluded is not None]
    return PickResult(job_name=job.name, rows=(*ranked, *excluded), exchange_rates=tuple(rates),
                      warnings=(*price_warnings(offers, today), *capacity_warnings(capacities, target_rps)),
                      currency=currency, as_written=as_written, today=today)


# Why a placeholder row is not ranked: the report adds how to rank it anyway.
PLACEHOLDER_NOT_RANKED = "placeholder price: nobody observed it"


def vouched(row: PickRow, prior: InterruptionPrior | None, include_placeholders: bool) -> PickRow:
    """The row with what gpuscout cannot vouch for: the interruption band it was priced under, and a
    placeholder price left unranked unless asked for (an excluded row keeps its own reason)."""
    update: dict[str, object] = {"interruption_prior": prior,
                                 "interruption_risk_unknown": prior is not None and prior.unknown}
    if row.placeholder and row.excluded is None and not include_placeholders:
        update["excluded"] = PLACEHOLDER_NOT_RANKED
    return row.model_copy(update=update)


def guarded(offer: Offer, today: date, judge: Callable[[], PickRow]) -> PickRow:
    """One offer's row, or its exclusion when its own numbers cannot be priced: one absurd row of a
    sheet (finite, but far past any rental) never sinks the ranking of the others."""
    try:
        row = judge()
    except (ArithmeticError, ValueError) as exc:  # math range / domain errors, a model refusing inf or NaN
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        return unpriced(offer, today, f"its numbers could not be priced ({type(exc).__name__}: {first})")
    numbers = {"runtime": row.runtime_s, "total": row.total_usd, "P95 total": row.total_p95_usd,
               "total's low end": row.total_low_usd, "total's high end": row.total_high_usd,
               "out-of-memory risk": row.oom_risk_usd, **{name: value for name, value in row.unit_costs_usd.items()}}
    if row.cost is not None:
        numbers |= {"cost": row.cost.total, "P95 cost": row.cost.total_p95, "billed time": row.cost.billed_s}
    broken = next((name for name, value in numbers.items() if value is not None and not math.isfinite(value)), None)
    if broken is not None:
        return unpriced(offer, today, f"its {broken} comes out as {numbers[broken]}")
    for name, value in (("total", row.total_usd), ("P95 total", row.total_p95_usd),
                        ("total's high end", row.total_high_usd)):
        if value is not None and value > MAX_TOTAL_USD:
            return unpriced(offer, today, f"its {name}, ${value:.3g}, is past ${MAX_TOTAL_USD:.0e}")
    return row


def unpriced(offer: Offer, today: date, why: str) -> PickRow:
    """An offer excluded because a number of its own is out of any rental's range, with where to look."""
    return PickRow(**row_base(offer, today) | {"fits": False, "excluded": (
        f"{why}: a number in this offer is far outside any rental (check price, billing_increment_s, "
        "startup_s, idle_tail_s, restart_overhead_s, interruptions_per_hour, stopped_hours)")})


def judge_offer(job: Job, model: Model, offer: Offer, rates: Sequence[ExchangeRate], deadline_s: float | None,
                budget_usd: float | None, today: date, options: CostOptions | None,
                currency: DisplayCurrency = USD, *, layouts: dict[tuple[str, int], Layout] | None = None,
                hosts: dict[tuple[str, int], HostNeeds] | None = None, as_written: bool = False,
                margin_pct: float | None = None, target_rps: float | None = None) -> PickRow:
    """One offer: lay the job out on its instance (cached per shape), bill the runtime, apply the limits.
    A serving job's runtime and SLO verdict are simulated at its load (`target_rps`: a Poisson rate)."""
    cache = layouts if layouts is not None else {}
    key = (offer.gpu, offer.gpu_count)  # `Offer.gpu` is already the catalog SKU
    if key not in cache:
        cache[key] = lay_out(job, model, find_gpu(offer.gpu), offer.gpu_count, as_written=as_written,
                             margin_pct=margin_pct, target_rps=target_rps)
    layout = cache[key]
    base = row_base(offer, today)
    if layout.placement is None or layout.speed is None:
        return PickRow(**base | {"fits": False, "excluded": layout.unfit, "options": layout.options,
                                 "compat": layout.compat})
    placement, speed = layout.placement, layout.speed
    base |= {"compat": layout.compat}  # a slower fallback is priced in the runtime; the row says so
    data, processes = options.data if options is not None else None, placement.group * placement.replicas
    known = hosts if hosts is not None else {}
    if key not in known:
        known[key] = host_needs(placement.job, model, processes=processes, data=data)
    machine = check_machine(placement.job, model, offer, processes=processes, data=data, needs=known[key])
    fitted = {"fits": True, "gpus_needed": placement.gpus_needed, "runtime_s": layout.runtime_s,
              "bound": speed.bound, "plan": placement.plan, "machine": machine, **_layout_fields(job, placement),
              "fit_verdict": layout.fit_verdict, "slo_source": layout.slo_source, "slo_note": layout.slo_note}
    if machine.excluded is not None:
        return PickRow(**base | fitted | {"excluded": machine.excluded})
    try:
        cost = price_on_machine(offer, layout.runtime_s, options, machine, rates)
    except SpotNeverFinishes as exc:
        return PickRow(**base | fitted | {"excluded": f"never finishes on spot: {exc.what}"})
    timing = fitted | {"runtime_low_s": layout.runtime_low_s, "runtime_high_s": layout.runtime_high_s,
                       "metrics": layout.metrics, "slo_met": layout.slo_met, "cost": cost}
    instances = layout.sim.instances if layout.sim is not None else 1  # a target rate may need several
    try:
        total, p95 = (to_usd(x, offer.currency, rates) * instances for x in (cost.total, cost.total_p95))
    except SpecError:
        no_rate = f"priced in {offer.currency} and no exchange rate was given: {missing_rate_fix(offer.currency)}"
        return PickRow(**base | timing | {"excluded": no_rate})
    risk = oom_risk_usd(offer, layout, total, options, machine, rates) if layout.fit_verdict == TIGHT else 0.0
    low, high = total_band(*priced_band(partial(price_on_machine, offer, options=options, check=machine, rates=rates,
                                                formulas=False),
                                        partial(to_usd, currency=offer.currency, rates=rates),
                                        layout.runtime_low_s, layout.runtime_high_s),
                           (risk,))  # a tight fit: an out-of-memory first attempt is on the bill's high end
    if instances > 1:  # every instance bills alike (an open high end stays open)
        low, high = low * instances, (high * instances if high is not None else None)
    units = unit_costs(job, total)
    # The deadline is on when the job ends: the dataset's pull comes before the first step.
    pull_s = machine.transfer.seconds if machine.transfer is not None else 0.0
    reason = exclusion(layout.runtime_s, total, layout.slo_miss, deadline_s, budget_usd, currency, pull_s=pull_s)
    return PickRow(**base | timing | {"total_usd": total, "total_p95_usd": p95, "unit_costs_usd": units,
                                      "excluded": reason, "total_low_usd": low, "total_high_usd": high,
                                      "oom_risk_usd": risk})


def _layout_fields(job: Job, placement: Placement) -> dict[str, object]:
    """The layout a row states in words: GPUs per replica, replicas, and how a replica splits the model.

    Training data-parallel holds one copy of the model per tensor-parallel group (plain DDP: one per
    GPU); sharded (ZeRO-3, FSDP), the whole group holds one copy. Serving: one copy per TP group."""
    laid = placement.job
    if isinstance(laid, FinetuneJob):
        if laid.sharding in ("zero3", "fsdp"):
            return {"gpus_per_replica": placement.group, "replicas": 1, "parallel": laid.sharding}
        tp = laid.tensor_parallel
        return {"gpus_per_replica": tp, "replicas": placement.group // tp, "parallel": "data"}
    parallel = "tensor" if isinstance(job, InferenceJob) else ""
    return {"gpus_per_replica": placement.group, "replicas": placement.replicas, "parallel": parallel}


def oom_risk_usd(offer: Offer, layout: Layout, total_usd: float, options: CostOptions | None,
                 machine: MachineCheck, rates: Sequence[ExchangeRate]) -> float:
    """What an out-of-memory first attempt adds to a tight row's bill, in USD: one billed failed start
    (start-up and idle tail, under the offer's minimum and increment: the run dies at its first steps)
    plus the fallback's total less this total. The fallback is the plan that leaves the band's
    headroom; where none exists the same job is run again, so the whole total is at risk."""
    used = machine_offer(offer, machine)  # the failed start pulls the dataset too
    failed = billed_seconds(billed_startup_s(used) + used.idle_tail_s, used) * rate_per_s(used)
    extra = total_usd
    if layout.fallback_runtime_s is not None:
        try:
            fallback = price_on_machine(offer, layout.fallback_runtime_s, options, machine, rates, formulas=False)
            extra = max(0.0, to_usd(fallback.total, offer.currency, rates) - total_usd)
        except SpotNeverFinishes:  # the slower fallback cannot finish on spot: the job as laid out runs again
            pass
    return to_usd(failed, offer.currency, rates) + extra


def lay_out(job: Job, model: Model, gpu: Gpu, count: int, *, as_written: bool = False,
            margin_pct: float | None = None, target_rps: float | None = None) -> Layout:
    """The job on `count` × `gpu`: as written if it fits, else under a plan that keeps the task
    (unless `as_written`); the runtime with replicas and the plan's unmodelled slowdown applied.
    A layout inside the error band (*tight*) gives way to a plan that leaves the band's headroom when
    that plan is at most MARGIN_PLAN_LITTLE slower; otherwise it stays, marked, with that plan as its
    fallback (what an out-of-memory first attempt would run)."""
    placement = place(job, model, gpu, count)
    if placement is None and not as_written:
        placement = place_with_plan(job, model, gpu, count)
    if placement is None:
        how = " as written" if as_written else ", even with a plan"  # a plan: changes that keep the task
        return Layout(placement=None, unfit=f"does not fit in {count} × {gpu.name}{how}",
                      options=() if as_written else _options(job, model, gpu, count))
    layout = _timed_layout(job, model, gpu, count, placement, target_rps)
    if layout.placement is None:
        return layout
    band = band_for(placement.job, margin_pct)
    peak = estimate_memory(placement.job, model, gpu)
    if judge_fit(peak.peak_bytes, peak.usable_bytes, band) != TIGHT:
        return layout
    tight = layout.model_copy(update={"fit_verdict": TIGHT})
    safer = None if as_written else _margin_placement(placement, model, gpu, band)
    if safer is None:
        return tight
    roomy = _timed_layout(job, model, gpu, count, safer, target_rps)
    if roomy.placement is None:
        return tight
    if roomy.runtime_s <= layout.runtime_s * (1.0 + MARGIN_PLAN_LITTLE):
        return roomy
    return tight.model_copy(update={"fallback_runtime_s": roomy.runtime_s})


def _margin_placement(placement: Placement, model: Model, gpu: Gpu, band: Band) -> Placement | None:
    """The placement with more task-keeping changes, until it leaves the band's headroom (None: none do)."""
    more = plan_keeping_task(placement.job, model, gpu, same_gpus=True, band=band)
    if not more:
        return None
    return placement.model_copy(update={"job": planned_job(placement.job, more), "plan": (*placement.plan, *more)})


def _timed_layout(job: Job, model: Model, gpu: Gpu, count: int, placement: Placement,
                  target_rps: float | None = None) -> Layout:
    """A placement timed: the speed model's runtime with replicas and the plan's slowdowns, SLOs checked;
    a serving job's runtime and SLO verdict from the simulation at its load where it can run."""
    timed = _timed_job(placement, job)
    findings = check(timed, model, gpu, gpus=placement.group)  # a fallback's slowdown: of the job timed here
    cannot = exclusion_reason(findings)
    if cannot is not None:  # the rules say it cannot run here (FlashAttention 2 on a T4): no time, the fix
        return Layout(placement=None, unfit=f"{cannot} (on {count} × {gpu.name})", compat=findings)
    try:
        speed = estimate_speed(timed, model, gpu, gpus=placement.group)
    except GpuscoutError as exc:  # no rate to time it with (bf16 on a V100, GH200 × n): excluded, with the reason
        why, fix = (f"{s[:1].lower()}{s[1:]}".rstrip(".") for s in (exc.why, exc.fix))
        return Layout(placement=None, unfit=f"no job time on {count} × {gpu.name}: {why}; to fix, {fix}")
    slow, slow_high = plan_slowdown(placement.plan)
    runtime, low, high = (s / placement.replicas for s in
                          (speed.job_s * slow, speed.job_low_s * slow, speed.job_high_s * slow_high))
    misses = slo_misses(job, speed, slow_high)
    layout = Layout(placement=placement, unfit=None, speed=speed, runtime_s=runtime, runtime_low_s=low,
                    runtime_high_s=high, metrics=_scaled_metrics(speed, placement, slow), compat=findings,
                    slo_miss="; ".join(misses) + " at the band's slow end" if misses else None,
                    slo_met=not misses if any(k in speed.metrics for k in _slo_targets(job)) else None)
    if not isinstance(job, InferenceJob) or not isinstance(timed, InferenceJob) \
            or not isinstance(placement.job, InferenceJob):
        return layout
    return _simulated(layout, job, timed, placement.job, model, gpu, placement.replicas, target_rps, slow)


def _simulated(layout: Layout, job: InferenceJob, timed: InferenceJob, placed: InferenceJob, model: Model, gpu: Gpu,
               replicas: int, target_rps: float | None, slowdown: float) -> Layout:
    """The serving layout with its runtime, throughputs and SLO verdict from the simulation at the job's
    load; where the simulation cannot run, the single-request estimate stays and says so."""
    sim = simulate_layout(timed, placed, model, gpu, replicas, target_rps)
    if isinstance(sim, str):
        return layout.model_copy(update={"sim_skipped": sim,
                                         "slo_source": SOURCE_ESTIMATE if layout.slo_met is not None else None})
    speed = layout.speed
    assert speed is not None
    # The requests over the deployment's simulated rate; a target rate is the rate the job is served at.
    rate = target_rps if target_rps is not None and sim.replicas_needed else sim.requests_per_s
    runtime = job.requests / rate * slowdown
    if rate == target_rps:  # served at the given rate: the band is in the replicas, not the runtime
        low = high = runtime
    else:
        low = runtime * (speed.job_low_s / speed.job_s if speed.job_s else 1.0)
        high = max(runtime, job.requests / sim.slow_requests_per_s * slowdown)
    scale = rate / sim.requests_per_s
    ttft, tpot, e2e = sim.latency_means_s  # at the load a replica carries, not a lone request's
    metrics = {**layout.metrics, TTFT_S: ttft, TPOT_S: tpot, E2E_S: e2e,
               "requests_per_s": rate, "output_tokens_per_s": sim.output_tokens_per_s * scale,
               "replicas": float(sim.replicas_used), "instances": float(sim.instances),
               "ttft_p95_s_slow_end": sim.ttft_p95_s, "tpot_p95_s_slow_end": sim.tpot_p95_s}
    if sim.users_per_replica is not None:
        metrics["users_per_replica"] = float(sim.users_per_replica)
    if sim.held_users is not None:
        metrics["users_held_per_replica"] = float(sim.held_users)
        if sim.held_at_least:  # searched only up to the job's users: a lower bound
            metrics["users_held_per_replica_at_least"] = 1.0
    if sim.held_rate_per_s is not None:
        metrics["requests_per_s_held_per_replica"] = sim.held_rate_per_s
    if sim.replicas_needed is not None:
        metrics["replicas_needed"] = float(sim.replicas_needed)
    missed = bool(sim.misses) or (target_rps is not None and sim.replicas_needed is None)
    checked = bool(_slo_targets(job)) or target_rps is not None
    return layout.model_copy(update={
        "sim": sim, "slo_source": SOURCE_SIMULATED, "slo_note": one_instance_words(sim), "runtime_s": runtime,
        "runtime_low_s": low,
        "runtime_high_s": high, "metrics": metrics, "slo_miss": miss_words(sim, target_rps) if missed else None,
        "slo_met": (not missed) if checked else None})


def _timed_job(placement: Placement, job: Job) -> Job:
    """The job the speed model times. An fp8 KV cache a plan adds frees memory but is timed at the
    original KV width: vLLM's fp8 KV cache brings no latency gain without fused dequantization
    (docs/estimator.md §2.11), so fewer KV bytes must not make the plan look faster."""
    placed = placement.job
    if isinstance(placed, InferenceJob) and isinstance(job, InferenceJob) and \
            any("kv_cache_dtype" in s.spec_change for s in placement.plan):
        return placed.model_copy(update={"kv_cache_dtype": job.kv_cache_dtype})
    return placed


def place(job: Job, model: Model, gpu: Gpu, count: int) -> Placement | None:
    match job:
        case FinetuneJob():
            return _place_finetune(job, model, gpu, count)
        case InferenceJob():
            return _place_inference(job, model, gpu, count)
        case ImageJob() | VideoJob():
            fits = estimate_memory(job, model, gpu).fits
            return Placement(job=job, gpus_needed=1, group=1, replicas=count) if fits else None
    raise AssertionError(job)


def _place_finetune(job: FinetuneJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """All the instance's GPUs train data-parallel; shard with ZeRO-3 if plain DP does not fit."""
    for laid in _finetune_layouts(job, count):
        if estimate_memory(laid, model, gpu).fits:
            return _finetune_placement(laid, model, gpu, count, ())
    return None


def _finetune_layouts(job: FinetuneJob, count: int) -> list[FinetuneJob]:
    """The job data-parallel over `count` GPUs: with its own sharding, then with ZeRO-3."""
    tp = job.tensor_parallel if count % job.tensor_parallel == 0 else 1
    return [job.model_copy(update={"gpus": count, "sharding": sharding, "tensor_parallel": tp})
            for sharding in dict.fromkeys((job.sharding, "zero3"))]


def _finetune_placement(laid: FinetuneJob, model: Model, gpu: Gpu, count: int,
                        plan: tuple[Suggestion, ...]) -> Placement:
    needed = next(n for n in _counts(count) if estimate_memory(laid, model, gpu, gpus=n).fits)
    return Placement(job=laid, gpus_needed=needed, group=count, replicas=1, plan=plan)


def _place_inference(job: InferenceJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """The smallest tensor-parallel group that fits; the remaining GPUs serve as replicas."""
    for tp in _tensor_parallel_sizes(model, count):
        laid = job.model_copy(update={"tensor_parallel": tp})
        if estimate_memory(laid, model, gpu).fits:
            return Placement(job=laid, gpus_needed=tp, group=tp, replicas=count // tp)
    return None


def place_with_plan(job: Job, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """The same layouts as `place`, each under the cheapest plan of task-keeping changes that fits."""
    match job:
        case FinetuneJob():
            return _plan_finetune(job, model, gpu, count)
        case InferenceJob():
            return _plan_inference(job, model, gpu, count)
        case ImageJob() | VideoJob():
            plan = plan_keeping_task(job, model, gpu, same_gpus=True)
            if not plan:
                return None
            return Placement(job=planned_job(job, plan), gpus_needed=1, group=1, replicas=count, plan=plan)
    raise AssertionError(job)


def _plan_finetune(job: FinetuneJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """Plans for plain data parallelism and for ZeRO-3: the faster one wins (ZeRO-3 trades memory
    for all-gathers, which a slow interconnect may make dearer than checkpointing)."""
    placements = []
    for laid in _finetune_layouts(job, count):
        plan = plan_keeping_task(laid, model, gpu, same_gpus=True)
        planned = planned_job(laid, plan)
        if plan and isinstance(planned, FinetuneJob):
            placements.append(_finetune_placement(planned, model, gpu, count, plan))
    return min(placements, key=lambda p: _planned_seconds(p, model, gpu), default=None)


def _planned_seconds(placement: Placement, model: Model, gpu: Gpu) -> float:
    try:
        return estimate_speed(placement.job, model, gpu, gpus=placement.group).job_s * plan_slowdown(placement.plan)[0]
    except GpuscoutError:  # untimeable here: never the faster plan (lay_out reports why)
        return float("inf")


def _plan_inference(job: InferenceJob, model: Model, gpu: Gpu, count: int) -> Placement | None:
    """The smallest tensor-parallel group a plan makes fit; the remaining GPUs serve as replicas."""
    for tp in _tensor_parallel_sizes(model, count):
        laid = job.model_copy(update={"tensor_parallel": tp})
        plan = plan_keeping_task(laid, model, gpu, same_gpus=True)
        if plan:
            return Placement(job=planned_job(laid, plan), gpus_needed=tp, group=tp, replicas=count // tp, plan=plan)
    return None


def _tensor_parallel_sizes(model: Model, count: int) -> list[int]:
    # Co-served models share the tensor-parallel group, so each one's heads must split evenly.
    shapes = (model, *model.co_served) if isinstance(model, ColocatedShape) else (model,)
    return [tp for tp in _counts(count) if all(getattr(s, "num_attention_heads", 1) % tp == 0 for s in shapes)]


def _options(job: Job, model: Model, gpu: Gpu, count: int) -> tuple[Suggestion, ...]:
    """Changes that alter the task, measured on the most spread-out layout the instance allows."""
    match job:
        case FinetuneJob():
            widest: Job = _finetune_layouts(job, count)[-1]
        case InferenceJob():
            widest = job.model_copy(update={"tensor_parallel": _tensor_parallel_sizes(model, count)[-1]})
        case ImageJob() | VideoJob():
            widest = job
    return task_changing_options(widest, model, gpu)


def _counts(limit: int) -> list[int]:
    """1, 2, 4, … up to the instance's GPU count, and the count itself."""
    counts, n = [], 1
    while n < limit:
        counts.append(n)
        n *= 2
    return [*counts, limit]


def _scaled_metrics(speed: SpeedEstimate, placement: Placement, slowdown: float = 1.0) -> dict[str, float]:
    """Throughputs scale with replicas; latencies do not. A plan's slowdown lowers rates, lengthens times."""
    return {key: _slowed(key, value * placement.replicas if key in THROUGHPUTS else value, slowdown)
            for key, value in speed.metrics.items()}


def _slowed(key: str, value: float, slowdown: float) -> float:
    return value / slowdown if key in RATES else value * slowdown


def _slo_targets(job: Job) -> dict[str, float]:
    if not isinstance(job, InferenceJob):
        return {}
    targets = {TTFT_S: job.slo.ttft_p95_s, TPOT_S: job.slo.tpot_p95_s, E2E_S: job.slo.e2e_p95_s}
    return {k: v for k, v in targets.items() if v is not None}


def slo_misses(job: Job, speed: SpeedEstimate, slowdown: float = 1.0) -> tuple[str, ...]:
    """Each P95 target the pessimistic end of the band misses (a mean alone would flatter), as
    'TPOT 0.0700 s > 0.05 s'; `slowdown` is a plan's pessimistic factor for what the model leaves out."""
    misses = []
    for k, v in _slo_targets(job).items():
        slow_end = speed.metrics[k] * speed.efficiency.band_high * slowdown if k in speed.metrics else None
        if slow_end is not None and not slow_end <= v:
            misses.append(f"{SLO_METRICS[k]} {slow_end:#.3g} s > {v:g} s")
    return tuple(misses)


def slo_met(job: Job, speed: SpeedEstimate) -> bool | None:
    """Whether every P95 target is met at the band's slow end; None when the job has none."""
    checked = [k for k in _slo_targets(job) if k in speed.metrics]
    return not slo_misses(job, speed) if checked else None


def mark_pareto(rows: list[PickRow], separable: Sequence[bool | None] | None = None) -> list[PickRow]:
    """Mark rows no other row beats on both runtime and total cost (the time–cost frontier).

    A row is dominated when another is no slower and no dearer, and better on one of the two. One
    sweep in order of total (a catalog has thousands of rows, so no pairwise comparison): a row is
    dominated by a cheaper row as fast or faster, or by an equally priced, faster one."""
    def key(r: PickRow) -> tuple[float, float]:
        return r.total_usd or 0.0, r.runtime_s or 0.0

    frontier: set[int] = set()
    fastest_cheaper = math.inf  # the shortest runtime among rows cheaper than the current total
    order = sorted(range(len(rows)), key=lambda i: key(rows[i]))
    for _, group in itertools.groupby(order, key=lambda i: key(rows[i])[0]):
        members = list(group)
        fastest_here = min(key(rows[i])[1] for i in members)
        frontier |= {i for i in members if key(rows[i])[1] < fastest_cheaper and key(rows[i])[1] <= fastest_here}
        fastest_cheaper = min(fastest_cheaper, fastest_here)
    flags = separable if separable is not None else [r.separable for r in rows]  # one copy a row sets both
    return [r.model_copy(update={"pareto": i in frontier, "separable": flags[i]}) for i, r in enumerate(rows)]
