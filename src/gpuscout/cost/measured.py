"""Total job cost from a MEASUREMENT: the whole job's time on each machine, billed.

The whole job's time is the one `gpuscout bench` reports (`job_s`, workload/jobtime.py): repeats
of the job's own work × the mean time per repeat, plus the measured start-up and checkpoint
saves, on the case at the job's own settings (`results.compare.headline_metric`); a depth-sliced
result uses its extrapolated figure. For a load test, or a result without `job_s`, it is the
job's size over the measured throughput:

    fine-tune   dataset_tokens × epochs / tokens_per_s / data-parallel ranks (gpus / tensor_parallel)
    inference   requests / requests_per_s                     (or requests × output_tokens / output_tokens_per_s)
    image       images / images_per_s
    video       clips / clips_per_s

The bench measures one device; a multi-GPU fine-tune is projected linearly over its data-parallel
ranks. The time is then billed with the offer's rules (`billing.price_job`: startup, idle tail,
increments, minimums, storage, spot), runs that failed are billed as failed attempts, amounts are
converted to USD with the sheet's or the command line's rates, and divided into per-unit costs
(`pick.unit_costs`). The 95% interval of the time (two-level, over runs) gives a cost range,
which the verdict uses to tell a measurable cost difference from noise.

The measured throughput is not rescaled to the offer's GPU count: inference and image benches
measure one device and no replicas are assumed (a warning says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from gpuscout.cost.billing import CostOptions, JobCost, price_job
from gpuscout.cost.pick_row import OfferFacts, offer_facts, unit_costs
from gpuscout.cost.verdict import CostPoint
from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.currency import USD, DisplayCurrency, ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import PriceSheet, find_offer
from gpuscout.results.compare import headline_metric
from gpuscout.results.runs import metric_runs
from gpuscout.results.schema import BenchResult, Metric
from gpuscout.stats import mean_ci
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob, parse_job


class MeasuredWork(Frozen):
    """How long the whole job takes at the measured throughput."""

    case: str
    metric: str
    extrapolated: bool
    throughput: float  # units per second (the metric's mean)
    throughput_low: float | None  # 95% CI of the mean, when measured repeatedly
    throughput_high: float | None
    units: float  # the whole job's work in the metric's units
    unit: str
    work_s: float
    work_low_s: float | None  # at the fast end of the throughput's CI
    work_high_s: float | None
    formula: str


class MeasuredCost(OfferFacts):
    example: bool
    work: MeasuredWork
    cost: JobCost  # in the offer's currency
    total_usd: float
    total_p95_usd: float
    low_usd: float | None  # bill at the fast end of the throughput's 95% CI
    high_usd: float | None  # … and at the slow end
    unit_costs_usd: dict[str, float]
    failed_runs: int = 0  # runs of the job's case that failed (billed as failed attempts)
    runs: int = 1
    warnings: tuple[str, ...]


def measured_work(result: BenchResult) -> MeasuredWork:
    """The whole job's time on the machine that measured `result`, with its 95% interval.

    A bench result carries the whole-job time itself (`job_s`, workload/jobtime.py: repeats × mean
    repeat time + start-up + checkpoint saves), the figure `gpuscout bench` shows; a load test (or a
    result from before `job_s`) gives a throughput, and the job takes its units over it.
    """
    job = parse_job(dict(result.job), origin=f"{result.name}: the job recorded in the result")
    case, metric = headline_metric(result)
    if not metric.value > 0:
        raise SpecError(f"{result.name}: the measured {metric.name} is {metric.value:g}: the job would never finish.",
                        "The whole job's time is its work divided by the throughput measured at the job's size.",
                        "Check the result's cases and notes (a stalled or failing run measures no work); re-run "
                        "`gpuscout bench`.")
    low, high = _interval(metric)
    label = f"{metric.name}{' (extrapolated to full depth)' if metric.extrapolated else ''}"
    runs = f", mean of {len(metric.runs)} runs" if len(metric.runs) > 1 else ""
    if metric.name.removesuffix("_full_depth") == "job_s":
        return MeasuredWork(case=case.name, metric=metric.name, extrapolated=metric.extrapolated,
                            throughput=1 / metric.value, throughput_low=1 / high if high else None,
                            throughput_high=1 / low if low else None, units=1.0, unit="jobs", work_s=metric.value,
                            work_low_s=low, work_high_s=high,
                            formula=f"measured {label} {metric.value:,.0f} s{runs} "
                                    f"({metric.note.removeprefix('projected: ')})")
    units, unit, formula = job_units(job, metric.name.removesuffix("_full_depth"))
    return MeasuredWork(case=case.name, metric=metric.name, extrapolated=metric.extrapolated,
                        throughput=metric.value, throughput_low=low, throughput_high=high, units=units, unit=unit,
                        work_s=units / metric.value, work_low_s=units / high if high else None,
                        work_high_s=units / low if low else None,
                        formula=f"{formula} / measured {label} {metric.value:.4g} {metric.unit}{runs}")


def _interval(metric: Metric) -> tuple[float | None, float | None]:
    """95% interval of the metric's mean (two-level over runs), when it was measured repeatedly."""
    runs = metric_runs(metric)
    if len(runs) < 2 and len(runs[0]) < 2:
        return None, None
    low, high = mean_ci(runs)
    return (low, high) if low > 0 else (None, None)


def job_units(job: Job, metric: str) -> tuple[float, str, str]:
    """The whole job's size in the units of a throughput `metric`, the unit's name, and the formula."""
    match job, metric:
        case FinetuneJob(), "tokens_per_s":
            return (job.dataset_tokens * job.epochs / _ranks(job), "training tokens per data-parallel rank",
                    f"dataset_tokens {job.dataset_tokens:,} × epochs {job.epochs:g}{_per_rank(job)}")
        case FinetuneJob(), "samples_per_s":
            return (job.dataset_tokens * job.epochs / job.seq_len / _ranks(job), "sequences per data-parallel rank",
                    f"dataset_tokens {job.dataset_tokens:,} × epochs {job.epochs:g} / seq_len {job.seq_len}"
                    f"{_per_rank(job)}")
        case InferenceJob(), "requests_per_s":
            return job.requests, "requests", f"requests {job.requests:,}"
        case InferenceJob(), "output_tokens_per_s":
            return (job.requests * job.output_tokens, "output tokens",
                    f"requests {job.requests:,} × output_tokens {job.output_tokens}")
        case ImageJob(), "images_per_s":
            return job.images, "images", f"images {job.images:,}"
        case VideoJob(), "clips_per_s":
            return job.clips, "clips", f"clips {job.clips:,}"
    raise SpecError(f"A {job.kind} job cannot be sized in {metric}.",
                    "The result's throughput metric does not match its job kind.",
                    "Re-run `gpuscout bench` with the job spec; do not edit result files by hand.")


def _ranks(job: FinetuneJob) -> int:
    """Data-parallel ranks: the bench measures one device and projects linearly, as its own job_s does."""
    return job.gpus // job.tensor_parallel


def _per_rank(job: FinetuneJob) -> str:
    ranks = _ranks(job)
    return "" if ranks == 1 else f" / {ranks} data-parallel ranks (gpus / tensor_parallel; linear scaling assumed)"


def price_measured(result: BenchResult, offer: Offer, *, rates: Sequence[ExchangeRate] = (), today: date,
                   options: CostOptions | None = None) -> MeasuredCost:
    """The whole bill for the job on `offer` at the throughput `result` measured, in USD.

    Runs of the job's case that failed (out of memory, a crash, a timeout) are billed as failed
    attempts at the rate they happened: with f of the runs failing, f / (1 − f) failed attempts
    are expected before one succeeds (docs/cost.md §2.9).
    """
    work = measured_work(result)
    job = parse_job(dict(result.job), origin=f"{result.name}: the job recorded in the result")
    failures = measured_failures(result, work.case)
    options = _with_failures(options, failures)
    cost = price_job(offer, work.work_s, options)
    total, p95 = (to_usd(x, offer.currency, rates) for x in (cost.total, cost.total_p95))
    low = high = None
    if work.work_low_s is not None and work.work_high_s is not None:
        low, high = (to_usd(price_job(offer, s, options).total, offer.currency, rates)
                     for s in (work.work_low_s, work.work_high_s))
    return MeasuredCost.model_validate({
        **offer_facts(offer, today), "example": offer.example, "work": work, "cost": cost, "total_usd": total,
        "total_p95_usd": p95, "low_usd": low, "high_usd": high, "unit_costs_usd": unit_costs(job, total),
        "failed_runs": failures[0], "runs": failures[1], "warnings": offer_warnings(result, job, offer)})


def measured_failures(result: BenchResult, case_name: str) -> tuple[int, int]:
    """(failed runs, runs) of the case that measured the job: crashes, OOMs and timeouts, not interruptions."""
    case = next(c for c in result.cases if c.name == case_name)
    failed = [f for f in (*([case.failure] if case.failure else []), *case.failed_runs) if f.kind != "interrupted"]
    return len(failed), case.runs


def _with_failures(options: CostOptions | None, failures: tuple[int, int]) -> CostOptions:
    base = options or CostOptions()
    failed, runs = failures
    if not failed or failed >= runs:
        return base
    share = failed / runs
    return base.model_copy(update={"failed_attempts": base.failed_attempts + share / (1 - share)})


def offer_warnings(
    result: BenchResult, job: Job, offer: Offer
) -> tuple[str, ...]:
    out = []
    if result_sku(result) is None:
        out.append(f"{result.name} ran without a recognised GPU; offer {offer.id} ({offer.gpu}) is priced at "
                   "the throughput measured there.")
    if isinstance(job, FinetuneJob) and job.gpus != offer.gpu_count:
        out.append(f"the job asks for {job.gpus} GPU(s) but offer {offer.id} has {offer.gpu_count}; its time "
                   f"assumes the job's {job.gpus}.")
    elif not isinstance(job, FinetuneJob) and offer.gpu_count > 1:
        out.append(f"offer {offer.id} has {offer.gpu_count} GPUs; the measured throughput is one device's and is "
                   "not multiplied by replicas.")
    return tuple(out)


def cost_point(cost: MeasuredCost, currency: DisplayCurrency = USD) -> CostPoint:
    note = f"{cost.provider}'s {cost.observed_at} price{' (EXAMPLE)' if cost.example else ''}"
    return CostPoint(total_usd=cost.total_usd, low_usd=cost.low_usd, high_usd=cost.high_usd, price_note=note,
                     currency=currency.code, usd_per_unit=currency.usd_per_unit)


# ---------------------------------------------------------------- which offer for which result

def result_sku(result: BenchResult) -> str | None:
    sku = result.fingerprint.gpu_sku
    if sku is None or result.fixed.device == "cpu":
        return None
    try:
        return find_gpu(sku).sku
    except GpuscoutError:
        return sku


def price_results(results: Sequence[BenchResult], sheet: PriceSheet, offer_ids: Sequence[str], *,
                  rates: Sequence[ExchangeRate], today: date, options: CostOptions | None = None) -> list[MeasuredCost]:
    """The whole job's bill on each result's offer (`match_offers`), at its measured throughput."""
    offers = match_offers(results, sheet, offer_ids)
    return [price_measured(r, o, rates=rates, today=today, options=options)
            for r, o in zip(results, offers, strict=True)]


def match_offers(results: Sequence[BenchResult], sheet: PriceSheet, offer_ids: Sequence[str]) -> list[Offer]:
    """One offer per result: the ids given, in order, or the single offer for each result's GPU."""
    if not offer_ids:
        return [auto_offer(r, sheet.offers) for r in results]
    if len(offer_ids) != len(results):
        raise SpecError(f"{len(offer_ids)} --offer id(s) for {len(results)} results.",
                        "Each result is priced with its own offer, matched by position.",
                        "Pass one --offer ID per result in the same order, or omit --offer to match by GPU.")
    return [given_offer(r, oid, sheet) for r, oid in zip(results, offer_ids, strict=True)]


def given_offer(result: BenchResult, offer_id: str, sheet: PriceSheet) -> Offer:
    offer, sku = find_offer(sheet, offer_id), result_sku(result)
    if sku is not None and offer.gpu != sku:
        raise SpecError(f"Offer {offer_id} is for {offer.gpu}, but {result.name} ran on {sku}.",
                        "The cost comes from the throughput measured on that GPU; another GPU runs at another speed.",
                        f"Pass an offer for {sku}, in the same order as the results.")
    return offer


def auto_offer(result: BenchResult, offers: Sequence[Offer]) -> Offer:
    sku = result_sku(result)
    if sku is None:
        raise SpecError(f"{result.name} records no GPU SKU (device {result.fixed.device}), so no offer matches it.",
                        "Without --offer, each result is priced with the offer for the GPU it ran on.",
                        "Pass --offer ID for every result, in order.")
    matches = [o for o in offers if o.gpu == sku]
    same_count = [o for o in matches if o.gpu_count == result.fingerprint.gpu_count]
    if len(same_count) == 1:
        return same_count[0]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SpecError(f"No offer in the price sheet is for {sku} ({result.name}).",
                        "Without --offer, each result is priced with the offer for the GPU it ran on.",
                        f"Add an [[offer]] with gpu = \"{sku}\", or pass --offer ID for every result.")
    ids = ", ".join(o.id for o in (same_count or matches))
    raise SpecError(f"Several offers match {sku} ({result.name}): {ids}.",
                    "The price sheet has more than one offer for that GPU, and gpuscout will not guess.",
                    "Pass --offer ID for every result, in the order of the results.")
