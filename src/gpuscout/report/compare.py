"""Rendering of `compare`: a rich table, a Markdown report to paste into an issue, and JSON.

Pure: a `Comparison`, its `Verdict` and the measured costs in, text or renderables out. Every
format carries the same four parts in the same order: fairness, side by side, cost, verdict.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.measured import MeasuredCost
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.report.numbers import gib
from gpuscout.report.pick import duration, usd
from gpuscout.results.compare import (
    CaseRow,
    Comparison,
    Difference,
    Machine,
    MemoryCell,
    MetricRow,
    Ratio,
    Stat,
)
from gpuscout.results.verdict import Verdict

RATIO_NOTE = ("Ratios: how many times better than A (above 1 = better; for times and latencies A's value / this "
              "value), with a 95% CI from a seeded bootstrap of the raw samples. A CI that includes 1.0 means "
              "no measurable difference.")
Rows = list[list[str]]


# ---------------------------------------------------------------- cells ---------------------

def number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return gib(value)
    if unit == "s" and abs(value) < 1:
        return f"{value * 1000:.3g} ms"
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{text} {unit}".strip()


def stat_cell(s: Stat, unit: str) -> str:
    if s.p50 is None or s.p95 is None:
        return number(s.mean, unit)
    return f"{number(s.mean, unit)} (P50 {number(s.p50, unit)}, P95 {number(s.p95, unit)}, n={s.n})"


def ratio_cell(r: Ratio) -> str:
    if r.finding == "baseline":
        return "baseline"
    if r.ci95_low is None or r.ci95_high is None:
        return f"{r.advantage:.2f}× (single reading, no CI)"
    word = {"better": "better", "worse": "worse"}.get(r.finding, "no measurable difference")
    return f"{r.advantage:.2f}× {word} (95% CI {r.ci95_low:.2f}–{r.ci95_high:.2f})"


def memory_text(m: MemoryCell) -> str:
    if m.peak_bytes is None:
        return "-"
    text = f"{gib(m.peak_bytes)} ({m.peak_source})"
    if m.headroom_bytes is not None and m.device_total_bytes is not None:
        text += f", headroom {gib(m.headroom_bytes)} of {gib(m.device_total_bytes)}"
    if m.peak.extrapolated_allocated_bytes is not None:
        text += f"; full depth (extrapolated) {gib(m.peak.extrapolated_allocated_bytes)}"
        if m.extrapolated_headroom_bytes is not None:
            text += f", headroom {gib(m.extrapolated_headroom_bytes)}"
    return text


def metric_name(row: MetricRow) -> str:
    return f"{row.name}{' (extrapolated)' if row.extrapolated else ''}"


def params_text(case: CaseRow) -> str:
    return ", ".join(f"{k}={v}" for k, v in case.params.items())


def machine_name(m: Machine) -> str:
    return f"{m.label}{' (baseline)' if m.label == 'A' else ''}"


# ---------------------------------------------------------------- shared row builders -------

def difference_rows(diffs: Sequence[Difference]) -> Rows:
    return [[d.field, *d.values] for d in diffs]


def metric_rows(case: CaseRow) -> Rows:
    rows = []
    for row in case.metrics:
        cells = [stat_cell(s, row.unit) for s in row.stats]
        ratios = [ratio_cell(r) for r in row.ratios[1:]]
        rows.append([f"{metric_name(row)} [{row.unit}, {'higher' if row.higher_is_better else 'lower'} is better]",
                     *cells, *ratios])
    return rows


def failure_rows(case: CaseRow, labels: Sequence[str]) -> list[str]:
    out = []
    for label, f in zip(labels, case.failures, strict=True):
        if f is not None:
            size = ", ".join(f"{k}={v}" for k, v in f.size.items()) or "no size recorded"
            out.append(f"{label}: {f.kind} at {size}: {f.message.splitlines()[0] if f.message else ''}")
    return out


def startup_rows(case: CaseRow) -> Rows:
    phases = list(dict.fromkeys(p for s in case.startup for p in s))
    return [[p, *(number(s.get(p), "s") if p in s else "-" for s in case.startup)] for p in phases]


def cost_rows(costs: Sequence[MeasuredCost], labels: Sequence[str]) -> Rows:
    rows = []
    for label, c in zip(labels, costs, strict=True):
        w = c.work
        band = f" ({duration(w.work_low_s)}–{duration(w.work_high_s)})" if w.work_low_s and w.work_high_s else ""
        total_band = f" ({usd(c.low_usd)}–{usd(c.high_usd)})" if c.low_usd is not None else ""
        units = "; ".join(f"{_unit_label(k)} {usd(v)}" for k, v in c.unit_costs_usd.items() if k != "usd_per_job")
        observed = f"{c.observed_at}{' (stale)' if c.stale else ''}{' EXAMPLE' if c.example else ''}"
        rows.append([label, f"{c.offer_id} ({c.provider}, {c.tier}, {c.gpu_count}× {c.gpu_sku})",
                     f"{duration(w.work_s)}{band}", duration(c.cost.billed_s), f"{usd(c.total_usd)}{total_band}",
                     usd(c.total_p95_usd), units, observed, w.formula])
    return rows


COST_HEADER = ["", "offer", "work time (95% CI)", "billed", "total USD (range)", "P95", "per unit", "price date",
               "basis"]


def _unit_label(key: str) -> str:
    return {"usd_per_epoch": "/epoch", "usd_per_1m_train_tokens": "/1M tok", "usd_per_1m_output_tokens": "/1M out",
            "usd_per_request": "/req", "usd_per_1000_images": "/1000 img"}.get(key, key)


def rate_text(rates: Sequence[ExchangeRate]) -> str:
    return "Exchange rates used: " + ", ".join(
        f"1 {r.currency} = {r.usd_per_unit:g} USD ({r.source}, {r.observed_at})" for r in rates)


def fairness_headline(c: Comparison) -> str:
    f = c.fairness
    if f.fair:
        return (f"All {f.checked} fixed variables match (model config, data, seed, precision, device, warm-up, "
                "repeats, settings, the job as run, library versions).")
    return (f"NOT A FAIR COMPARISON: {len(f.differences)} fixed variable(s) differ; compared anyway because of "
            "--allow-diff. Treat every ratio below with suspicion.")


# ---------------------------------------------------------------- Markdown ------------------

def md_table(header: Sequence[str], rows: Rows) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                    notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = ()) -> str:
    labels = [m.label for m in c.machines]
    out = [f"# gpuscout compare: {c.job_name} ({c.kind})", "",
           md_table(["", "result", "machine"], [[machine_name(m), m.name, m.gpu] for m in c.machines]), "",
           "## Fairness", ""]
    headline = fairness_headline(c)
    out += [f"**{headline}**" if c.fairness.fair else f"> **⚠ {headline}**", ""]
    if c.fairness.differences:
        out += [md_table(["fixed variable", *labels], difference_rows(c.fairness.differences)), ""]
    if c.fairness.machine_differences:
        out += ["What is being compared (machine; listed, not flagged):", "",
                md_table(["machine", *labels], difference_rows(c.fairness.machine_differences)), ""]
    out += [f"- {n}" for n in c.fairness.notes] + ([""] if c.fairness.notes else [])
    out += ["## Side by side", "", RATIO_NOTE, ""]
    for case in c.cases:
        out += _md_case(case, labels)
    if c.unmatched_cases:
        out += ["Cases not in every result: " + "; ".join(
            f"`{n}` (only {', '.join(ls)})" for n, ls in c.unmatched_cases.items()), ""]
    if costs:
        out += ["## Cost of the whole job (from the measured throughput)", "",
                md_table(COST_HEADER, cost_rows(costs, labels)), ""]
        out += [f"- {w}" for c_ in costs for w in c_.warnings]
        out += [f"- {n}" for n in notes] + ([f"- {rate_text(rates)}"] if rates else []) + [""]
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

def rich_table(title: str, header: Sequence[str], rows: Rows, caption: str | None = None) -> Table:
    table = Table(title=title, caption=caption, title_justify="left")
    for col in header:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # plain text: "[s, lower is better]" is not markup
    return table


def render_table(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                 notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = ()) -> RenderableType:
    labels = [m.label for m in c.machines]
    parts: list[RenderableType] = [
        rich_table(f"{c.job_name} ({c.kind}): results compared", ["", "result", "machine"],
                   [[machine_name(m), m.name, m.gpu] for m in c.machines]),
        Text(fairness_headline(c), style="green" if c.fairness.fair else "bold red")]
    if c.fairness.differences:
        parts.append(rich_table("Fixed variables that differ", ["fixed variable", *labels],
                                difference_rows(c.fairness.differences)))
    if c.fairness.machine_differences:
        parts.append(rich_table("What is being compared (listed, not flagged)", ["machine", *labels],
                                difference_rows(c.fairness.machine_differences)))
    parts += [Text(f"note: {n}", style="yellow") for n in c.fairness.notes]
    for case in c.cases:
        parts += _rich_case(case, labels)
    if c.unmatched_cases:
        parts.append(Text("Cases not in every result: " + "; ".join(
            f"{n} (only {', '.join(ls)})" for n, ls in c.unmatched_cases.items()), style="yellow"))
    if costs:
        parts.append(rich_table("Cost of the whole job, from the measured throughput (USD)", COST_HEADER,
                                cost_rows(costs, labels)))
        parts += [Text(f"warning: {w}", style="yellow") for c_ in costs for w in c_.warnings]
        parts += [Text(f"warning: {n}", style="yellow") for n in notes]
        parts += [Text(rate_text(rates))] if rates else []
    parts.append(Text("Verdict: " + verdict.text, style="bold"))
    return Group(*parts)


def _rich_case(case: CaseRow, labels: Sequence[str]) -> list[RenderableType]:
    title = f"Case {case.name}" + (f" ({params_text(case)})" if case.params else "")
    header = ["metric", *labels, *(f"{lab} vs {labels[0]}" for lab in labels[1:])]
    rows = metric_rows(case)
    if any(m.peak_bytes is not None for m in case.memory):
        rows.append(["peak memory", *(memory_text(m) for m in case.memory), *([""] * (len(labels) - 1))])
    rows += [[f"startup: {r[0]}", *r[1:], *([""] * (len(labels) - 1))] for r in startup_rows(case)]
    parts: list[RenderableType] = [rich_table(title, header, rows, caption=RATIO_NOTE)]
    parts += [Text(f"failure {f}", style="red") for f in failure_rows(case, labels)]
    return parts


# ---------------------------------------------------------------- JSON ----------------------

def render_json(c: Comparison, verdict: Verdict, costs: Sequence[MeasuredCost] = (), *,
                notes: Sequence[str] = (), rates: Sequence[ExchangeRate] = ()) -> str:
    payload = {"comparison": c.model_dump(mode="json"), "costs": [x.model_dump(mode="json") for x in costs],
               "verdict": verdict.model_dump(mode="json"), "warnings": list(notes),
               "exchange_rates": [r.model_dump(mode="json") for r in rates], "ratio_note": RATIO_NOTE}
    return json.dumps(payload, indent=2)
