"""One GPU in detail (`gpuscout estimate --gpu X`): the memory breakdown, what to change, the speed.

Every formula and source is a numbered footnote under its table, so the tables hold names and
figures only and stay legible at 80 columns; `--wide` adds the per-phase compute, memory and
communication times to the speed table.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.efficiency import Efficiency
from gpuscout.estimator.margin import TIGHT, Band
from gpuscout.estimator.screen import GpuVerdict
from gpuscout.estimator.speed.estimate import SpeedEstimate
from gpuscout.report.colocate import colocation_detail
from gpuscout.report.compat import compat_detail
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, prose_column
from gpuscout.report.numbers import (
    duration,
    duration_band,
    exact,
    gib,
    gib_number,
    percent,
    quantity,
    ratio,
    seconds,
    sig,
)


def verdict_detail(v: GpuVerdict, notes: Footnotes, *, wide: bool = False) -> RenderableType:
    """Breakdown, per-GPU peak by GPU count, what to change, largest sizes that fit, and the speed."""
    parts: list[RenderableType] = [breakdown_table(v.breakdown, f"{v.gpu_name}: memory breakdown per GPU", notes,
                                                   v.fit_verdict), notes.flush()]
    if v.peak_by_gpu_count:
        parts.append(Text("Per-GPU peak by GPU count: " + ", ".join(
            f"{n} GPU{'s' if n > 1 else ''}: {gib(p)}" + (" ✓" if p <= v.breakdown.usable_bytes else " ✗")
            for n, p in v.peak_by_gpu_count.items())))
    if v.suggestions:
        parts.append(suggestion_table(v))
    elif v.plan and v.fits:  # tight: the plan that leaves the band's headroom
        parts.append(Text("Plan that leaves the band's headroom (keeps the task): "
                          + " → ".join(s.change for s in v.plan), style="yellow"))
    if v.band is not None and v.fits:
        parts.append(Text(band_words(v.band) if v.fit_verdict == TIGHT else
                          f"fits with margin: the headroom covers the error band ({v.band.basis.split(':')[0]}; "
                          "docs/estimator.md §2.15).",
                          style="yellow" if v.fit_verdict == TIGHT else "green"))
    if v.limits.guarded:
        parts.append(Text(f"Largest that fits with the band's headroom: {limits_text(v.limits.guarded)}"))
        parts.append(Text(f"Largest that fits, unguarded: {limits_text(v.limits.values)}", style="dim"))
    elif v.limits.values:
        parts.append(Text(f"Largest that fits: {limits_text(v.limits.values)}"))
    if v.colocation is not None:
        parts.append(colocation_detail(v.colocation))
    if v.speed is not None and v.fits:
        parts.append(speed_table(v.speed, notes, wide=wide))
    elif v.speed is not None:
        parts.append(Text("Speed: no job time, it does not fit as written; apply a plan above and estimate again.",
                          style="dim"))
    elif v.speed_note:
        parts.append(Text(f"Speed: {v.speed_note}", style="yellow"))
    parts += compat_detail(v.compat)
    return Group(*parts)


def band_words(band: Band) -> str:
    """Why a fit is *tight*, in one sentence."""
    if band.override:
        return f"tight: the headroom is under {band.basis}, of the estimated peak."
    return (f"tight: the headroom is inside the estimator's error band, {band.basis} "
            "(docs/estimator.md §2.15); a larger GPU or a plan leaves margin, --margin PCT overrides.")


def limits_text(values: dict[str, int]) -> str:
    """'micro_batch = 6; seq_len = 9,216'; a knob at which nothing fits says so."""
    return "; ".join(f"{k} = {exact(val)}" if val > 0 else f"{k}: nothing fits, even at 1" for k, val in values.items())


def breakdown_table(b: MemoryBreakdown, title: str, notes: Footnotes, fit_verdict: str | None = None) -> Table:
    """Term, category and GiB per line; each term's formula and source is a footnote."""
    table = Table(title=title)
    prose_column(table, "term")
    label_column(table, "category")
    number_column(table, "GiB")
    label_column(table, "")
    for t in b.terms:
        table.add_row(t.name, t.category, gib_number(t.bytes, 2), notes.ref(f"{t.name}: {t.formula}"))
    table.add_row(Text("peak", style="bold"), "", Text(gib_number(b.peak_bytes, 2), style="bold"),
                  notes.ref("; ".join(b.notes)) if b.notes else "")
    verdict = Text("fits" if b.fits else "does NOT fit", style="green" if b.fits else "red")
    if b.fits and fit_verdict == TIGHT:
        verdict = Text("tight", style="yellow")
    table.add_row("usable on this GPU", verdict, gib_number(b.usable_bytes, 2), "")
    return table


def suggestion_table(v: GpuVerdict) -> Table:
    """Each change alone; 'task' says whether it keeps what the job computes (only those go in a
    plan `pick` applies) or changes it (offered, never applied)."""
    table = Table(title="What to change (cheapest in speed first; each alone)")
    prose_column(table, "change")
    for header in ("saves\nGiB", "peak\nafter"):
        number_column(table, header)
    label_column(table, "fits\nalone")
    label_column(table, "task")
    prose_column(table, "cost in speed")
    for s in v.suggestions:
        table.add_row(s.change, gib_number(s.saves_bytes), gib_number(s.peak_bytes), "yes" if s.fits else "no",
                      "same" if s.keeps_task else Text("changes", style="yellow"), s.speed_cost)
    if v.plan:
        kind = "keeps the task" if all(s.keeps_task for s in v.plan) else "changes the task"
        table.caption = f"Combined plan that fits ({kind}): " + " → ".join(s.change for s in v.plan)
    return table


def speed_table(s: SpeedEstimate, notes: Footnotes, *, wide: bool = False) -> RenderableType:
    """Each phase's roofline time and bound (formulas as footnotes); `wide` adds the three times it is the max of."""
    head = Text(f"Speed on {s.gpus} × {s.gpu_sku}: job {duration(s.job_s)} "
                f"(band {duration_band(s.job_low_s, s.job_high_s)}), {s.bound}-bound", style="bold")
    table = Table()
    prose_column(table, "phase")
    number_column(table, "time")
    label_column(table, "bound")
    for header in ("TFLOP", "GB\nmoved", *(("compute", "memory", "comm") if wide else ())):
        number_column(table, header)
    label_column(table, "")
    for p in s.phases:
        times = (seconds(p.compute_s), seconds(p.memory_s), seconds(p.comm_s)) if wide else ()
        table.add_row(p.name, seconds(p.seconds), p.bound, sig(p.flops / 1e12), sig(p.bytes / 1e9), *times,
                      notes.ref(f"{p.name}: {p.formula}"))
    metrics = ", ".join(f"{k} = {quantity(k, v)}" for k, v in s.metrics.items())
    efficiency = efficiency_text(s.efficiency, notes.ref(s.efficiency.source))
    return Group(head, table, Text(f"{metrics}\n{efficiency}", style="dim"), notes.flush())


def efficiency_text(eff: Efficiency, ref: str) -> str:
    """The efficiency factors as fractions of the peaks, and the job-time band they imply."""
    return (f"efficiency {ref}: compute {percent(eff.compute)}, bandwidth {percent(eff.bandwidth)}, link "
            f"{percent(eff.link)}, overlap {percent(eff.overlap)}, band {ratio(eff.band_low)}–{ratio(eff.band_high)}")
