"""The words and figures of `compare`, shared by its Markdown report and its rich tables.

Markdown carries every detail in one line per cell; the rich tables take the short forms
(`value`, `ratio_lines`) and put the long ones in `--wide` or in footnotes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscout.cost.measured import MeasuredCost
from gpuscout.hardware.currency import USD, DisplayCurrency, from_usd
from gpuscout.report.numbers import (
    duration,
    duration_band,
    gib,
    percent,
    ratio,
    ratio_band,
    seconds,
    value_in,
)
from gpuscout.report.pick import shown_money, unit_costs
from gpuscout.results.compare import CaseRow, Comparison, Machine, MemoryCell, MetricRow, Stat
from gpuscout.results.fairness import Difference
from gpuscout.results.ratios import CompareOptions, Ratio

Rows = list[list[str]]


def cost_header(shown: DisplayCurrency = USD) -> list[str]:
    """The Markdown cost table's header, naming the currency its amounts are in."""
    return ["", "offer", "work time (95% CI)", "billed", f"total {shown.code} (range)", "P95", "per unit",
            "price date", "basis"]


def cost_in_currency(c: MeasuredCost, shown: DisplayCurrency) -> dict[str, Any]:
    """For JSON: the measured cost's USD amounts in the display currency."""
    def conv(usd: float | None) -> float | None:
        return None if usd is None else from_usd(usd, shown)

    return {"currency": shown.code, "total": conv(c.total_usd), "total_p95": conv(c.total_p95_usd),
            "low": conv(c.low_usd), "high": conv(c.high_usd),
            "unit_costs": {k.removeprefix("usd_"): from_usd(v, shown) for k, v in c.unit_costs_usd.items()}}


def ratio_note(options: CompareOptions) -> str:
    """What a ratio cell means and when it counts, with the thresholds this comparison used."""
    return ("Ratios: how many times better than A (above 1 = better; for times and latencies A's value / this "
            "value), with a 95% CI from a seeded two-level bootstrap (runs, then the samples within each run), "
            "at least Student's t interval over the run means when both sides ran twice or more. "
            "'same': the CI includes 1.0, or the effect or the CI's end nearest 1.0 is below the minimum effect of "
            f"{options.min_effect:.0%}; 'floor': a side ran once and the effect is below the noise floor of "
            f"{options.noise_floor:.0%}; 'noisy': a side's run means vary by more than {options.noisy_cv:.0%} "
            f"or its repeats spread by more than {options.noisy_spread:.0%}.")


def value(v: float | None, unit: str = "") -> str:
    """A measured value in its metric's unit, through the one number formatter; '-' when missing."""
    return "-" if v is None else value_in(v, unit)


def percentiles(s: Stat, unit: str) -> str:
    """'P50 512 ms, P95 517 ms, n=8' and, over several runs, ', 3 runs, run CV 2%' ('' for a single reading)."""
    if s.p50 is None or s.p95 is None:
        return ""
    return f"P50 {value(s.p50, unit)}, P95 {value(s.p95, unit)}, n={s.n}{runs_text(s, ', ')}"


def runs_text(s: Stat, sep: str) -> str:
    """'3 runs, run CV 2%' after `sep`; '' for one run."""
    if s.runs < 2:
        return ""
    cv = f"{sep}run CV {percent(s.between_run_cv, 1)}" if s.between_run_cv is not None else ""
    return f"{sep}{s.runs} runs{cv}"


def stat_cell(s: Stat, unit: str) -> str:
    more = percentiles(s, unit)
    return f"{value(s.mean, unit)} ({more})" if more else value(s.mean, unit)


def ratio_word(r: Ratio) -> str:
    """"better", "worse", or what kept the difference from counting (no measurable difference, noisy …)."""
    return r.finding


def ratio_cell(r: Ratio) -> str:
    if r.finding == "baseline":
        return "baseline"
    if r.ci95_low is None or r.ci95_high is None:
        return f"{ratio(r.advantage)} ({r.reason or 'single reading, no CI'})"
    return f"{ratio(r.advantage)} {ratio_word(r)} (95% CI {ratio_band(r.ci95_low, r.ci95_high)})"


def ratio_lines(r: Ratio) -> str:
    """The ratio over its CI, for a narrow column: "2.00× better" over "CI 1.99–2.01×"."""
    if r.finding == "baseline":
        return "baseline"
    if r.ci95_low is None or r.ci95_high is None:
        return f"{ratio(r.advantage)}\nsingle reading"
    word = {"better": "better", "worse": "worse", "noisy": "noisy", "below the noise floor": "floor"}.get(
        r.finding, "same")
    return f"{ratio(r.advantage)} {word}\nCI {ratio_band(r.ci95_low, r.ci95_high)}"


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


def direction(row: MetricRow) -> str:
    return f"{'higher' if row.higher_is_better else 'lower'} is better"


def params_text(case: CaseRow) -> str:
    return ", ".join(f"{k}={v}" for k, v in case.params.items())


def machine_name(m: Machine) -> str:
    return f"{m.label}{' (baseline)' if m.label == 'A' else ''}"


def machine_rows(c: Comparison) -> Rows:
    """Label, result name, machine and how many independent runs stand behind its figures."""
    return [[machine_name(m), m.name, m.gpu, str(m.runs)] for m in c.machines]


MACHINE_HEADER = ["", "result", "machine", "runs"]


def telemetry_lines(c: Comparison) -> list[str]:
    """What the telemetry saw that makes a side's timings incomparable, or that it saw nothing."""
    if any(m.disturbances for m in c.machines):
        return [f"{m.label}: {line}" for m in c.machines for line in m.disturbances]
    unrecorded = [m.label for m in c.machines if not m.telemetry_runs]
    if len(unrecorded) == len(c.machines):
        return ["Telemetry: not recorded in these results, so throttling or other tenants cannot be ruled out."]
    seen = "no throttling, degraded link, shared GPU or CPU contention on any side"
    if unrecorded:
        return [f"Telemetry: {seen} that recorded it; {', '.join(unrecorded)} recorded none."]
    return [f"Telemetry: {seen}."]


def difference_rows(diffs: Sequence[Difference]) -> Rows:
    return [[d.field, *d.values] for d in diffs]


def metric_rows(case: CaseRow) -> Rows:
    """Markdown rows: every statistic and every ratio with its CI, one line per cell."""
    rows = []
    for row in case.metrics:
        cells = [stat_cell(s, row.unit) for s in row.stats]
        ratios = [ratio_cell(r) for r in row.ratios[1:]]
        rows.append([f"{metric_name(row)} [{row.unit}, {direction(row)}]", *cells, *ratios])
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
    return [[p, *(seconds(s[p]) if p in s else "-" for s in case.startup)] for p in phases]


def work_band(c: MeasuredCost) -> str:
    w = c.work
    return duration_band(w.work_low_s, w.work_high_s) if w.work_low_s and w.work_high_s else ""


def total_band(c: MeasuredCost, shown: DisplayCurrency = USD) -> str:
    return f"{shown_money(c.low_usd, shown)}–{shown_money(c.high_usd, shown)}" if c.low_usd is not None else ""


def observed(c: MeasuredCost) -> str:
    return f"{c.observed_at}{' (stale)' if c.stale else ''}{' EXAMPLE' if c.example else ''}"


def offer_text(c: MeasuredCost) -> str:
    return f"{c.offer_id} ({c.provider}, {c.tier}, {c.gpu_count}× {c.gpu_sku})"


def cost_rows(costs: Sequence[MeasuredCost], labels: Sequence[str], shown: DisplayCurrency = USD) -> Rows:
    """Markdown rows of the cost table, every detail in its cell."""
    rows = []
    for label, c in zip(labels, costs, strict=True):
        band, total = work_band(c), total_band(c, shown)
        rows.append([label, offer_text(c), duration(c.work.work_s) + (f" ({band})" if band else ""),
                     duration(c.cost.billed_s), shown_money(c.total_usd, shown) + (f" ({total})" if total else ""),
                     shown_money(c.total_p95_usd, shown), unit_costs(c.unit_costs_usd, shown), observed(c),
                     c.work.formula])
    return rows


def retry_lines(costs: Sequence[MeasuredCost], labels: Sequence[str]) -> list[str]:
    """'B: 1 of 3 runs failed (out of memory, crash or timeout): billed as 0.50 failed attempts per job'."""
    out = []
    for label, c in zip(labels, costs, strict=True):
        if c.failed_runs and c.failed_runs < c.runs:
            share = c.failed_runs / c.runs
            out.append(f"{label}: {c.failed_runs} of {c.runs} runs failed (out of memory, crash or timeout); "
                       f"billed as {share / (1 - share):.2f} failed attempts per job")
    return out


def fairness_headline(c: Comparison) -> str:
    f = c.fairness
    if f.fair:
        return (f"All {f.checked} fixed variables match (model config and checkpoint, data, seed, precision, "
                "device, warm-up, repeats, settings, the job as run, library, driver and CUDA versions, region, "
                "billing).")
    return (f"NOT A FAIR COMPARISON: {len(f.differences)} fixed variable(s) differ; compared anyway because of "
            "--allow-diff. Treat every ratio below with suspicion.")


def md_table(header: Sequence[str], rows: Rows) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
