"""Rendering of `compare`: a rich table, a Markdown report to paste into an issue, and JSON.

Pure: a `Comparison`, its `Verdict` and the measured costs in, text or renderables out. Every
format carries the same four parts in the same order: fairness, side by side, cost, verdict.
The rich table keeps each cell to a figure at 80 columns (the mean; the ratio over its 95% CI;
memory details and cost formulas as footnotes); `--wide` adds P50, P95 and n to each mean and the
cost's ranges, units and price dates. Markdown always carries everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.measured import MeasuredCost
from gpuscout.hardware.currency import USD, DisplayCurrency, ExchangeRate
from gpuscout.report.compare_cells import (
    MACHINE_HEADER,
    Rows,
    cost_header,
    cost_in_currency,
    cost_rows,
    difference_rows,
    direction,
    failure_rows,
    fairness_headline,
    machine_rows,
    md_table,
    memory_text,
    metric_name,
    metric_rows,
    observed,
    params_text,
    ratio_lines,
    ratio_note,
    retry_lines,
    runs_text,
    startup_rows,
    telemetry_lines,
    total_band,
    work_band,
)
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, one_line, plain, prose_column
from gpuscout.report.numbers import common_unit, duration, gib, in_unit
from gpuscout.report.pick import rates_text, shown_money, unit_costs
from gpuscout.results.compare import CaseRow, Comparison, MemoryCell, MetricRow, Stat
from gpuscout.results.verdict import Verdict

__all__ = ["render_json", "render_markdown", "render_table"]


# ---------------------------------------------------------------- Markdown ------------------

def render_markdown(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                    notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = (),
                    currency: DisplayCurrency | None = None) -> str:
    labels = [m.label for m in c.machines]
    out = [f"# gpuscout compare: {c.job_name} ({c.kind})", "",
           md_table(MACHINE_HEADER, machine_rows(c)), "",
           "## Fairness", ""]
    headline = fairness_headline(c)
    out += [f"**{headline}**" if c.fairness.fair else f"> **⚠ {headline}**", ""]
    if c.fairness.differences:
        out += [md_table(["fixed variable", *labels], difference_rows(c.fairness.differences)), ""]
    if c.fairness.machine_differences:
        out += ["What is being compared (machine; listed, not flagged):", "",
                md_table(["machine", *labels], difference_rows(c.fairness.machine_differences)), ""]
    out += [f"- {n}" for n in c.fairness.notes] + ([""] if c.fairness.notes else [])
    disturbed = any(m.disturbances for m in c.machines)
    out += ["## Telemetry", "", *(f"- **⚠ {line}**" if disturbed else line for line in telemetry_lines(c)), ""]
    out += ["## Side by side", "", ratio_note(c.options), ""]
    for case in c.cases:
        out += _md_case(case, labels)
    if c.unmatched_cases:
        out += ["Cases not in every result: " + "; ".join(
            f"`{n}` (only {', '.join(ls)})" for n, ls in c.unmatched_cases.items()), ""]
    if costs:
        shown = currency or USD
        out += ["## Cost of the whole job (from the measured throughput)", "",
                md_table(cost_header(shown), cost_rows(costs, labels, shown)), ""]
        out += [f"- {w}" for c_ in costs for w in c_.warnings]
        out += [f"- {r}" for r in retry_lines(costs, labels)]
        out += [f"- {n}" for n in notes] + ([f"- {rates_text(rates)}"] if rates else []) + [""]
    out += ["## Verdict", "", verdict.text, ""]
    return "\n".join(out)


def _md_case(case: CaseRow, labels: Sequence[str]) -> list[str]:
    title = f"### Case `{case.name}`" + (f" ({params_text(case)})" if case.params else "")
    out = [title, ""]
    if case.metrics:
        header = ["metric", *labels, *(f"{lab} vs {labels[0]}" for lab in labels[1:])]
        out += [md_table(header, metric_rows(case)), ""]
    else:
        out += ["No metric was measured in every result for this case.", ""]
    out += [f"- Failure {f}" for f in failure_rows(case, labels)]
    if any(m.peak_bytes is not None for m in case.memory):
        out += [f"- Peak memory {lab}: {memory_text(m)}" for lab, m in zip(labels, case.memory, strict=True)]
    if any(case.startup):
        out += ["", md_table(["startup phase", *labels], startup_rows(case))]
    return [*out, ""]


# ---------------------------------------------------------------- rich ----------------------

def rich_table(title: str, header: Sequence[str], rows: Rows) -> Table:
    """A table of words (fixed variables, machines): every column may wrap at words."""
    table = Table(title=title, title_justify="left")
    for col in header:
        prose_column(table, col)
    for row in rows:
        table.add_row(*(plain(cell) for cell in row))  # plain text: "[s, lower is better]" is not markup
    return table


def render_table(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                 notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = (), wide: bool = False,
                 currency: DisplayCurrency | None = None) -> RenderableType:
    labels = [m.label for m in c.machines]
    footnotes = Footnotes()
    parts: list[RenderableType] = [
        rich_table(f"{c.job_name} ({c.kind}): results compared", MACHINE_HEADER, machine_rows(c)),
        Text(fairness_headline(c), style="green" if c.fairness.fair else "bold red")]
    if c.fairness.differences:
        parts.append(rich_table("Fixed variables that differ", ["fixed variable", *labels],
                                difference_rows(c.fairness.differences)))
    if c.fairness.machine_differences:
        parts.append(rich_table("What is being compared (listed, not flagged)", ["machine", *labels],
                                difference_rows(c.fairness.machine_differences)))
    parts += [Text(f"note: {n}", style="yellow") for n in c.fairness.notes]
    parts += _telemetry_parts(c)
    for case in c.cases:
        parts += _rich_case(case, labels, footnotes, wide=wide)
    parts.append(Text(ratio_note(c.options), style="dim"))
    if c.unmatched_cases:
        parts.append(Text("Cases not in every result: " + "; ".join(
            f"{n} (only {', '.join(ls)})" for n, ls in c.unmatched_cases.items()), style="yellow"))
    if costs:
        parts += [cost_table(costs, labels, footnotes, wide=wide, shown=currency or USD), footnotes.flush()]
        parts += [Text(f"warning: {w}", style="yellow") for c_ in costs for w in c_.warnings]
        parts += [Text(f"retries: {r}", style="yellow") for r in retry_lines(costs, labels)]
        parts += [Text(f"warning: {n}", style="yellow") for n in notes]
        parts += [Text(rates_text(rates))] if rates else []
    parts.append(Text("Verdict: " + verdict.text, style="bold"))
    return Group(*parts)


def _telemetry_parts(c: Comparison) -> list[RenderableType]:
    lines = telemetry_lines(c)
    if not any(m.disturbances for m in c.machines):
        return [Text(line, style="dim") for line in lines]
    return [Text("Telemetry: disturbed while measuring", style="bold red"),
            *(Text(f"  {line}", style="red") for line in lines)]


def _rich_case(case: CaseRow, labels: Sequence[str], notes: Footnotes, *, wide: bool) -> list[RenderableType]:
    """Each metric's mean per result and each ratio over its CI; memory details as footnotes."""
    title = f"Case {case.name}" + (f" ({params_text(case)})" if case.params else "")
    table = Table(title=title, title_justify="left")
    prose_column(table, "metric")
    for header in (*labels, *(f"{label} vs {labels[0]}" for label in labels[1:])):
        number_column(table, header)
    for row in case.metrics:
        table.add_row(*_metric_cells(row, wide=wide))
    blanks = [""] * (len(labels) - 1)
    if any(m.peak_bytes is not None for m in case.memory):
        memory = (_memory_cell(m, label, notes) for label, m in zip(labels, case.memory, strict=True))
        table.add_row("peak memory", *memory, *blanks)
    for phase, *cells in startup_rows(case):
        table.add_row(f"startup: {phase}", *cells, *blanks)
    parts: list[RenderableType] = [table, notes.flush()]
    parts += [Text(f"failure {f}", style="red") for f in failure_rows(case, labels)]
    return parts


def _metric_cells(row: MetricRow, *, wide: bool) -> list[str | Text]:
    """Bare figures in one unit per row (named beside the metric); `wide` adds P50, P95 and n below each."""
    figures = [x for s in row.stats for x in (s.mean, s.p50, s.p95) if x is not None]
    unit, factor = common_unit(figures, row.unit)
    name = plain(f"{metric_name(row)}" + (f" ({unit})" if unit else "") + f"\n{direction(row)}")
    means = [in_unit(s.mean, factor) + (f"\n{_spread(s, factor)}" if wide and s.p50 is not None else "")
             for s in row.stats]
    return [name, *means, *(ratio_lines(r) for r in row.ratios[1:])]


def _spread(s: Stat, factor: float) -> str:
    return f"P50 {in_unit(s.p50, factor)} · P95 {in_unit(s.p95, factor)} · n={s.n}{runs_text(s, ' · ')}"


def _memory_cell(m: MemoryCell, label: str, notes: Footnotes) -> str:
    if m.peak_bytes is None:
        return "-"
    return f"{gib(m.peak_bytes)} {notes.ref(f'{label} peak memory: {memory_text(m)}')}"


def cost_table(costs: Sequence[MeasuredCost], labels: Sequence[str], notes: Footnotes, *, wide: bool,
               shown: DisplayCurrency = USD) -> Table:
    """The whole job's cost per result; each basis (work × throughput) is a footnote."""
    table = Table(title=f"Cost of the whole job, from the measured throughput ({shown.code})", title_justify="left")
    label_column(table, "")
    prose_column(table, "offer")
    for header in ("work time\n(95% CI)" if wide else "work time", "billed", "total\n(range)" if wide else "total",
                   "P95"):
        number_column(table, header)
    if wide:
        prose_column(table, "per unit")
        label_column(table, "price date")
    label_column(table, "")
    for label, c in zip(labels, costs, strict=True):
        table.add_row(*_cost_cells(c, label, notes, wide=wide, shown=shown))
    return table


def _cost_cells(c: MeasuredCost, label: str, notes: Footnotes, *, wide: bool,
                shown: DisplayCurrency = USD) -> list[str | Text]:
    basis = notes.ref(f"{label} basis: {c.work.formula}")
    if not wide:
        return [label, one_line(c.offer_id), duration(c.work.work_s), duration(c.cost.billed_s),
                shown_money(c.total_usd, shown), shown_money(c.total_p95_usd, shown), basis]
    work, total = duration(c.work.work_s), shown_money(c.total_usd, shown)
    offer = plain(f"{c.offer_id}\n{c.provider}, {c.tier}, {c.gpu_count}× {c.gpu_sku}")
    return [label, offer, f"{work}\n({work_band(c)})" if work_band(c) else work,
            duration(c.cost.billed_s), f"{total}\n({total_band(c, shown)})" if total_band(c) else total,
            shown_money(c.total_p95_usd, shown), plain(unit_costs(c.unit_costs_usd, shown)), observed(c), basis]


# ---------------------------------------------------------------- JSON ----------------------

def render_json(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = (),
                currency: DisplayCurrency | None = None) -> str:
    shown = currency or USD
    payload = {"comparison": c.model_dump(mode="json"),
               "costs": [x.model_dump(mode="json") | {"in_currency": cost_in_currency(x, shown)} for x in costs],
               "currency": shown.model_dump(mode="json"),
               "verdict": verdict.model_dump(mode="json"), "warnings": list(notes),
               "exchange_rates": [r.model_dump(mode="json") for r in rates],
               "ratio_note": ratio_note(c.options)}
    return json.dumps(payload, indent=2, allow_nan=False)  # NaN and Infinity are not JSON
