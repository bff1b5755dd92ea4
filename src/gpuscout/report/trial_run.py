"""`gpuscout trial` as screens: the plan and its predicted bill before anything is rented, then the decision.

Pure rendering of `api.trial`'s plan and report. At 80 columns the tables keep their amounts whole;
offer ids and reasons wrap. A box that could not be torn down is printed last, in bold, with the
command that stops its billing, so it is the line the user reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box as boxes
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from gpuscout.trial.plan import TrialPlan, TrialReport

OUTCOME_STYLE = {"winner": "bold green", "no difference": "bold green", "only one": "bold yellow"}


def usd(amount: float | None) -> str:
    if amount is None:
        return "—"
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:,.4f}"


def plan_screen(plan: TrialPlan) -> RenderableType:
    """The candidates and the trial's predicted bill on each, before anything is launched."""
    s = plan.settings
    table = Table(box=boxes.SIMPLE_HEAD, pad_edge=False)
    table.add_column("candidate", overflow="fold", min_width=24)
    table.add_column("GPU", overflow="fold")
    table.add_column("tier", no_wrap=True)
    table.add_column("trial bill", justify="right", no_wrap=True)
    table.add_column("billed", justify="right", no_wrap=True)
    for c in plan.candidates:
        table.add_row(c.offer.id, f"{c.offer.gpu_count}× {c.offer.gpu}", c.offer.tier, usd(c.predicted_usd),
                      f"{c.predicted_s / 60:,.1f} min" if c.predicted_s is not None else "—")
    total = plan.predicted_usd
    limit = f"; --max-usd {usd(plan.max_usd)}" if plan.max_usd is not None else ""
    lines: list[RenderableType] = [
        Text(f"trial of {plan.job} on {len(plan.candidates)} candidates, engine {plan.engine}", style="bold"),
        table,
        Text(f"predicted trial bill: {usd(total) if total is not None else 'not priced for every candidate'}"
             f"{limit}; each box at most {plan.budget_s / 60:,.0f} min"),
        Text(f"each box: gpuscout {s.version} ({'a fresh venv' if s.install == 'venv' else 'this interpreter'}), "
             f"doctor{' --quick' if s.quick_doctor else ''}, bench --runs {s.runs} --warmup {s.warmup} "
             f"--repeats {s.repeats} --seed {s.seed} --device {s.device}", style="dim"),
    ]
    if plan.engine == "local":
        lines.append(Text("local: nothing is rented; the bills are what the same trial would cost on these "
                          "offers.", style="dim"))
    lines += [Text(f"deviation: {d}", style="yellow") for d in plan.deviations]
    return Group(*lines)


def decision_screen(report: TrialReport) -> RenderableType:
    """Every candidate's fate, the predicted bill beside the real one, the verdict, and what still bills."""
    decision, run = report.decision, report.run
    table = Table(box=boxes.SIMPLE_HEAD, pad_edge=False)
    table.add_column("candidate", overflow="fold", min_width=24)
    table.add_column("result", overflow="fold")
    table.add_column("start-up", justify="right", no_wrap=True)
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("real", justify="right", no_wrap=True)
    table.add_column("down", no_wrap=True)
    for line in decision.lines:
        result = line.status + (f", doctor {line.doctor}" if line.doctor else "")
        down = "—" if line.torn_down is None else ("yes" if line.torn_down else "NO")
        real = usd(line.real_usd) + (f" ({usd(line.reported_usd)})" if line.reported_usd is not None else "")
        table.add_row(line.offer_id, result, f"{line.startup_s:,.0f} s" if line.startup_s is not None else "—",
                      usd(line.predicted_usd), real, down)
    parts: list[RenderableType] = [Text(f"trial of {report.plan.job}: {len(decision.lines)} candidates, engine "
                                        f"{report.plan.engine}", style="bold"), table]
    reasons = [f"{x.offer_id}: {x.reason}" for x in decision.lines if x.reason]
    parts += [Text(r, style="dim") for r in reasons]
    if any(x.reported_usd is not None for x in decision.lines):
        parts.append(Text("real: the time held, billed under the offer's rules (the provider's own report in "
                          "brackets)", style="dim"))
    if report.plan.engine == "local":
        parts.append(Text("local: nothing was rented; the bills price the time each candidate took.", style="dim"))
    if decision.comparison is not None:
        labels = ", ".join(f"{m.label} = {name}" for m, name in zip(decision.comparison.machines,
                                                                       decision.compared, strict=True))
        parts.append(Text(f"compared: {labels}", style="dim"))
    parts.append(Text(decision.text, style=OUTCOME_STYLE.get(decision.outcome, "bold yellow")))
    parts += [Text(f"note: {n}", style="dim") for n in decision.notes]
    parts += [Text(f"deviation: {d}", style="yellow") for d in decision.deviations]
    if run.guard:
        parts.append(Text(f"stopped: {run.guard}", style="bold yellow"))
    if run.stopped_by is not None:
        parts.append(Text("stopped by a signal: every launched box was torn down; what finished is kept",
                          style="bold yellow"))
    if run.error:
        parts.append(Text(f"the trial failed: {run.error}", style="bold red"))
    parts.append(Text(f"results: {report.plan.out_dir}/<candidate>/results", style="dim"))
    if report.stored_as is not None:
        parts.append(Text(f"recorded in the results store as run {report.stored_as} "
                          f"(gpuscout report {report.stored_as} -o trial.html)", style="dim"))
    if report.store_warning:
        parts.append(Text(f"warning: {report.store_warning}", style="yellow"))
    for line in decision.lines:
        if line.torn_down is False:
            parts.append(Text(f"STILL BILLING: {line.offer_id}: {line.teardown}. Stop it with: "
                              f"{line.teardown_command or 'your provider console'}", style="bold red"))
    return Group(*parts)
