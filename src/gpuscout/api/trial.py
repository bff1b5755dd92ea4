"""`trial`: run the same small fair test on every rented candidate, tear every box down, decide.

Two calls, so the command line can show the predicted bill and ask before anything is rented:
`plan_trial` picks the candidates (`--candidates`, `--top N`, or the leaders `pick` could not tell
apart) and prices the trial on each; `run_trial` launches, runs the one script, fetches, tears down
on every path and decides (`trial.decision`), recording the decision in the results store.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscout.api.inputs import InputError

if TYPE_CHECKING:
    from gpuscout.hardware.currency import ExchangeRate
    from gpuscout.hardware.price_sheet import PriceSheet
    from gpuscout.trial.driver import Candidate
    from gpuscout.trial.engine import Engine
    from gpuscout.trial.plan import TrialPlan, TrialReport
    from gpuscout.trial.script import InstallMode

ENGINES = ("skypilot", "ssh", "local")
# What the trial runs besides the bench's slice, billed on every box. `doctor --quick` is bounded by its
# own help ("the short checks: within a minute"); installing gpuscout[bench] (torch and its CUDA
# libraries, about 3 GB of wheels) into a fresh venv is an ASSUMPTION of 5 minutes on a cloud box's
# network: measure yours (results/steps.log times each step) and pass --setup-minutes.
DOCTOR_QUICK_S = 60.0
INSTALL_S = 300.0
DEFAULT_BUDGET_MINUTES = 30.0


def plan_trial(job: str | Path, *, offers: str | Path, candidates: Sequence[str] = (), top: int | None = None,
               engine: str = "local", max_usd: float | None = None, budget_minutes: float = DEFAULT_BUDGET_MINUTES,
               output: str | Path = "trial", install: InstallMode | None = None, runs: int = 3, warmup: int = 2,
               repeats: int = 5, seed: int = 0, device: str | None = None, pip_args: str = "",
               ssh_targets: Mapping[str, str] | None = None, setup_minutes: float | None = None,
               fx: Sequence[str | ExchangeRate] = (), today: date | None = None) -> TrialPlan:
    """Pick the candidates and price the trial on each; refuse above `max_usd` before anything starts."""
    from gpuscout.api.inputs import rates_for
    from gpuscout.api.pick import pick
    from gpuscout.hardware.price_sheet import load_offers
    from gpuscout.host import package_version
    from gpuscout.trial.plan import TrialPlan
    from gpuscout.trial.script import ScriptSettings, bundle_job

    if engine not in ENGINES:
        raise InputError("Unknown engine {given!r}.", "A trial runs on rented boxes through one of three engines.",
                         "Pass {engine} skypilot (rents the boxes), ssh (boxes you rented) or local (this "
                         "machine, no cloud).", given=engine)
    for name, value, low in (("runs", runs, 1), ("repeats", repeats, 1), ("warmup", warmup, 0)):
        if value < low:
            raise InputError(f"{{{name}}} {{value}} is below {{low}}.", "The trial's bench needs it.",
                             f"Pass {{{name}}} {{low}} or more.", value=value, low=low)
    if not budget_minutes > 0:
        raise InputError("{budget_minutes} {m} is not a positive time.", "It bounds each candidate's wall time.",
                         "Pass e.g. {budget_minutes} 30.", m=budget_minutes)
    if max_usd is not None and not max_usd > 0:
        raise InputError("{max_usd} {m} is not a positive amount.", "It is the most the trial may spend.",
                         "Pass e.g. {max_usd} 5.", m=max_usd)
    if top is not None and candidates:
        raise InputError("{candidates} and {top} were both given.", "Each names the boxes to try.",
                         "Pass one of them.")
    spec = Path(job)
    if not spec.is_file():
        raise InputError("No job spec at {job}.", "The trial copies the spec onto every box.",
                         "Pass the path of your job's TOML (`gpuscout examples` lists the shipped ones).", job=job)
    sheet_path = Path(offers)
    sheet, notes = load_offers(sheet_path)
    bundle_job(spec, sheet_path)  # a job that cannot travel in the script is refused before any question
    day = today or date.today()
    rates = tuple(rates_for(sheet.exchange_rates, fx, day))
    # Offers named by the user are ranked even at a placeholder price; the ones chosen for them never are.
    report = pick(spec, offers=sheet_path, fx=fx, today=day, include_placeholders=bool(candidates))
    chosen = _choose(report.pick.rows, sheet, candidates, top, report.pick.trial)
    mode: InstallMode = install or ("current" if engine == "local" else "venv")
    setup_s = (setup_minutes * 60 if setup_minutes is not None
               else DOCTOR_QUICK_S + (INSTALL_S if mode == "venv" else 0.0))
    version = package_version("gpuscout")
    if version is None and mode == "venv":
        raise InputError("This gpuscout is not an installed package, so no box can install its version.",
                         "Every box installs the same gpuscout version as this machine.",
                         "Install gpuscout here (pip install gpuscout), or use {install} current on a box that "
                         "shares this checkout.")
    current = mode == "current"
    settings = ScriptSettings(version=version or "unknown", install=mode, python=sys.executable if current else
                              "python3", package_root=_package_root() if mode == "current" else "",
                              pip_args=pip_args, device=device or ("cpu" if engine == "local" else "auto"),
                              runs=runs, warmup=warmup, repeats=repeats, seed=seed)
    targets = dict(ssh_targets or {})
    if engine == "ssh":
        missing = [o for o in chosen if o not in targets]
        if missing:
            raise InputError("No ssh host for {missing}.", "The ssh engine runs on boxes you already rented.",
                             "Pass {ssh_targets} OFFER_ID=user@host:port for every candidate.",
                             missing=", ".join(missing))
    rows = {r.offer_id: r for r in report.pick.rows}
    by_id = {o.id: o for o in sheet.offers}
    cands = tuple(_candidate(by_id[o], rows.get(o), setup_s, runs * (warmup + repeats), rates, targets.get(o))
                  for o in chosen)
    deviations = (f"no fresh environment: every box reuses {sys.executable} (install=current)",) \
        if mode == "current" else ()
    notes = [*notes, *(f"{c.offer.id}: the trial's predicted {c.predicted_s / 60:,.0f} min is beyond the "
                       f"{budget_minutes:g} min each box may run: raise the time bound, or lower the runs"
                       for c in cands if c.predicted_s is not None and c.predicted_s > budget_minutes * 60)]
    plan = TrialPlan(job=str(spec), sheet_path=sheet_path, sheet=sheet, rates=rates, engine=engine,
                     candidates=cands, settings=settings, budget_s=budget_minutes * 60, max_usd=max_usd,
                     out_dir=Path(output), deviations=deviations, notes=tuple(notes))
    total = plan.predicted_usd
    if max_usd is not None and total is not None and total > max_usd:
        raise InputError("The trial's predicted bill, ${total:,.2f}, is above {max_usd} ${limit:,.2f}.",
                         "It covers each box's billed start-up, install, doctor, the bench and the idle tail "
                         "under its offer's billing rules; nothing was launched.",
                         "Raise {max_usd}, try fewer candidates ({top} 2), or fewer {runs}.",
                         total=total, limit=max_usd)
    return plan


def _package_root() -> str:
    """The folder holding this gpuscout package (src/ of a checkout, or site-packages)."""
    return str(Path(__file__).resolve().parents[2])


def _choose(rows: Sequence[Any], sheet: PriceSheet, candidates: Sequence[str], top: int | None,
            advice: Any = None) -> list[str]:
    """The offers named, the `top` cheapest ranked, or by default the leader and the cheapest offer whose
    cost band overlaps it (the two `pick` cannot tell apart); the two cheapest when every band is apart."""
    ids = [o.id for o in sheet.offers]
    if candidates:
        unknown = [c for c in candidates if c not in ids]
        if unknown:
            from difflib import get_close_matches

            near = get_close_matches(unknown[0], ids, n=1)
            raise InputError("{unknown} is not an offer of the price sheet.", "{candidates} names offers by id.",
                             "Use ids from the sheet" + (f" (did you mean {near[0]}?)" if near else
                                                         " (`gpuscout pick --offers SHEET` lists them)") + ".",
                             unknown=", ".join(unknown))
        if len(set(candidates)) != len(candidates):
            raise InputError("{candidates} names an offer twice.", "Each candidate is one box.",
                             "Name each offer once.")
        return list(candidates)
    ranked = [r.offer_id for r in rows if r.excluded is None]
    if top is not None:
        if top < 1:
            raise InputError("{top} {n} names no candidate.", "It takes the N cheapest ranked offers.",
                             "Pass {top} 2 or more.", n=top)
        return ranked[:top]
    if advice is not None and advice.challenger_id is not None:
        return [advice.winner_id, advice.challenger_id]
    if len(ranked) < 2:
        raise InputError("The job fits {n} offer(s) of the sheet; a trial compares two or more.",
                         "pick ranks only the offers the job fits.", "Add offers, or name them with {candidates}.",
                         n=len(ranked))
    return ranked[:2]


def _candidate(offer: Any, row: Any, setup_s: float, steps: int, rates: Sequence[ExchangeRate],
               ssh_target: str | None) -> Candidate:
    """The candidate and its predicted trial bill: billed start-up, setup (install, doctor), the bench's
    steps at the slow end of the row's step time, and the idle tail, under the offer's rules."""
    from gpuscout.cost.billing import CostOptions, price_job
    from gpuscout.cost.spot import SpotNeverFinishes
    from gpuscout.cost.trial_price import BENCH_REPEATS, BENCH_RUNS, BENCH_WARMUP, trial_work_s
    from gpuscout.errors import SpecError
    from gpuscout.hardware.currency import to_usd
    from gpuscout.trial.driver import Candidate, safe_name

    predicted = predicted_s = None
    work = trial_work_s(row) if row is not None else None
    if work is not None:
        work *= steps / (BENCH_RUNS * (BENCH_WARMUP + BENCH_REPEATS))
        try:
            bill = price_job(offer, work + setup_s, CostOptions(), formulas=False)
            predicted, predicted_s = to_usd(bill.total, offer.currency, rates), bill.billed_s
        except (SpecError, SpotNeverFinishes):
            predicted = None
    return Candidate(name=safe_name(offer.id), offer=offer, predicted_usd=predicted, predicted_s=predicted_s,
                     ssh_target=ssh_target)


def run_trial(plan: TrialPlan, *, engine: Engine | None = None, on_event: Callable[[str], None] | None = None,
              store: str | Path | None = None, no_store: bool = False, today: date | None = None) -> TrialReport:
    """Launch every candidate, run the script, fetch, tear down on every path, decide and record."""
    from gpuscout.trial.decision import decide_trial
    from gpuscout.trial.driver import Driver, DriverSettings
    from gpuscout.trial.plan import TrialReport
    from gpuscout.trial.script import body_sha256, bundle_job, script_body
    from gpuscout.trial.sheet import sheet_for_boxes

    # the boxes' doctor and bench read TOML: a SkyPilot vms.csv travels as its candidates' offers in TOML
    sheet = sheet_for_boxes(plan.sheet_path, [c.offer for c in plan.candidates], plan.sheet.exchange_rates,
                            plan.out_dir)
    bundle = bundle_job(Path(plan.job), sheet)
    body = script_body(plan.settings, bundle)
    the_engine = engine or make_engine(plan.engine, plan.out_dir)
    events: list[str] = []

    def event(text: str) -> None:
        events.append(text)
        if on_event is not None:
            on_event(text)

    settings = DriverSettings(out_dir=plan.out_dir, budget_s=plan.budget_s, max_usd=plan.max_usd, rates=plan.rates,
                              parallel=plan.engine != "local")
    try:
        run = Driver(the_engine, plan.candidates, body, body_sha256(body), settings, event).run()
    finally:
        close = getattr(the_engine, "close", None)
        if engine is None and callable(close):
            close()
    decision = decide_trial(run, plan.sheet, plan.rates, today=today or date.today(), deviations=plan.deviations)
    stored, warning = None, ""
    if not no_store:
        from gpuscout.api.results import record_run
        from gpuscout.errors import GpuscoutError
        from gpuscout.trial.record import trial_payload

        try:
            stored = record_run("trial", trial_payload(plan_facts(plan), run, decision), store=store).id
        except GpuscoutError as exc:
            warning = f"this trial was not recorded in the results store: {exc}"
    return TrialReport(plan=plan, run=run, decision=decision, stored_as=stored, store_warning=warning,
                       events=tuple(events))


def plan_facts(plan: TrialPlan) -> dict[str, Any]:
    s = plan.settings
    return {"job": plan.job, "offers": str(plan.sheet_path), "engine": plan.engine, "budget_s": plan.budget_s,
            "max_usd": plan.max_usd, "predicted_usd": plan.predicted_usd, "gpuscout_version": s.version,
            "install": s.install, "device": s.device, "runs": s.runs, "warmup": s.warmup, "repeats": s.repeats,
            "seed": s.seed}


def make_engine(name: str, out_dir: Path) -> Engine:
    """The engine by name; the ssh and skypilot adapters are imported only when asked for (the skypilot
    one needs the optional extra)."""
    import importlib

    if name == "local":
        from gpuscout.trial.engines.local import LocalEngine

        return LocalEngine(out_dir / "boxes")
    module_name, class_name = {"ssh": ("ssh", "SshEngine"), "skypilot": ("skypilot", "SkyPilotEngine")}[name]
    try:
        module = importlib.import_module(f"gpuscout.trial.engines.{module_name}")
    except ImportError as exc:
        raise InputError("The {engine} engine is not available here: {exc}.",
                         "It is an adapter that needs its own tools (skypilot: the gpuscout[skypilot] extra; "
                         "ssh: the OpenSSH client).",
                         "Install what it names (pip install 'gpuscout[skypilot]', then `sky check`), or use "
                         "another engine.", engine=name, exc=exc) from None
    factory = getattr(module, class_name, None)
    if factory is None:
        raise InputError("This gpuscout has no {engine} engine.", "Its adapter module has no engine class.",
                         "Use another engine.", engine=name)
    from gpuscout.trial.engine import EngineError

    try:
        # skypilot writes each candidate's task file (the record of what was launched) beside its script
        engine: Engine = factory(out_dir) if name == "skypilot" else factory()
    except EngineError as exc:
        raise InputError("The {engine} engine could not start: {exc}", "It needs its tools on this machine.",
                         "Install what it names, or use another engine.", engine=name, exc=exc) from None
    return engine
