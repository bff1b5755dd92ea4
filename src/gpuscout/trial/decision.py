"""The trial's decision: compare what the candidates measured, price the whole job with their measured
start-up, set the trial's predicted bill beside the real one, and name the offer to rent.

Fairness is `compare`'s own: every fixed variable equal on every box (the same gpuscout version, job,
seed, settings, libraries). Region and billing differ between offers by nature; they are recorded as
fixed variables and listed, and only they may differ. Anything else that differs blocks the verdict,
as it does in `compare`. The whole job's cost on each offer uses the start-up the doctor measured on
that box in place of the one the offer assumed (as `pick --doctor` does), then `compare`'s verdict
picks the winner; when it finds no measurable difference, the cheaper bill is the one to take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from gpuscout.cost.measured import MeasuredCost, cost_point, price_results
from gpuscout.cost.measured_startup import apply_measured_startup
from gpuscout.errors import GpuscoutError
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.price_sheet import PriceSheet
from gpuscout.results.compare import Comparison, compare_results
from gpuscout.results.fairness import check_fairness
from gpuscout.results.schema import BenchResult
from gpuscout.results.store import load_result
from gpuscout.results.verdict import Verdict, decide
from gpuscout.trial.driver import CandidateRun, TrialRun

# Fixed variables that differ between offers by nature: recorded, listed, never a reason to refuse.
OFFER_FIXED = frozenset({"region", "billing"})


@dataclass(frozen=True)
class CandidateLine:
    name: str
    offer_id: str
    status: str
    reason: str
    predicted_usd: float | None
    real_usd: float | None
    reported_usd: float | None
    startup_s: float | None  # measured by the doctor from the box's creation
    doctor: str | None  # keep / return / inconclusive
    torn_down: bool | None  # None: never launched
    teardown: str
    teardown_command: str
    bench: Path | None
    doctor_file: Path | None


@dataclass(frozen=True)
class TrialDecision:
    lines: tuple[CandidateLine, ...]
    outcome: str  # winner, no difference, only one, none, unfair, inconclusive, disturbed
    rent: str | None  # the offer id to rent for the whole job
    text: str  # the verdict in words
    comparison: Comparison | None = None
    verdict: Verdict | None = None
    costs: tuple[MeasuredCost, ...] = ()
    notes: tuple[str, ...] = ()
    deviations: tuple[str, ...] = ()  # where the trial itself was not the same on every box
    compared: tuple[str, ...] = ()  # the candidate names compared, in order (A, B, …)


def decide_trial(trial: TrialRun, sheet: PriceSheet, rates: Sequence[ExchangeRate], *, today: date,
                 deviations: Sequence[str] = ()) -> TrialDecision:
    notes: list[str] = []
    benches: list[tuple[CandidateRun, BenchResult]] = []
    doctors: list[BenchResult] = []
    lines = []
    for run in trial.runs:
        bench, doctor = _read(run, "bench.json", notes), _read(run, "doctor.json", notes)
        if doctor is not None and doctor.doctor is not None:
            doctors.append(doctor)
        if bench is not None and run.status == "benched":
            benches.append((run, bench))
        elif bench is not None:
            notes.append(f"{run.candidate.name} was {run.status}: its partial bench result is kept "
                         f"({_path(run, 'bench.json')}) but not compared")
        lines.append(_line(run, bench, doctor))
    offers, startup_notes = apply_measured_startup(sheet.offers, doctors) if doctors else (sheet.offers, [])
    notes += startup_notes
    measured_sheet = sheet.model_copy(update={"offers": offers})
    base = TrialDecision(lines=tuple(lines), outcome="none", rent=None, text="", notes=tuple(notes),
                         deviations=tuple(deviations))
    if not benches:
        return _with(base, "none", None, "No verdict: no candidate finished its bench. "
                     + _why_none(trial))
    if len(benches) == 1:
        run, result = benches[0]
        costs = _price([result], measured_sheet, [run.candidate.offer.id], rates, today, notes)
        cost = f" (the whole job: ${costs[0].total_usd:,.2f} at the measured speed)" if costs else ""
        return _with(base, "only one", run.candidate.offer.id,
                     f"Only {run.candidate.offer.id} finished its bench{cost}; the others did not "
                     "(see the table), so nothing was compared. Rent it if its bill suits you, or rerun "
                     "the trial with other candidates.", costs=tuple(costs))
    results = [b for _, b in benches]
    names = [r.candidate.name for r, _ in benches]
    offer_ids = [r.candidate.offer.id for r, _ in benches]
    fairness = check_fairness(results)
    blocking = [d for d in fairness.differences if d.field not in OFFER_FIXED]
    if blocking:
        listed = "; ".join(f"{d.field}: {' vs '.join(d.values)}" for d in blocking)
        return _with(base, "unfair", None, f"No verdict: the boxes did not run the same trial ({listed}). "
                     "Rerun the trial so every box installs the same versions.", compared=tuple(names))
    try:
        comparison = compare_results(results, allow_diff=True)
    except GpuscoutError as exc:
        return _with(base, "none", None, f"No verdict: the results could not be compared: {exc.what}",
                     compared=tuple(names))
    # The offers' own region and billing are what the trial compares, so they are moved out of the
    # differences that block a verdict; nothing else is allowed: a side the telemetry saw disturbed (two
    # candidates sharing one host, a noisy neighbour) still gets no winner, as `compare` without
    # --allow-diff rules.
    offer_only = fairness.model_copy(update={
        "fair": True, "differences": (),
        "machine_differences": fairness.machine_differences + fairness.differences})
    comparison = comparison.model_copy(update={"fairness": offer_only, "allow_diff": False})
    costs = _price(results, measured_sheet, offer_ids, rates, today, notes)
    verdict = decide(comparison, [cost_point(c) for c in costs] if len(costs) == len(results) else None)
    label_to_offer = dict(zip((m.label for m in comparison.machines), offer_ids, strict=True))
    if verdict.winner is not None:
        rent = label_to_offer.get(verdict.winner)
        text = f"Rent {rent} for the whole job. {verdict.text}"
        outcome = "winner"
    elif verdict.outcome == "no difference" and len(costs) == len(results):
        cheapest = min(range(len(costs)), key=lambda i: costs[i].total_usd)
        rent = offer_ids[cheapest]
        text = (f"No measurable difference: take the cheaper, {rent} (the whole job: "
                f"${costs[cheapest].total_usd:,.2f}). {verdict.text}")
        outcome = "no difference"
    elif verdict.outcome == "disturbed":
        # compare's own advice names its --allow-diff flag, which `trial` does not take.
        rent, outcome = None, verdict.outcome
        text = ("No verdict (disturbed): the telemetry saw a box slowed while measuring ("
                + "; ".join(verdict.reasons[:2]) + ("; …" if len(verdict.reasons) > 2 else "")
                + "), so the timings are not comparable. Rerun the trial on boxes that do not share a host, "
                "or look at the fetched results anyway with `gpuscout compare … --allow-diff`.")
    else:
        rent, outcome = None, verdict.outcome
        text = f"No verdict ({verdict.outcome}). {verdict.text}"
    return _with(base, outcome, rent, text, comparison=comparison, verdict=verdict, costs=tuple(costs),
                 compared=tuple(names))


def _with(base: TrialDecision, outcome: str, rent: str | None, text: str, **more: object) -> TrialDecision:
    from dataclasses import replace

    return replace(base, outcome=outcome, rent=rent, text=text, **more)  # type: ignore[arg-type]


def _price(results: Sequence[BenchResult], sheet: PriceSheet, offer_ids: Sequence[str],
           rates: Sequence[ExchangeRate], today: date, notes: list[str]) -> list[MeasuredCost]:
    try:
        return price_results(results, sheet, offer_ids, rates=rates, today=today)
    except GpuscoutError as exc:
        notes.append(f"the whole job could not be priced: {exc.what}")
        return []


def _why_none(trial: TrialRun) -> str:
    if trial.stopped_by is not None:
        return "The trial was stopped before any bench finished."
    if trial.guard:
        return f"The trial stopped: {trial.guard}."
    return "Each candidate's line says why."


def _path(run: CandidateRun, name: str) -> Path | None:
    for f in run.files:
        if f.name == name:
            return f
    return None


def _read(run: CandidateRun, name: str, notes: list[str]) -> BenchResult | None:
    path = _path(run, name)
    if path is None:
        return None
    try:
        return load_result(path)
    except GpuscoutError as exc:
        notes.append(f"{run.candidate.name}: {path} could not be read: {exc.what}")
        return None


def _line(run: CandidateRun, bench: BenchResult | None, doctor: BenchResult | None) -> CandidateLine:
    verdict = doctor.doctor if doctor is not None else None
    td = run.teardown
    return CandidateLine(
        name=run.candidate.name, offer_id=run.candidate.offer.id, status=run.status, reason=run.reason,
        predicted_usd=run.candidate.predicted_usd, real_usd=run.real_usd, reported_usd=run.reported_usd,
        startup_s=verdict.startup_s if verdict is not None else None,
        doctor=verdict.outcome if verdict is not None else None,
        torn_down=None if td is None else td.done, teardown=td.message if td else "",
        teardown_command=td.command if td else "", bench=_path(run, "bench.json") if bench else None,
        doctor_file=_path(run, "doctor.json") if doctor else None)
