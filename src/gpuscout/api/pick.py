"""`pick`: the offers of a price sheet ranked by the total cost of the whole job."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError, calibration_of, rates_for, results_of
from gpuscout.api.jobs import Job, JobRef, job_and_model
from gpuscout.workload.job import InferenceJob

if TYPE_CHECKING:
    from gpuscout.cost.billing import CostOptions
    from gpuscout.cost.capacity import MeasuredCapacity
    from gpuscout.cost.pick import PickResult
    from gpuscout.cost.spot_prior import SpotKnowledge
    from gpuscout.estimator.calibration import Calibration
    from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate
    from gpuscout.hardware.price_sheet import PriceSheet
    from gpuscout.results.schema import BenchResult


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
         target_rps: float | None = None, doctor_results: Sequence[str | Path | BenchResult] = (),
         include_placeholders: bool = False, interruptions_per_hour: float | None = None,
         spot_advisor: str | Path | None = None,
         margin_pct: float | None = None) -> PickReport:
    """Rank the offers of a price sheet (the bundled example sheet by default) by total job cost.

    Where the job as written does not fit an offer, it is ranked under a plan of changes that keep
    the task (micro-batch, checkpointing, 8-bit optimizer …); `as_written=True` turns plans off.
    Every offer's host is checked too (RAM, vCPUs, disk); a dataset of `dataset_gb` GB living in
    `dataset_region` ('aws:us-east-1') or at `dataset_url` adds its transfer time and the source's
    egress to each bill (docs/cost.md §2.14). Runtimes use `calibration` as `estimate` does. For a
    serving job, `load_results` (`gpuscout load` of one replica on a named GPU) replace the estimate on
    their GPU with the measured capacity at the SLO, with replicas for `target_rps` (docs/cost.md §5.4);
    on the other offers one replica is simulated at the job's load (its `concurrency` users, or
    `target_rps` as a Poisson rate) for the SLO verdict, the users it holds and the replicas needed.
    `doctor_results` replace the launch of the offers they were held against with the start-up they
    measured (docs/doctor.md §4.5). Offers marked `placeholder` (a price nobody observed) are left
    unranked unless `include_placeholders`. A spot offer whose sheet states no interruption rate is
    priced under the band of its instance type and region in `spot_advisor` (a Spot Advisor–style
    file), else at `interruptions_per_hour`, else under the default prior band (docs/cost.md §2.11)."""
    from gpuscout.cost.billing import CostOptions
    from gpuscout.cost.pick import pick as rank_offers
    from gpuscout.cost.transfer import data_source
    from gpuscout.cost.trial_price import trial_advice
    from gpuscout.estimator.efficiency import calibrated
    from gpuscout.hardware.currency import display_currency
    from gpuscout.hardware.price_sheet import default_price_sheet, load_offers
    from gpuscout.units import parse_duration_s

    the_job, model, _ = job_and_model(job)
    sheet, notes = load_offers(Path(offers) if offers is not None else default_price_sheet(), cloud=cloud)
    if doctor_results:
        sheet, notes = _measured_launches(sheet, notes, doctor_results)
    day = today or date.today()
    rates = rates_for(sheet.exchange_rates, fx, day)
    shown = display_currency(currency, rates)
    budget_usd = _budget_usd(budget, budget_usd, shown)
    deadline_s = parse_duration_s(deadline) if isinstance(deadline, str) else deadline
    data = data_source(dataset_gb=dataset_gb, region=dataset_region, url=dataset_url,
                       egress_usd_per_gb=dataset_egress_per_gb, gbps=dataset_gbps)
    if data is not None:
        options = (options or CostOptions()).model_copy(update={"data": data})
    if margin_pct is not None:
        from gpuscout.estimator.margin import check_margin_pct

        check_margin_pct(margin_pct)
    used, used_path = calibration_of(calibration, use_calibration)
    capacities = _capacities(the_job, load_results, target_rps)
    spot = spot_knowledge(interruptions_per_hour, spot_advisor)
    with calibrated(used):
        result = rank_offers(the_job, model, sheet.offers, rates=rates, deadline_s=deadline_s,
                             budget_usd=budget_usd, today=day, options=options, as_written=as_written, currency=shown,
                             capacities=capacities, target_rps=target_rps,
                             include_placeholders=include_placeholders, spot=spot, margin_pct=margin_pct)
    result = result.model_copy(update={"trial": trial_advice(
        result.rows, sheet.offers, rates, job_arg=_job_arg(job),
        sheet=str(offers) if offers is not None else "prices.example")})  # bench and compare take the bundled one so
    return PickReport(job=the_job, pick=result, offers_notes=tuple(notes), calibration=used,
                      calibration_path=used_path)


def spot_knowledge(interruptions_per_hour: float | None, spot_advisor: str | Path | None) -> SpotKnowledge:
    """What the user says about spot interruptions: a rate (checked against its bounds) and an advisor file."""
    from gpuscout.cost.spot_prior import MAX_RATE_PER_HOUR, SpotKnowledge
    from gpuscout.hardware.spot_advisor import load_spot_advisor

    rate = interruptions_per_hour
    if rate is not None and not (math.isfinite(rate) and 0 <= rate <= MAX_RATE_PER_HOUR):
        raise InputError("{interruptions_per_hour} {rate} is out of range.",
                         "It is the expected spot interruptions per hour of running, from 0 up to {most:g} (one "
                         "per two minutes: AWS warns two minutes before it interrupts).",
                         "Pass a rate in that range, e.g. {interruptions_per_hour} 0.05 (one per 20 h).",
                         rate=rate, most=MAX_RATE_PER_HOUR)
    advisor = load_spot_advisor(Path(spot_advisor)) if spot_advisor is not None else None
    return SpotKnowledge(per_hour=rate, advisor=advisor)


def _job_arg(job: JobRef) -> str:
    """The job as a command names it: its path or example name; '' for the built-in default; a spec
    given as an object has no name on a command line, so the commands say JOB.toml."""
    if job is None:
        return ""
    return str(job) if isinstance(job, str | Path) else "JOB.toml"


def _measured_launches(sheet: PriceSheet, notes: list[str], results: Sequence[str | Path | BenchResult],
                       ) -> tuple[PriceSheet, list[str]]:
    from gpuscout.cost.measured_startup import apply_measured_startup

    offers, added = apply_measured_startup(sheet.offers, results_of(results))
    return sheet.model_copy(update={"offers": offers}), [*notes, *added]


def _capacities(job: Job, results: Sequence[str | Path | BenchResult],
                target_rps: float | None) -> list[MeasuredCapacity]:
    """The measured serving capacity of each load result (`cost.capacity`); only a serving job takes them."""
    if not results and target_rps is None:
        return []
    from gpuscout.cost.capacity import capacity_from_result

    if not isinstance(job, InferenceJob):
        raise InputError("{load_results} and {target_rps} are for serving jobs.", "The job is a {kind} job.",
                         "Drop them, or pick for an inference job.", kind=job.kind)
    if target_rps is not None and not (math.isfinite(target_rps) and target_rps > 0):
        raise InputError("{target_rps} {rate} is not a positive rate.", "Replicas are provisioned for it.",
                         "Pass the requests per second to serve, e.g. {target_rps} 20.", rate=target_rps)
    if not results:  # replicas for the rate come from the simulation (cost/simulated.py)
        return []
    return [capacity_from_result(r, job) for r in results_of(results)]


def _budget_usd(budget: float | None, budget_usd: float | None, shown: DisplayCurrency) -> float | None:
    """The budget in USD: `budget` is in the display currency (a budget of 300 in CNY is 300 CNY)."""
    if budget is not None and budget_usd is not None:
        raise InputError("Both {budget} and {budget_usd} were given.", "A job has one budget.",
                         "Pass {budget} (in `{currency}`) or {budget_usd}, not both.")
    amount = budget if budget is not None else budget_usd
    if amount is None:
        return None
    if not (math.isfinite(amount) and amount > 0):
        raise InputError("{budget} {amount} is not a positive amount.",
                         "A budget is an amount in {code} ({currency}, USD by default) above zero.",
                         "Pass the most you are willing to spend, e.g. {budget} 50.", amount=amount, code=shown.code)
    return amount * shown.usd_per_unit if budget is not None else amount
