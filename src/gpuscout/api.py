"""The public Python API: the command line's steps as functions that return typed results.

    from gpuscout import estimate, pick, bench, compare, load

Each function takes the same inputs as its command (a job is a `Job`, a spec path, the name of
a shipped example, or None for the built-in default) and returns a frozen pydantic model; the
command line renders exactly these objects (`gpuscout.report`). Heavy modules are imported
inside the functions, so `import gpuscout` stays cheap. docs/api.md has a runnable example.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, VideoJob

if TYPE_CHECKING:
    from gpuscout.cost.billing import CostOptions, JobCost
    from gpuscout.cost.calculator import BilledCost, PlainCost
    from gpuscout.cost.load_cost import LoadCost
    from gpuscout.cost.measured import MeasuredCost
    from gpuscout.cost.pick import PickResult
    from gpuscout.documents.kinds import Document
    from gpuscout.estimator.breakdown import MemoryBreakdown
    from gpuscout.estimator.calibration import Calibration, Observation
    from gpuscout.estimator.screen import Screening
    from gpuscout.hardware.catalog import Gpu
    from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate
    from gpuscout.hardware.offers import Offer
    from gpuscout.hardware.price_sheet import PriceSheet
    from gpuscout.loadgen.plan import LoadPlan
    from gpuscout.loadgen.probe import ProbeResult
    from gpuscout.loadgen.search import SearchResult
    from gpuscout.loadgen.session import ProgressFactory
    from gpuscout.measure.harness import BenchSettings
    from gpuscout.results.beside import EstimateBeside
    from gpuscout.results.compare import Comparison
    from gpuscout.results.database import StoredRun
    from gpuscout.results.ratios import CompareOptions
    from gpuscout.results.schema import BenchResult
    from gpuscout.results.verdict import Verdict
    from gpuscout.trace.llm import TraceResult
    from gpuscout.workload.image import ImageModelShape
    from gpuscout.workload.shape import ModelShape
    from gpuscout.workload.video import VideoModelShape

Job = FinetuneJob | InferenceJob | ImageJob | VideoJob
JobRef = Job | str | Path | None

__all__ = [
    "BenchReport", "CalibrateReport", "CompareReport", "CostReport", "DoctorReport", "EstimateReport", "Job",
    "LoadReport", "ModelReport", "PickReport", "ReportInputs", "ResultsList", "StoredRunReport", "bench", "calibrate",
    "compare", "cost", "describe_model", "doctor", "estimate", "export_result", "gpus", "list_results", "load",
    "load_job", "pick", "probe", "record_run", "report_inputs", "show_result", "store_path",
]


# ---------------------------------------------------------------- jobs -----------------------

def load_job(ref: JobRef = None) -> Job:
    """A job from a spec path, a shipped example's name, or None for the built-in default."""
    return _job(ref)[0]


def _job(ref: JobRef) -> tuple[Job, Path | None]:
    if isinstance(ref, FinetuneJob | InferenceJob | ImageJob | VideoJob):
        return ref, None
    from gpuscout.workload.jobs import load_job_ref

    return load_job_ref(ref)


def _job_and_model(ref: JobRef) -> tuple[Job, ModelShape | ImageModelShape | VideoModelShape, Path | None]:
    from gpuscout.workload.jobs import resolve_job_model

    job, base_dir = _job(ref)
    return job, resolve_job_model(job, base_dir), base_dir


def gpus() -> tuple[Gpu, ...]:
    """The GPU catalog."""
    from gpuscout.hardware.catalog import load_catalog

    return tuple(load_catalog())


# ---------------------------------------------------------------- estimate -------------------

@dataclass(frozen=True)
class EstimateReport:
    job: Job
    screening: Screening
    detailed: bool  # GPUs were named: show every GPU's breakdown
    trace: TraceResult | None = None  # the real model step traced under FakeTensorMode
    trace_analytic: MemoryBreakdown | None = None  # the analytic estimate of exactly the traced job
    trace_scope: str | None = None  # what was traced ("2 layers, 1 GPU, no sharding, …")
    trace_skipped: str | None = None  # why no trace was made
    calibration: Calibration | None = None  # the measured calibration the speeds used (docs/estimator.md §3.11)
    calibration_path: Path | None = None


def estimate(job: JobRef = None, *, gpus: Sequence[str] = (), trace: bool = False,
             trace_layers: int | None = None, calibration: Calibration | str | Path | None = None,
             use_calibration: bool = True) -> EstimateReport:
    """Memory, fit, fixes, limits and speed of the job on each GPU (every catalog GPU by default).

    Speeds use `calibration` (a file or a `Calibration`), else the user's calibration file where one
    exists; `use_calibration=False` keeps the default efficiency factors."""
    from gpuscout.estimator.efficiency import calibrated
    from gpuscout.estimator.screen import screen
    from gpuscout.hardware.catalog import find_gpu, load_catalog

    the_job, model, base_dir = _job_and_model(job)
    chosen = [find_gpu(n) for n in gpus] if gpus else list(load_catalog())
    used, used_path = _calibration(calibration, use_calibration)
    with calibrated(used):
        screening = screen(the_job, model, chosen)
    if not trace:
        return EstimateReport(job=the_job, screening=screening, detailed=bool(gpus), calibration=used,
                              calibration_path=used_path)
    beside = _trace_beside(the_job, model, chosen[0], base_dir, trace_layers)
    return EstimateReport(job=the_job, screening=screening, detailed=bool(gpus), calibration=used,
                          calibration_path=used_path, **beside)


def _calibration(given: Calibration | str | Path | None, use: bool) -> tuple[Calibration | None, Path | None]:
    """The calibration to use and its file: the one given, else the user's file where it exists."""
    from gpuscout.estimator.calibration import Calibration, active_calibration

    if isinstance(given, Calibration):
        return (given if use else None), None
    active = active_calibration(Path(given) if given is not None else None, use=use)
    return active.calibration, active.path


def _trace_beside(job: Job, model: ModelShape | ImageModelShape | VideoModelShape, gpu: Gpu, base_dir: Path | None,
                  layers: int | None) -> dict[str, Any]:
    """Trace the job's real model and estimate exactly the traced job beside it.

    The trace runs one process on one device with the standard loss, so the analytic side is
    re-estimated for that: the same depth, one GPU, no sharding, one micro-batch, no chunked loss.
    """
    from gpuscout.errors import GpuscoutError
    from gpuscout.estimator.memory import estimate_memory
    from gpuscout.workload.hf_config import config_with_depth, shape_from_hf_config
    from gpuscout.workload.resolve import llm_config
    from gpuscout.workload.shape import ModelShape

    if isinstance(job, ImageJob | VideoJob) or not isinstance(model, ModelShape):
        return {"trace_skipped": "trace mode covers language models only; image and video estimates are analytic"}
    config = llm_config(job.model, base_dir=base_dir)
    if layers is not None:
        config = config_with_depth(config, layers)
        model = shape_from_hf_config(config, name=f"{model.name} ({layers} layers)", source=model.source)
    traced_job = _as_traced(job)
    try:
        traced = _run_trace(traced_job, model, config)
    except GpuscoutError as exc:
        return {"trace_skipped": exc.render()}
    scope = f"{model.num_layers} layers, 1 GPU, no sharding" + (
        ", one micro-batch, standard cross-entropy" if isinstance(job, FinetuneJob) else ", HF generate")
    if isinstance(job, InferenceJob) and job.co_served:
        scope += ", the main model alone (co-served models are not traced)"
    return {"trace": traced, "trace_analytic": estimate_memory(traced_job, model, gpu), "trace_scope": scope}


def _as_traced(job: FinetuneJob | InferenceJob) -> FinetuneJob | InferenceJob:
    if isinstance(job, FinetuneJob):
        # One process on one device, in eager mode: no sharding or parameter offload, no compile.
        return job.model_copy(update={"gpus": 1, "sharding": "none", "tensor_parallel": 1, "grad_accum": 1,
                                      "chunked_cross_entropy": False, "optimizer_offload": False,
                                      "offload_params": False, "compile": False})
    # HF generate: prefill the prompt, then one decode step; of the main model alone when co-served.
    return job.model_copy(update={"tensor_parallel": 1, "engine": "hf", "output_tokens": 1, "co_served": ()})


def _run_trace(job: FinetuneJob | InferenceJob, model: ModelShape, config: dict[str, Any]) -> TraceResult:
    from gpuscout.trace.llm import trace_finetune_step, trace_inference_step
    from gpuscout.workload.lora import lora_target_names

    if isinstance(job, FinetuneJob):
        return trace_finetune_step(
            config, micro_batch=job.micro_batch, seq_len=job.seq_len, precision=job.precision,
            optimizer=job.optimizer, method=job.method, lora_rank=job.lora.rank, lora_alpha=job.lora.alpha,
            lora_target_modules=lora_target_names(model, job.lora) if job.method != "full" else (),
            gradient_checkpointing=job.gradient_checkpointing,
            attention="eager" if job.attention == "eager" else "sdpa", checkpoint_policy=job.checkpoint_policy,
            activation_offload=job.activation_offload, optimizer_in_bwd=job.optimizer_in_backward)
    weight = job.weights if job.weights in ("fp32", "bf16", "fp16") else "bf16"
    return trace_inference_step(config, batch=job.concurrency, prompt_tokens=job.prompt_tokens, weight_dtype=weight)


# ---------------------------------------------------------------- pick and cost --------------

@dataclass(frozen=True)
class PickReport:
    job: Job
    pick: PickResult
    offers_notes: tuple[str, ...] = ()
    calibration: Calibration | None = None  # the measured calibration the runtimes used
    calibration_path: Path | None = None


def pick(job: JobRef = None, *, offers: str | Path | None = None, cloud: str | None = None,
         deadline: str | float | None = None, budget_usd: float | None = None,
         fx: Sequence[str | ExchangeRate] = (), options: CostOptions | None = None,
         today: date | None = None, as_written: bool = False, currency: str | None = None,
         budget: float | None = None, dataset_gb: float | None = None, dataset_region: str | None = None,
         dataset_url: str | None = None, dataset_egress_per_gb: float | None = None,
         dataset_gbps: float | None = None, calibration: Calibration | str | Path | None = None,
         use_calibration: bool = True, load_results: Sequence[str | Path | BenchResult] = (),
         target_rps: float | None = None, doctor_results: Sequence[str | Path | BenchResult] = ()) -> PickReport:
    """Rank the offers of a price sheet (the bundled example sheet by default) by total job cost.

    Where the job as written does not fit an offer, it is ranked under a plan of changes that keep
    the task (micro-batch, checkpointing, 8-bit optimizer …); `as_written=True` turns plans off.
    Every offer's host is checked too (RAM, vCPUs, disk); a dataset of `dataset_gb` GB living in
    `dataset_region` ('aws:us-east-1') or at `dataset_url` adds its transfer time and the source's
    egress to each bill (docs/cost.md §2.14). Runtimes use `calibration` as `estimate` does. For a
    serving job, `load_results` (`gpuscout load` of one replica on a named GPU) replace the estimate on
    their GPU with the measured capacity at the SLO, with replicas for `target_rps` (docs/cost.md §5.4).
    `doctor_results` replace the launch of the offers they were held against with the start-up they
    measured (docs/doctor.md §4.5)."""
    from gpuscout.cost.billing import CostOptions
    from gpuscout.cost.pick import pick as rank_offers
    from gpuscout.cost.transfer import data_source
    from gpuscout.estimator.efficiency import calibrated
    from gpuscout.hardware.currency import display_currency
    from gpuscout.hardware.price_sheet import default_price_sheet, load_offers
    from gpuscout.units import parse_duration_s

    the_job, model, _ = _job_and_model(job)
    sheet, notes = load_offers(Path(offers) if offers is not None else default_price_sheet(), cloud=cloud)
    if doctor_results:
        sheet, notes = _measured_launches(sheet, notes, doctor_results)
    day = today or date.today()
    rates = _rates(sheet.exchange_rates, fx, day)
    shown = display_currency(currency, rates)
    budget_usd = _budget_usd(budget, budget_usd, shown)
    deadline_s = parse_duration_s(deadline) if isinstance(deadline, str) else deadline
    data = data_source(dataset_gb=dataset_gb, region=dataset_region, url=dataset_url,
                       egress_usd_per_gb=dataset_egress_per_gb, gbps=dataset_gbps)
    if data is not None:
        options = (options or CostOptions()).model_copy(update={"data": data})
    used, used_path = _calibration(calibration, use_calibration)
    capacities = _capacities(the_job, load_results, target_rps)
    with calibrated(used):
        result = rank_offers(the_job, model, sheet.offers, rates=rates, deadline_s=deadline_s,
                             budget_usd=budget_usd, today=day, options=options, as_written=as_written, currency=shown,
                             capacities=capacities, target_rps=target_rps)
    return PickReport(job=the_job, pick=result, offers_notes=tuple(notes), calibration=used,
                      calibration_path=used_path)


def _measured_launches(sheet: PriceSheet, notes: list[str], results: Sequence[str | Path | BenchResult],
                       ) -> tuple[PriceSheet, list[str]]:
    from gpuscout.cost.measured_startup import apply_measured_startup

    offers, added = apply_measured_startup(sheet.offers, _results(results))
    return sheet.model_copy(update={"offers": offers}), [*notes, *added]


def _results(results: Sequence[str | Path | BenchResult]) -> list[BenchResult]:
    """Each given result as it is, or read from its file."""
    from gpuscout.results.schema import BenchResult
    from gpuscout.results.store import load_result

    return [r if isinstance(r, BenchResult) else load_result(Path(r)) for r in results]


def _capacities(job: Job, results: Sequence[str | Path | BenchResult], target_rps: float | None) -> list[Any]:
    """The measured serving capacity of each load result (`cost.capacity`); only a serving job takes them."""
    if not results and target_rps is None:
        return []
    import math

    from gpuscout.cost.capacity import capacity_from_result
    from gpuscout.errors import SpecError

    if not isinstance(job, InferenceJob):
        raise SpecError("--load and --target-rps are for serving jobs.", f"The job is a {job.kind} job.",
                        "Drop them, or pick for an inference job.")
    if target_rps is not None and not (math.isfinite(target_rps) and target_rps > 0):
        raise SpecError(f"--target-rps {target_rps} is not a positive rate.", "Replicas are provisioned for it.",
                        "Pass the requests per second to serve, e.g. --target-rps 20.")
    if not results:
        raise SpecError("--target-rps needs --load.", "Replicas are counted from a measured capacity.",
                        "Pass the `gpuscout load` result of one replica with --load RESULT.json.")
    return [capacity_from_result(r, job) for r in _results(results)]


def _budget_usd(budget: float | None, budget_usd: float | None, shown: DisplayCurrency) -> float | None:
    """The budget in USD: `budget` is in the display currency (--budget 300 --currency CNY is 300 CNY)."""
    import math

    from gpuscout.errors import SpecError

    if budget is not None and budget_usd is not None:
        raise SpecError("Both budget and budget_usd were given.", "A job has one budget.",
                        "Pass budget (in `currency`) or budget_usd, not both.")
    amount = budget if budget is not None else budget_usd
    if amount is None:
        return None
    if not (math.isfinite(amount) and amount > 0):
        raise SpecError(f"--budget {amount} is not a positive amount.",
                        f"A budget is an amount in {shown.code} (--currency, USD by default) above zero.",
                        "Pass the most you are willing to spend, e.g. --budget 50.")
    return amount * shown.usd_per_unit if budget is not None else amount


def _rates(sheet: Sequence[ExchangeRate], fx: Sequence[str | ExchangeRate], today: date) -> tuple[ExchangeRate, ...]:
    from gpuscout.hardware.currency import merge_rates, parse_fx

    return merge_rates(sheet, [parse_fx(r, today) if isinstance(r, str) else r for r in fx])


@dataclass(frozen=True)
class CostReport:
    """A plain calculation (with the bill under simple rules), or one offer's bill.

    The plain figures are in USD and shown in `currency`; an offer's bill is already in `currency`
    when one was asked for (else in the offer's own).
    """

    hours: float
    plain: PlainCost | None = None
    billed: BilledCost | None = None
    offer: Offer | None = None
    bill: JobCost | None = None
    currency: DisplayCurrency | None = None  # None: USD for the plain figures, the offer's own for a bill
    rates: tuple[ExchangeRate, ...] = ()  # the rates used to convert


def cost(*, hours: float | None, usd_per_gpu_hour: float | None = None, gpus: int = 1, storage_usd: float = 0.0,
         transfer_usd: float = 0.0, retry_usd: float = 0.0, increment_s: float = 0.0, min_billed_s: float = 0.0,
         startup_s: float = 0.0, idle_tail_s: float = 0.0, offers: str | Path | None = None,
         offer: str | None = None, currency: str | None = None, fx: Sequence[str | ExchangeRate] = (),
         options: CostOptions | None = None, today: date | None = None) -> CostReport:
    """price × GPUs × hours + extras (and the real bill under the rules given), or an offer's bill.

    With an offer, the USD extras are added to its bill as their own lines and `options` (days kept
    stopped after the job, egress, failed attempts) apply; `currency` shows every amount in that
    currency, converted with the sheet's rates and `fx`.
    """
    from gpuscout.cost.calculator import billed_cost, checked_hours, plain_cost

    run_hours = checked_hours(hours)
    day = today or date.today()
    extras = {"storage_usd": storage_usd, "transfer_usd": transfer_usd, "retry_usd": retry_usd}
    if offers is not None or offer is not None:
        _no_manual_rules(usd_per_gpu_hour, gpus, increment_s, min_billed_s, startup_s, idle_tail_s)
        return _offer_cost(run_hours, offers, offer, extras, currency, fx, options, day)
    if options is not None and options.keep_stopped_days:
        from gpuscout.errors import SpecError

        raise SpecError("--keep-stopped-days needs an offer.", "A stopped machine bills at its provider's stopped "
                        "rates (disks, stopped compute), which only an offer in a price sheet states.",
                        "Pass --offers PRICES.toml --offer ID with it.")
    rates = _rates((), fx, day)
    shown = _shown(currency, rates)
    plain = plain_cost(usd_per_gpu_hour, gpus, run_hours, **extras)
    rules = {"increment_s": increment_s, "min_billed_s": min_billed_s, "startup_s": startup_s,
             "idle_tail_s": idle_tail_s}
    if not any(rules.values()):
        return CostReport(hours=run_hours, plain=plain, currency=shown, rates=_used(rates, shown))
    # A bill needs an increment: with other rules but none, it is billed by the second.
    billed = billed_cost(plain, **rules | {"increment_s": increment_s or 1.0})
    return CostReport(hours=run_hours, plain=plain, billed=billed, currency=shown, rates=_used(rates, shown))


def _offer_cost(hours: float, offers: str | Path | None, offer_id: str | None, extras: dict[str, float],
                currency: str | None, fx: Sequence[str | ExchangeRate], options: CostOptions | None,
                day: date) -> CostReport:
    """One offer's bill for `hours` of work, the given extras added, in `currency` when asked."""
    from gpuscout.cost.billing import bill_in, price_job
    from gpuscout.cost.calculator import with_given_extras

    sheet, the_offer = _offer(offers, offer_id)
    rates = _rates(sheet.exchange_rates, fx, day)
    shown = _shown(currency, rates)
    bill = with_given_extras(price_job(the_offer, hours * 3600, options), rates, **extras)
    if shown is not None:
        bill = bill_in(bill, shown, rates)
    converted = {the_offer.currency, shown.code} if shown is not None and shown.code != the_offer.currency else set()
    if any(extras.values()):
        converted.add(the_offer.currency)  # the USD extras were converted into the offer's currency
    used = tuple(r for r in rates if r.currency in converted)
    return CostReport(hours=hours, offer=the_offer, bill=bill, currency=shown, rates=used)


def _shown(currency: str | None, rates: Sequence[ExchangeRate]) -> DisplayCurrency | None:
    from gpuscout.hardware.currency import display_currency

    return display_currency(currency, rates) if currency is not None else None


def _used(rates: Sequence[ExchangeRate], shown: DisplayCurrency | None) -> tuple[ExchangeRate, ...]:
    return tuple(r for r in rates if shown is not None and r.currency == shown.code)


def _no_manual_rules(usd_per_gpu_hour: float | None, gpus: int, increment_s: float, min_billed_s: float,
                     startup_s: float, idle_tail_s: float) -> None:
    """An offer brings its own price and billing terms: a flag that would be ignored is refused instead."""
    from gpuscout.errors import SpecError

    given = [flag for flag, value, default in (
        ("--usd-per-gpu-hour", usd_per_gpu_hour, None), ("--gpus", gpus, 1), ("--increment-s", increment_s, 0.0),
        ("--min-billed-s", min_billed_s, 0.0), ("--startup-s", startup_s, 0.0), ("--idle-tail-s", idle_tail_s, 0.0))
        if value != default]
    if given:
        raise SpecError(f"{', '.join(given)} cannot be used with --offer.",
                        "The offer's price, GPU count and billing terms come from the price sheet; gpuscout will "
                        "not silently ignore a value you typed.",
                        "Drop those flags, or edit the offer in the price sheet (docs/cost.md §8).")


def _offer(offers: str | Path | None, offer_id: str | None) -> tuple[PriceSheet, Offer]:
    from gpuscout.errors import SpecError
    from gpuscout.hardware.price_sheet import find_offer, load_price_sheet

    if offers is None or offer_id is None:
        raise SpecError("--offers and --offer go together.", "An offer is picked by its id from a price sheet.",
                        "Pass both, e.g. --offers prices.toml --offer <id> (`gpuscout examples` shows a sheet).")
    sheet = load_price_sheet(Path(offers))
    return sheet, find_offer(sheet, offer_id)


# ---------------------------------------------------------------- bench and compare ----------

@dataclass(frozen=True)
class BenchReport:
    result: BenchResult
    estimate: EstimateBeside | None = None  # gpuscout's estimate for this GPU beside the measurement
    output: Path | None = None
    stopped_by: int | None = None  # the signal that stopped the run early (SIGINT for Ctrl-C), if any

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


def bench(job: JobRef, *, settings: BenchSettings | None = None, probe: bool = False,
          output: str | Path | None = None, progress: bool = False, doctor: str | Path | None = None) -> BenchReport:
    """Measure the job's real task (and/or the machine probes) on this machine, each case in its own process.

    With `output` the result is written atomically after every case and at the end, so Ctrl-C,
    SIGTERM or SIGHUP keep what finished (`complete` is false) and even SIGKILL loses at most the
    case in flight. `doctor` attaches the doctor result of this machine (refused when another
    machine wrote it; docs/doctor.md §5).
    """
    from gpuscout.interrupts import stop_on_signals
    from gpuscout.measure.bench import run_bench
    from gpuscout.measure.harness import BenchSettings
    from gpuscout.results.beside import estimate_beside
    from gpuscout.results.store import save_result

    path = _checked_output(output, "bench result")
    the_job = model = base_dir = None
    if job is not None or not probe:
        the_job, model, base_dir = _job_and_model(job)
    if isinstance(the_job, InferenceJob) and the_job.co_served:
        from gpuscout.errors import SpecError

        raise SpecError(f"{the_job.name} serves {len(the_job.co_served) + 1} models; bench runs one.",
                        "The bench's generation loop loads one model; co-served engines are separate processes "
                        "time-slicing the GPU (docs/estimator.md §3.10).",
                        "Bench each model with a spec of its own, or start the engines and `gpuscout load` each "
                        "endpoint at the same time.")

    attached = doctor_of_this_machine(doctor) if doctor is not None else None

    def keep(partial: BenchResult) -> None:
        if path is not None:
            save_result(partial.model_copy(update={"doctor": attached}), path)

    with stop_on_signals() as stops:  # the final write too: a second Ctrl-C never costs it
        result = run_bench(the_job, base_dir=base_dir, settings=settings or BenchSettings(), probe=probe,
                           progress=progress, checkpoint=keep)
        result = result.model_copy(update={"doctor": attached})
        keep(result)
    interrupted = any(f.kind == "interrupted" for c in result.cases
                      for f in (*([c.failure] if c.failure else []), *c.failed_runs))
    return BenchReport(result=result, estimate=estimate_beside(result, the_job, model), output=path,
                       stopped_by=(stops.signum or signal.SIGINT) if interrupted else None)


def _checked_output(output: str | Path | None, what: str) -> Path | None:
    """The output path, refused before any work starts when it cannot be written (docs/design.md §4.10)."""
    if output is None:
        return None
    from gpuscout.outfile import check_output_path

    return check_output_path(Path(output), what)


@dataclass(frozen=True)
class CompareReport:
    comparison: Comparison
    verdict: Verdict
    costs: tuple[MeasuredCost, ...] = ()
    warnings: tuple[str, ...] = ()
    rates: tuple[ExchangeRate, ...] = ()
    currency: DisplayCurrency | None = None  # the costs are in USD, shown in this currency (None: USD)


def compare(results: Sequence[str | Path | BenchResult], *, offers: str | Path | None = None,
            offer_ids: Sequence[str] = (), allow_diff: bool = False, fx: Sequence[str | ExchangeRate] = (),
            today: date | None = None, options: CompareOptions | None = None, currency: str | None = None,
            cost_options: CostOptions | None = None, store: str | Path | None = None) -> CompareReport:
    """Fairness check, ratios with 95% CIs, the whole job's cost on each machine, and a verdict.

    A result is a `BenchResult`, a result file, or the id of a stored run ("12", from `store`). Costs
    are computed in USD and shown in `currency` (a rate from the sheet or `fx`)."""
    from gpuscout.cost.measured import cost_point, price_results
    from gpuscout.hardware.currency import display_currency
    from gpuscout.hardware.offers import price_warnings
    from gpuscout.hardware.price_sheet import load_price_sheet
    from gpuscout.results.compare import compare_results
    from gpuscout.results.verdict import decide

    if offer_ids and offers is None:
        from gpuscout.errors import SpecError

        raise SpecError("--offer was given without --offers.", "Offer ids refer to a price sheet.",
                        "Add --offers prices.toml (`gpuscout examples` shows the bundled sheet).")
    loaded = [r if not isinstance(r, str | Path) else _stored_or_file(r, store) for r in results]
    comparison = compare_results(loaded, allow_diff=allow_diff, options=options)
    if offers is None:
        if currency is not None or (cost_options is not None and cost_options.keep_stopped_days):
            from gpuscout.errors import SpecError

            raise SpecError("--currency and --keep-stopped-days price the job, and no price sheet was given.",
                            "compare shows costs only with --offers.", "Add --offers prices.toml.")
        return CompareReport(comparison=comparison, verdict=decide(comparison, None))
    day = today or date.today()
    sheet = load_price_sheet(Path(offers))
    rates = _rates(sheet.exchange_rates, fx, day)
    shown = display_currency(currency, rates)
    costs = price_results(loaded, sheet, offer_ids, rates=rates, today=day, options=cost_options)
    used = {c.currency for c in costs} | {shown.code}
    warnings = price_warnings([sheet.offers[[o.id for o in sheet.offers].index(c.offer_id)] for c in costs], day)
    return CompareReport(comparison=comparison, verdict=decide(comparison, [cost_point(c, shown) for c in costs]),
                         costs=tuple(costs), warnings=warnings, rates=tuple(r for r in rates if r.currency in used),
                         currency=shown)


def _stored_or_file(ref: str | Path, store: str | Path | None) -> BenchResult:
    """A result file, or the stored run an id names (an existing file of that name wins)."""
    from gpuscout.results.database import fetch_result, run_id_of
    from gpuscout.results.store import load_result

    run_id = run_id_of(ref)
    return fetch_result(store_path(store), run_id) if run_id is not None else load_result(Path(ref))


# ---------------------------------------------------------------- calibrate ------------------

@dataclass(frozen=True)
class CalibrateReport:
    calibration: Calibration  # the merged file's content: every entry, every observation kept
    added: tuple[Observation, ...]  # the observations these results gave
    skipped: tuple[str, ...] = ()  # results and cases that could not be used, and why
    output: Path | None = None


def calibrate(results: Sequence[str | Path], *, output: str | Path | None = None,
              write: bool = True) -> CalibrateReport:
    """Fit efficiency factors per GPU and phase to bench results and merge them into the calibration
    file (`output`, else the user's config folder), refitting over the old and new observations."""
    from gpuscout.errors import SpecError
    from gpuscout.estimator.calibration import (
        default_calibration_path,
        load_calibration,
        merge_calibration,
        save_calibration,
    )
    from gpuscout.results.calibration_inputs import read_observations

    if not results:
        raise SpecError("calibrate needs at least one result file.",
                        "It fits the speed model to times measured on your GPU, which bench results hold.",
                        "Pass bench results, e.g. gpuscout calibrate run1.json run2.json "
                        "(write them with gpuscout bench JOB.toml -o run1.json on the GPU).")
    path = Path(output) if output is not None else default_calibration_path()
    if write:
        _checked_output(path, "calibration file")
    old = load_calibration(path) if path.is_file() else None
    added, skipped = read_observations([Path(r) for r in results])
    merged = merge_calibration(old, added)
    if write:
        save_calibration(merged, path)
    return CalibrateReport(calibration=merged, added=tuple(added), skipped=tuple(skipped),
                           output=path if write else None)


# ---------------------------------------------------------------- load and probe -------------

@dataclass(frozen=True)
class LoadReport:
    result: BenchResult
    search: SearchResult | None = None
    costs: tuple[LoadCost, ...] = ()  # one per case, when a price was given
    output: Path | None = None
    stopped_by: int | None = None  # the signal that stopped the run early (SIGINT for Ctrl-C), if any

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


def load(plan: LoadPlan, *, output: str | Path | None = None, offers: str | Path | None = None,
         offer: str | None = None, usd_per_hour: float | None = None,
         progress: ProgressFactory | None = None) -> LoadReport:
    """Load-test an OpenAI-compatible endpoint as the plan says; price it when a price is given.

    With `output` the result is written atomically after every level and at the end (the workload
    beside it, with the first write), so Ctrl-C, SIGTERM or SIGHUP keep what finished (`complete`
    is false; the level in flight keeps its finished requests) and even SIGKILL loses at most the
    level in flight. A run stopped before any request finished writes nothing.
    """
    from gpuscout.cost.load_cost import price_load_cases, price_load_cases_on_offer
    from gpuscout.hardware.price_sheet import find_offer, load_price_sheet
    from gpuscout.interrupts import stop_on_signals
    from gpuscout.loadgen.session import run_plan
    from gpuscout.results.store import save_result

    path = _checked_output(output, "load result")
    if path is not None:
        from gpuscout.loadgen.session import workload_path

        _checked_output(workload_path(path), "workload file")
    if offer is not None and offers is None:
        from gpuscout.errors import SpecError

        raise SpecError("--offer needs --offers.", "The offer id is looked up in a price sheet.",
                        "Pass --offers PRICES.toml --offer ID, or --usd-per-hour P.")
    sheet = load_price_sheet(Path(offers)) if offers is not None else None
    the_offer = find_offer(sheet, offer) if sheet is not None and offer is not None else None

    def keep(result: BenchResult) -> None:
        if path is not None and result.cases:
            save_result(result, path)

    if the_offer is not None and plan.server_gpu is None:  # the offer says which GPU served: pick reads it
        plan = plan.model_copy(update={"server_gpu": the_offer.gpu, "server_gpus": the_offer.gpu_count})
    with stop_on_signals() as stops:  # the final write too: a second Ctrl-C never costs it
        outcome = run_plan(plan, output=path, progress=progress, checkpoint=keep)
        keep(outcome.result)
    costs: tuple[LoadCost, ...] = ()
    if the_offer is not None and sheet is not None:
        costs = price_load_cases_on_offer(outcome.result.cases, the_offer, sheet.exchange_rates)
    elif usd_per_hour is not None:
        costs = price_load_cases(outcome.result.cases, usd_per_hour)
    return LoadReport(result=outcome.result, search=outcome.search, costs=costs,
                      output=path if outcome.result.cases else None,
                      stopped_by=(stops.signum or signal.SIGINT) if outcome.interrupted else None)


def probe(url: str, *, repeats: int = 10, download_url: str | None = None, upload_url: str | None = None,
          timeout_s: float = 10.0, upload_bytes: int | None = None) -> ProbeResult:
    """Network round trip, transfer speed and reconnect time to an endpoint."""
    import asyncio

    from gpuscout.loadgen.probe import DEFAULT_UPLOAD_BYTES
    from gpuscout.loadgen.probe import probe as run_probe

    return asyncio.run(run_probe(url, repeats=repeats, download_url=download_url, upload_url=upload_url,
                                 upload_bytes=upload_bytes or DEFAULT_UPLOAD_BYTES, timeout_s=timeout_s))


# ---------------------------------------------------------------- results store and report ---

def store_path(store: str | Path | None = None) -> Path:
    """The results store: `store`, else $GPUSCOUT_STORE, else $XDG_DATA_HOME (~/.local/share)/gpuscout/."""
    from gpuscout.results.database import default_store_path

    return Path(store).expanduser() if store is not None else default_store_path()


def record_run(kind: str, run: BenchResult | Mapping[str, Any], *, store: str | Path | None = None) -> StoredRun:
    """Record one run in the results store, in one transaction: the one entry point for every command
    that records (bench, load, pick, doctor). `run` is a result or the JSON its command prints with
    --json; the store keeps all of it with its kind, job, machine and time (docs/results.md §2)."""
    from gpuscout.results.database import record
    from gpuscout.results.schema import BenchResult

    payload = run.model_dump(mode="json") if isinstance(run, BenchResult) else dict(run)
    return record(store_path(store), kind, payload)


@dataclass(frozen=True)
class ResultsList:
    runs: tuple[StoredRun, ...]  # oldest first
    matched: int  # how many runs matched (more than `runs` when a limit cut the list)
    store: Path


def list_results(*, kind: str | None = None, job: str | None = None, since: str | datetime | None = None,
                 limit: int | None = None, store: str | Path | None = None) -> ResultsList:
    """The stored runs that match: of a kind (bench, load, pick, doctor, or a result kind), whose job or
    name contains `job`, made since a moment ('7d', '2026-11-24'); the newest `limit` of them."""
    from gpuscout.results.database import list_runs
    from gpuscout.results.query import check_kind, parse_since

    path = store_path(store)
    checked = check_kind(kind, path) if kind else None
    moment = parse_since(since) if isinstance(since, str) else since
    runs, matched = list_runs(path, kind=checked, job=job, since=moment, limit=limit)
    return ResultsList(runs=tuple(runs), matched=matched, store=path)


@dataclass(frozen=True)
class StoredRunReport:
    entry: StoredRun
    payload: dict[str, Any]  # the run's JSON, as its command printed it
    store: Path


def show_result(run_id: int, *, store: str | Path | None = None) -> StoredRunReport:
    """One stored run, its payload checked against the SHA-256 stored with it."""
    from gpuscout.results.database import fetch

    path = store_path(store)
    entry, payload = fetch(path, run_id)
    return StoredRunReport(entry=entry, payload=payload, store=path)


def export_result(run_id: int, output: str | Path, *, store: str | Path | None = None) -> Path:
    """Write a stored run to a file, atomically: a bench, load or doctor run as the result file `-o`
    writes (so compare, calibrate and report read it), a pick as the JSON it printed."""
    from gpuscout.outfile import write_atomic
    from gpuscout.results.query import export_text

    path = _checked_output(output, "exported result")
    assert path is not None
    shown = show_result(run_id, store=store)
    write_atomic(path, export_text(shown.entry, shown.payload), what="exported result")
    return path


@dataclass(frozen=True)
class ReportInputs:
    documents: tuple[Document, ...]  # one per source, in order
    store: Path


def report_inputs(sources: Sequence[str | Path], *, store: str | Path | None = None) -> ReportInputs:
    """The documents `gpuscout report` draws: files gpuscout wrote, or ids of stored runs."""
    from gpuscout.documents.read import read_documents
    from gpuscout.errors import SpecError

    if not sources:
        raise SpecError("report needs at least one file or stored run.",
                        "It draws what gpuscout's commands wrote.",
                        "Pass files (gpuscout estimate --json > e.json; bench -o a.json) or ids from "
                        "`gpuscout results list`.")
    path = store_path(store)
    return ReportInputs(documents=tuple(read_documents(sources, path)), store=path)


# ---------------------------------------------------------------- doctor ---------------------

@dataclass(frozen=True)
class DoctorReport:
    result: BenchResult  # kind "doctor": one case per check; `result.doctor` holds the verdict
    output: Path | None = None
    stopped_by: int | None = None  # the signal that stopped the run early (SIGINT for Ctrl-C), if any

    @property
    def exit_code(self) -> int:
        """0 keep, 3 return, 4 inconclusive; 128 + the signal when stopped (docs/doctor.md §4.6)."""
        from gpuscout.doctor.verdict import EXIT_CODES

        if self.stopped_by is not None:
            return 128 + self.stopped_by
        return EXIT_CODES[self.result.doctor.outcome] if self.result.doctor else EXIT_CODES["inconclusive"]


def doctor(*, offers: str | Path | None = None, offer: str | None = None, gpu: str | None = None,
           job: JobRef = None, quick: bool = False, nproc: int | None = None, device: str = "auto",
           created_at: float | None = None, url: str | None = None, output: str | Path | None = None,
           folder: str | Path | None = None, seed: int = 0, progress: bool = False) -> DoctorReport:
    """Is this rented machine what was paid for? Identity, health, performance against the expected bands,
    the host, the network to `url`, the start-up since `created_at` (epoch seconds); keep, return or
    inconclusive (docs/doctor.md). The box is held against `offer` in `offers`, or the GPU `gpu`.

    With `output` the result is written after every step, so Ctrl-C, SIGTERM or SIGHUP keep what finished.
    """
    from gpuscout.doctor.run import DoctorOptions, run_doctor
    from gpuscout.interrupts import stop_on_signals
    from gpuscout.results.store import save_result

    path = _checked_output(output, "doctor result")
    expected = _doctor_expected(offers, offer, gpu)
    model_bytes = _job_model_bytes(job) if job is not None else None
    network, shown_url = _doctor_network(url)
    options = DoctorOptions(device=device, nproc=nproc, quick=quick, created_at=created_at, model_bytes=model_bytes,
                            folder=str(folder) if folder is not None else None, seed=seed, url=shown_url)

    def keep(partial: BenchResult) -> None:
        if path is not None:
            save_result(partial, path)

    with stop_on_signals() as stops:  # the final write too: a second Ctrl-C never costs it
        result = run_doctor(options, expected, network=network, progress=progress, checkpoint=keep)
        keep(result)
    interrupted = any(c.failure is not None and c.failure.kind == "interrupted" for c in result.cases)
    return DoctorReport(result=result, output=path, stopped_by=(stops.signum or signal.SIGINT) if interrupted else None)


def _doctor_expected(offers: str | Path | None, offer: str | None, gpu: str | None) -> Any:
    from gpuscout.doctor.identity import Expected, expected_from_gpu, expected_from_offer
    from gpuscout.errors import SpecError

    if gpu is not None and offer is not None:
        raise SpecError("--gpu and --offer were both given.", "The box is held against one of them.",
                        "Pass --offers F --offer ID (the offer you rented), or --gpu NAME.")
    if offer is not None or offers is not None:
        sheet, the_offer = _offer(offers, offer)
        return expected_from_offer(the_offer, Path(sheet.path).name)
    return expected_from_gpu(gpu) if gpu is not None else Expected()


def _job_model_bytes(job: JobRef) -> int | None:
    from gpuscout.measure.bench import model_bytes

    the_job, base_dir = _job(job)
    return model_bytes(the_job, base_dir)


def _doctor_network(url: str | None) -> tuple[Any, str | None]:
    """The network check for `url` (checked now, so a malformed URL fails before anything runs)."""
    if url is None:
        return None, None
    from gpuscout.loadgen.probe import parse_target
    from gpuscout.loadgen.probe_case import network_case

    target = parse_target(url)
    return (lambda: network_case(url)), target.url


def doctor_of_this_machine(path: str | Path) -> Any:
    """The verdict of a doctor result written on this machine, to attach to a bench result; another
    machine's, or a result of another kind, is refused (docs/doctor.md §5)."""
    from gpuscout.doctor.inventory import current_identity, different_machine
    from gpuscout.errors import SpecError
    from gpuscout.results.store import load_result

    result = load_result(Path(path))
    if result.kind != "doctor" or result.doctor is None:
        raise SpecError(f"{path} is a {result.kind} result, not a doctor result.",
                        "bench --doctor attaches the verdict `gpuscout doctor -o FILE` wrote on this machine.",
                        "Run `gpuscout doctor -o doctor.json` here first and pass that file.")
    why = different_machine(result.doctor.machine, current_identity())
    if why:
        raise SpecError(f"{path} was written on another machine: {why}.",
                        "A bench result carries the health of the machine it measured; another machine's doctor "
                        "result would vouch for hardware the numbers did not come from.",
                        "Run `gpuscout doctor -o doctor.json` on this machine and pass that file.")
    return result.doctor.model_copy(update={"checked_at": result.created_at, "file": str(path)})


# ---------------------------------------------------------------- models ---------------------

@dataclass(frozen=True)
class ModelReport:
    shape: ModelShape | ImageModelShape | VideoModelShape
    weight_bytes_by_format: dict[str, int] = field(default_factory=dict)  # language models, per format
    kv_bytes_per_token_by_dtype: dict[str, int] = field(default_factory=dict)


def describe_model(ref: str) -> ModelReport:
    """A model's shape (config.json, model directory or preset), weight bytes and KV cache per token."""
    from gpuscout.estimator.weights import kv_bytes_per_token_by_dtype, weight_bytes_by_format
    from gpuscout.workload.image import ImageModelShape
    from gpuscout.workload.resolve import resolve_any
    from gpuscout.workload.video import VideoModelShape

    shape = resolve_any(ref)
    if isinstance(shape, ImageModelShape | VideoModelShape):
        return ModelReport(shape=shape)
    return ModelReport(shape=shape, weight_bytes_by_format=weight_bytes_by_format(shape),
                       kv_bytes_per_token_by_dtype=kv_bytes_per_token_by_dtype(shape))
