"""`gpuscout estimate`: the screening table (one line per GPU), each named GPU's detail, the trace beside.

At 80 columns the table keeps what a decision needs (memory, fit, job time, the cheapest fix,
cut to the width left, with the whole fix as a footnote); a GPU the job does not fit shows no job
time (nothing would run); `--wide` adds the largest sizes that
fit, the runtime band and the bound. The detail of one GPU is in `report/estimate_detail.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.calibration import Calibration
from gpuscout.estimator.margin import NO_FIT, TIGHT
from gpuscout.estimator.screen import GpuVerdict, Screening
from gpuscout.estimator.serving.replica import ReplicaCapacity
from gpuscout.report.calibration import calibration_block
from gpuscout.report.compat import Span, finding_text, spans
from gpuscout.report.estimate_detail import band_words, verdict_detail
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, one_line, plain, prose_column
from gpuscout.report.machine import host_table
from gpuscout.report.numbers import duration, duration_band, exact, gib_number, ratio, size
from gpuscout.report.serving_verdict import capacity_line
from gpuscout.trace.llm import TraceResult

CAPTION = "GiB = 2^30 bytes; usable = what the GPU shows (nvidia-smi total where known)"
LIMITS_CAPTION = "max: the largest that fits with the error band's headroom (unguarded in brackets)"


def screening_table(screening: Screening, notes: Footnotes, *, wide: bool = False) -> RenderableType:
    """One row per GPU: memory, fit, job time and the cheapest fix; `wide` adds limits, band and bound.

    The title and caption are lines of their own, wrapped at the terminal's width, not the table's.
    """
    kind = f"{screening.job_kind}, {screening.framework}" if screening.framework else screening.job_kind
    title = f"{screening.job_name} — {screening.model_name} ({kind}): memory and speed per GPU"
    table = Table()
    limit_names = list(screening.verdicts[0].limits.values) if wide and screening.verdicts else []
    with_fix = any(not v.fits or v.plan for v in screening.verdicts)
    label_column(table, "GPU")
    for header in ("usable\nGiB", "peak\nGiB", "headroom\nGiB"):
        number_column(table, header)
    label_column(table, "fits")
    for name in limit_names:
        number_column(table, f"max\n{name}")
    number_column(table, "job time (band)" if wide else "job time")
    if wide:
        label_column(table, "bound")
    if with_fix:
        prose_column(table, "cheapest fix")
    # A finding's slowdown differs per GPU: one footnote gives its range over the screen's GPUs.
    ranges = spans(f for v in screening.verdicts for f in v.compat)
    for v in screening.verdicts:
        table.add_row(*_cells(v, limit_names, notes, wide=wide, with_fix=with_fix, ranges=ranges))
    limits_note = [Text(LIMITS_CAPTION, style="dim")] if limit_names else []
    return Group(Text(title, style="bold"), table, Text(CAPTION, style="dim"), *limits_note, *tight_note(screening))


def tight_note(screening: Screening) -> list[Text]:
    """One line under the table when a GPU is *tight*: what the band is and where it comes from."""
    tight = [v for v in screening.verdicts if v.fit_verdict == TIGHT]
    if not tight:
        return []
    band = tight[0].band
    return [Text(band_words(band), style="yellow")] if band is not None else []


def _cells(v: GpuVerdict, limit_names: list[str], notes: Footnotes, *, wide: bool,
           with_fix: bool, ranges: Mapping[tuple[str, str], Span] | None = None) -> list[str | Text]:
    cells: list[str | Text] = [v.gpu_sku, gib_number(v.breakdown.usable_bytes), gib_number(v.breakdown.peak_bytes),
                               Text(gib_number(v.headroom_bytes), style="green" if v.fits else "red"), _fit_mark(v)]
    cells += [_limit_cell(v, n) for n in limit_names]
    # No speed at all (bf16 on a V100, a multi-GPU job on a GH200): the reason is a footnote; so is a
    # compatibility finding on a GPU that runs the job (no P2P: a slower time).
    runs = [notes.ref(finding_text(f, span=(ranges or {}).get((f.rule, f.reason))))  # slower, or runs if …
            for f in v.compat if f.outcome != "excluded"]
    cells.append(" ".join([*runs, f"{notes.ref(v.speed_note)} -" if v.speed is None and v.speed_note
                           else _job_time(v, wide=wide)]))
    if wide:
        cells.append(v.speed.bound if v.speed else "-")
    if with_fix:
        cells.append(_fix_cell(v, notes))
    return cells


def _limit_cell(v: GpuVerdict, name: str) -> str:
    """The largest size with the error band's headroom, and the unguarded one beside it when larger."""
    unguarded = v.limits.values[name]
    guarded = v.limits.guarded.get(name, unguarded)
    if guarded == unguarded:
        return limit_value(unguarded)
    return f"{limit_value(guarded)} ({limit_value(unguarded)})"


def limit_value(value: int) -> str:
    """A largest size that fits; 0 means not even 1 fits."""
    return exact(value) if value > 0 else "none"


def _job_time(v: GpuVerdict, *, wide: bool) -> str:
    if v.speed is None or not v.fits:  # as written it does not run here, so it has no job time
        return "-"
    s = v.speed
    return f"{duration(s.job_s)} ({duration_band(s.job_low_s, s.job_high_s)})" if wide else duration(s.job_s)


def _fit_mark(v: GpuVerdict) -> Text:
    if v.fit_verdict == NO_FIT or not v.fits:
        return Text("no", style="bold red")
    return Text("tight", style="bold yellow") if v.fit_verdict == TIGHT else Text("yes", style="bold green")


def _fix_cell(v: GpuVerdict, notes: Footnotes) -> Text:
    """The fix's spec edits on one line, cut to the room left; the whole fix is a footnote."""
    edits, how = _cheapest_fix(v)
    if not edits:
        return plain(edits)
    return one_line(f"{notes.ref(f'{edits}: {how}' if how else edits)} {edits}")


def _cheapest_fix(v: GpuVerdict) -> tuple[str, str]:
    """The job-spec edits that make the job fit, and the same in words ('' when it fits)."""
    if v.fits and not v.plan:  # fits, or tight with no plan that leaves margin
        return "", ""
    if v.plan:
        changes = "" if all(s.keeps_task for s in v.plan) else " (changes the task)"
        return ", ".join(_edits(s.spec_change) for s in v.plan), ", then ".join(s.change for s in v.plan) + changes
    if not v.suggestions:
        return "no single-GPU plan found", ""
    return _edits(v.suggestions[-1].spec_change), v.suggestions[-1].change


def _edits(spec_change: Mapping[str, object]) -> str:
    """A suggestion as the job-spec edits that make it: 'micro_batch=1 grad_accum=16'."""
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in spec_change.items())


def trace_table(analytic: MemoryBreakdown, traced: Mapping[str, int], traced_total: int) -> Table:
    """Analytic categories beside a FakeTensor trace; GPU-only overheads are analytic, and labelled.

    Traced category figures are each category's own maximum over the step; the analytic ones are
    the sums of their terms. Compare totals on the "allocated peak" row.
    """
    table = Table(title="Analytic estimate vs traced real model step (FakeTensorMode + MemTracker)")
    prose_column(table, "category")
    for col in ("analytic", "traced", "analytic\n/ traced"):
        number_column(table, col)
    ours = bytes_by_category(analytic)
    ours["activations"] = ours.get("activations", 0) + ours.pop("kv_cache", 0)  # the trace counts KV there
    overhead = ours.pop("overhead", 0)
    for cat in ("weights", "gradients", "optimizer_states", "activations", "temporaries"):
        a, t = ours.get(cat, 0), traced.get(cat, 0)
        table.add_row(cat, size(a), size(t), ratio(a / t) if t else "-")
    allocated = analytic.peak_bytes - overhead
    table.add_row(Text("allocated peak", style="bold"), size(allocated), size(traced_total),
                  ratio(allocated / traced_total) if traced_total else "-")
    table.add_row("GPU-only overheads (analytic only)", size(overhead), size(overhead), "")
    table.add_row(Text("peak on the GPU", style="bold"), size(analytic.peak_bytes), size(traced_total + overhead), "")
    return table


def estimate_screen(screening: Screening, *, detailed: bool, wide: bool = False, trace: TraceResult | None = None,
                    trace_analytic: MemoryBreakdown | None = None, trace_scope: str | None = None,
                    trace_skipped: str | None = None, calibration: Calibration | None = None,
                    capacities: Sequence[tuple[str, ReplicaCapacity | str]] = ()) -> RenderableType:
    """The screening table (with a line per GPU whose speed is calibrated); every named GPU's detail
    (a serving job's with what one replica holds, simulated); the trace beside the analytic estimate."""
    notes = Footnotes()
    parts: list[RenderableType] = [screening_table(screening, notes, wide=wide), notes.flush(),
                                   *calibration_block(calibration, (v.gpu_sku for v in screening.verdicts))]
    if detailed:
        held = dict(capacities)
        for v in screening.verdicts:
            parts.append(verdict_detail(v, notes, wide=wide))
            if v.gpu_sku in held:
                parts.append(capacity_line(v.gpu_sku, held[v.gpu_sku]))
        if screening.host is not None:
            parts.append(host_table(screening.host, notes))
    else:
        more = "" if wide else "; largest sizes that fit, runtime band and bound: --wide"
        parts.append(Text(f"Detail for one GPU: gpuscout estimate JOB.toml --gpu h100{more}", style="dim"))
    if trace_skipped is not None:
        parts.append(Text(f"Trace skipped: {trace_skipped}", style="yellow"))
    if trace is not None and trace_analytic is not None:
        parts += [Text(f"Compared as traced: {trace_scope}.", style="bold"),
                  trace_table(trace_analytic, trace_categories(trace.peak_bytes), trace.peak_total_bytes),
                  Text("\n".join(trace.notes), style="dim")]
    return Group(*parts)


def trace_categories(peaks: Mapping[str, int]) -> dict[str, int]:
    """MemTracker's categories in the estimator's names (parameters + buffers are weights)."""
    names = {"parameters": "weights", "buffers": "weights", "other": "temporaries"}
    out: dict[str, int] = {}
    for cat, value in peaks.items():
        out[names.get(cat, cat)] = out.get(names.get(cat, cat), 0) + value
    return out
