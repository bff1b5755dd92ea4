"""`bench`, `compare`, `calibrate`: measure the job's real task here, weigh results fairly, learn from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError, checked_output, rates_for
from gpuscout.api.jobs import JobRef, job_and_model
from gpuscout.api.stopping import run_stoppable
from gpuscout.workload.job import InferenceJob

if TYPE_CHECKING:
    from gpuscout.cost.billing import CostOptions
    from gpuscout.cost.measured import MeasuredCost
    from gpuscout.estimator.calibration import Calibration, Observation, ServingEntry
    from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate
    from gpuscout.measure.harness import BenchSettings
    from gpuscout.measure.progress import StepProgress
    from gpuscout.results.beside import EstimateBeside
    from gpuscout.results.compare import Comparison
    from gpuscout.results.ratios import CompareOptions
    from gpuscout.results.schema import BenchResult
    from gpuscout.results.verdict import Verdict


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
          output: str | Path | None = None, progress: StepProgress | None = None,
          doctor: str | Path | None = None) -> BenchReport:
    """Measure the job's real task (and/or the machine probes) on this machine, each case in its own process.

    With `output` the result is written atomically after every case and at the end, so Ctrl-C,
    SIGTERM or SIGHUP keep what finished (`complete` is false) and even SIGKILL loses at most the
    case in flight. `doctor` attaches the doctor result of this machine (refused when another
    machine wrote it; docs/doctor.md §5).
    """
    from gpuscout.api.doctor import doctor_of_this_machine
    from gpuscout.measure.bench import run_bench
    from gpuscout.measure.harness import BenchSettings
    from gpuscout.results.beside import estimate_beside
    from gpuscout.results.store import save_result

    path = checked_output(output, "bench result")
    the_job = model = base_dir = None
    if job is not None or not probe:
        the_job, model, base_dir = job_and_model(job)
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

    def measured() -> BenchResult:
        done = run_bench(the_job, base_dir=base_dir, settings=settings or BenchSettings(), probe=probe,
                         progress=progress, checkpoint=keep).model_copy(update={"doctor": attached})
        keep(done)
        return done

    result, stopped_by = run_stoppable(
        measured, lambda done: any(f.kind == "interrupted" for c in done.cases
                                   for f in (*([c.failure] if c.failure else []), *c.failed_runs)))
    estimate = estimate_beside(result, the_job, model)
    if path is not None and estimate is not None:  # the file carries the estimate the store keeps beside it
        save_result(result, path, {"estimate": estimate.model_dump(mode="json")})
    return BenchReport(result=result, estimate=estimate, output=path, stopped_by=stopped_by)


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
        raise InputError("{offer_ids} was given without {offers}.", "Offer ids refer to a price sheet.",
                         "Add {offers} prices.toml (`gpuscout examples` shows the bundled sheet).")
    loaded = [r if not isinstance(r, str | Path) else _stored_or_file(r, store) for r in results]
    comparison = compare_results(loaded, allow_diff=allow_diff, options=options)
    if offers is None:
        if currency is not None or (cost_options is not None and cost_options.keep_stopped_days):
            raise InputError("{currency} and {keep_stopped_days} price the job, and no price sheet was given.",
                             "compare shows costs only with {offers}.", "Add {offers} prices.toml.")
        return CompareReport(comparison=comparison, verdict=decide(comparison, None))
    day = today or date.today()
    sheet = load_price_sheet(Path(offers))
    rates = rates_for(sheet.exchange_rates, fx, day)
    shown = display_currency(currency, rates)
    costs = price_results(loaded, sheet, offer_ids, rates=rates, today=day, options=cost_options)
    used = {c.currency for c in costs} | {shown.code}
    warnings = price_warnings([sheet.offers[[o.id for o in sheet.offers].index(c.offer_id)] for c in costs], day)
    return CompareReport(comparison=comparison, verdict=decide(comparison, [cost_point(c, shown) for c in costs]),
                         costs=tuple(costs), warnings=warnings, rates=tuple(r for r in rates if r.currency in used),
                         currency=shown)


def _stored_or_file(ref: str | Path, store: str | Path | None) -> BenchResult:
    """A result file, or the stored run an id names (an existing file of that name wins)."""
    from gpuscout.api.results import store_path
    from gpuscout.results.database import fetch_result, run_id_of
    from gpuscout.results.store import load_result

    run_id = run_id_of(ref)
    return fetch_result(store_path(store), run_id) if run_id is not None else load_result(Path(ref))


@dataclass(frozen=True)
class CalibrateReport:
    calibration: Calibration  # the merged file's content: every entry, every observation kept
    added: tuple[Observation, ...]  # the observations these results gave
    skipped: tuple[str, ...] = ()  # results and cases that could not be used, and why
    output: Path | None = None
    serving: tuple[ServingEntry, ...] = ()  # the serving entries these load results gave


def calibrate(results: Sequence[str | Path], *, output: str | Path | None = None,
              write: bool = True) -> CalibrateReport:
    """Fit efficiency factors per GPU and phase to bench results, and the serving simulator's step costs per
    GPU to load results (run with the served job and the server's GPU), and merge them into the calibration
    file (`output`, else the user's config folder), refitting over the old and new observations."""
    from gpuscout.errors import SpecError
    from gpuscout.estimator.calibration import (
        default_calibration_path,
        load_calibration,
        merge_calibration,
        merge_serving,
        save_calibration,
    )
    from gpuscout.results.calibration_inputs import read_observations
    from gpuscout.results.serving_calibration import read_serving_entries

    if not results:
        raise SpecError("calibrate needs at least one result file.",
                        "It fits the speed model to times measured on your GPU, which bench results hold, and the "
                        "serving simulator to load results.",
                        "Pass bench results, e.g. gpuscout calibrate run1.json run2.json "
                        "(write them with gpuscout bench JOB.toml -o run1.json on the GPU), or load results "
                        "(gpuscout load URL --model M --job SPEC.toml --server-gpu GPU -o load.json).")
    path = Path(output) if output is not None else default_calibration_path()
    if write:
        checked_output(path, "calibration file")
    old = load_calibration(path) if path.is_file() else None
    serving, bench_paths, serving_skipped = read_serving_entries([Path(r) for r in results])
    added, skipped = read_observations(bench_paths, required=False)
    if not added and not serving:
        raise SpecError("None of the results holds a measured phase time or a load to calibrate from.",
                        "; ".join([*serving_skipped, *skipped]) or "No case of theirs finished.",
                        "Pass bench results (gpuscout bench JOB.toml -o FILE on the GPU) with finished cases, or "
                        "load results run with --job SPEC.toml --server-gpu GPU.")
    merged = merge_calibration(old, added).model_copy(update={"serving": merge_serving(old, serving)})
    if write:
        save_calibration(merged, path)
    return CalibrateReport(calibration=merged, added=tuple(added), skipped=tuple(serving_skipped) + tuple(skipped),
                           output=path if write else None, serving=tuple(serving))
