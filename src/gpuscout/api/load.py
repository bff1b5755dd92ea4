"""`load` and `probe`: load-test an OpenAI-compatible endpoint (priced when a price is given), probe the network."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError, checked_output
from gpuscout.api.stopping import run_stoppable

if TYPE_CHECKING:
    from gpuscout.api.jobs import JobRef
    from gpuscout.cost.load_cost import LoadCost
    from gpuscout.estimator.calibration import Calibration
    from gpuscout.loadgen.plan import LoadPlan
    from gpuscout.loadgen.probe import ProbeResult
    from gpuscout.loadgen.search import SearchResult
    from gpuscout.loadgen.session import LoadOutcome, ProgressFactory, ReplaySpan
    from gpuscout.loadgen.workload import Workload
    from gpuscout.results.load_prediction import Prompts, Served
    from gpuscout.results.schema import BenchResult, LoadPrediction


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
         progress: ProgressFactory | None = None, on_replay: Callable[[ReplaySpan], None] | None = None,
         job: JobRef = None, calibration: str | Path | None = None, use_calibration: bool = True) -> LoadReport:
    """Load-test an OpenAI-compatible endpoint as the plan says; price it when a price is given.

    After the run the serving simulator predicts every level (`result.prediction`) from the server's GPU
    (the plan's `server_gpu`, or the offer's) and the served `job` (an inference job spec: model, weights,
    engine settings), with the calibration estimate and pick use (`calibration`, else the default file;
    none with `use_calibration=False`); where it cannot, the prediction says why in one line.

    With `output` the result is written atomically after every level and at the end (the workload
    beside it, with the first write), so Ctrl-C, SIGTERM or SIGHUP keep what finished (`complete`
    is false; the level in flight keeps its finished requests) and even SIGKILL loses at most the
    level in flight. A run stopped before any request finished writes nothing. `on_replay` is told, before
    the first request, how long a trace replay will take when one replay is longer than 10 s (`schedule.LONG_WAIT_S`).
    """
    from gpuscout.cost.load_cost import price_load_cases, price_load_cases_on_offer
    from gpuscout.documents.beside import load_beside
    from gpuscout.hardware.price_sheet import find_offer, load_price_sheet
    from gpuscout.loadgen.session import run_plan
    from gpuscout.results.store import save_result

    path = checked_output(output, "load result")
    if path is not None:
        from gpuscout.loadgen.session import workload_path

        checked_output(workload_path(path), "workload file")
    if offer is not None and offers is None:
        raise InputError("{offer} needs {offers}.", "The offer id is looked up in a price sheet.",
                         "Pass {offers} PRICES.toml {offer} ID, or {usd_per_hour} P.")
    served_job = _served_job(job)  # a bad spec is refused before any request is sent
    active = _calibration(calibration, use_calibration)
    sheet = load_price_sheet(Path(offers)) if offers is not None else None
    the_offer = find_offer(sheet, offer) if sheet is not None and offer is not None else None

    def keep(result: BenchResult) -> None:
        if path is not None and result.cases:
            save_result(result, path)

    if the_offer is not None and plan.server_gpu is None:  # the offer says which GPU served: pick reads it
        plan = plan.model_copy(update={"server_gpu": the_offer.gpu, "server_gpus": the_offer.gpu_count})
    def measured() -> LoadOutcome:
        done = run_plan(plan, output=path, progress=progress, checkpoint=keep, on_replay=on_replay)
        keep(done.result)
        return done

    outcome, stopped_by = run_stoppable(measured, lambda done: done.interrupted)
    if outcome.result.cases:  # the prediction is stored with the result, beside what was measured
        prediction = _prediction(plan, outcome, served_job, active, interrupted=stopped_by is not None)
        outcome = replace(outcome, result=outcome.result.model_copy(update={"prediction": prediction}))
        keep(outcome.result)
    costs: tuple[LoadCost, ...] = ()
    if the_offer is not None and sheet is not None:
        costs = price_load_cases_on_offer(outcome.result.cases, the_offer, sheet.exchange_rates)
    elif usd_per_hour is not None:
        costs = price_load_cases(outcome.result.cases, usd_per_hour)
    if path is not None and outcome.result.cases:  # the file carries what the store keeps beside the result
        save_result(outcome.result, path, load_beside(outcome.result.cases, costs, outcome.search, plan.slo))
    return LoadReport(result=outcome.result, search=outcome.search, costs=costs,
                      output=path if outcome.result.cases else None, stopped_by=stopped_by)


def _served_job(ref: JobRef) -> Served | None:
    """The served job (None: not given), checked: an inference job whose model resolves."""
    if ref is None:
        return None
    from gpuscout.api.jobs import job_and_dir
    from gpuscout.results.load_prediction import Served
    from gpuscout.workload.job import InferenceJob
    from gpuscout.workload.jobs import resolve_job_model

    job, base_dir = job_and_dir(ref)
    if not isinstance(job, InferenceJob):
        raise InputError(f"{{job}} is a {job.kind} job; the serving simulator predicts an inference job.",
                         "It simulates the served model with the engine settings an inference job spec holds.",
                         "Pass an inference job spec (kind = \"inference\"), e.g. gpuscout examples lists some.",
                         job="job")
    resolve_job_model(job, base_dir)  # its model must resolve now, not after the whole run
    return Served(gpu_name=None, gpus=job.tensor_parallel, job=job, job_data=job.model_dump(mode="json"),
                  base_dir=base_dir)


def _calibration(path: str | Path | None, use: bool) -> Calibration | None:
    from gpuscout.estimator.calibration import active_calibration

    return active_calibration(Path(path) if path is not None else None, use=use).calibration


def _prediction(plan: LoadPlan, outcome: LoadOutcome, served_job: Served | None,
                calibration: Calibration | None, *, interrupted: bool) -> LoadPrediction:
    """The simulator's prediction of the measured levels, or why there is none (an api step after the run)."""
    from gpuscout.estimator.efficiency import calibrated
    from gpuscout.results.load_prediction import Served, predict_load, unavailable

    if served_job is None:
        served = Served(gpu_name=plan.server_gpu, gpus=plan.server_gpus, job=None, job_data={})
    else:
        # An endpoint of one GPU by default: a job of tensor_parallel N then says how many it has.
        gpus = plan.server_gpus if plan.server_gpus != 1 else served_job.gpus
        served = replace(served_job, gpu_name=plan.server_gpu, gpus=gpus)
    if interrupted:
        return unavailable(served, "no prediction: the run was interrupted")
    with calibrated(calibration):
        return predict_load(outcome.result, served, _prompts(outcome.workload), slo=plan.slo, search=plan.search)


def _prompts(workload: Workload | None) -> Prompts:
    from gpuscout.results.load_prediction import Prompts

    if workload is None or not workload.prompts:
        return Prompts(prompt_tokens=None)
    mean = sum(p.prompt_tokens for p in workload.prompts) / len(workload.prompts)
    rows = tuple((p.arrival_s, p.prompt_tokens, p.output_tokens) for p in workload.prompts if p.arrival_s is not None)
    return Prompts(prompt_tokens=mean, trace=rows)


def probe(url: str, *, repeats: int = 10, download_url: str | None = None, upload_url: str | None = None,
          timeout_s: float = 10.0, upload_bytes: int | None = None) -> ProbeResult:
    """Network round trip, transfer speed and reconnect time to an endpoint."""
    import asyncio

    from gpuscout.loadgen.probe import DEFAULT_UPLOAD_BYTES
    from gpuscout.loadgen.probe import probe as run_probe

    return asyncio.run(run_probe(url, repeats=repeats, download_url=download_url, upload_url=upload_url,
                                 upload_bytes=upload_bytes or DEFAULT_UPLOAD_BYTES, timeout_s=timeout_s))


def where_rented(region: str | None, billing: str | None, offers: str | Path | None,
                 offer: str | None) -> tuple[str | None, str | None]:
    """Region and billing type as given, else from the offer the machine was rented under (a bench's or a
    load test's fixed variables, docs/measurement.md §1.1)."""
    from gpuscout.hardware.price_sheet import where_rented as from_offer

    return from_offer(region, billing, Path(offers) if offers is not None else None, offer)
