"""`gpuscout estimate`: the screening table, one GPU's breakdown, fixes and speed, and the trace beside."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.screen import GpuVerdict, Screening
from gpuscout.estimator.speed import SpeedEstimate
from gpuscout.report.numbers import GIB, duration, gib
from gpuscout.trace.llm import TraceResult


def screening_table(screening: Screening) -> Table:
    """One row per GPU: does it fit, how much is left, the limits, and the first fix."""
    title = f"{screening.job_name} — {screening.model_name} ({screening.job_kind}): memory and speed per GPU"
    table = Table(title=title,
                  caption="GiB = 2^30 bytes; usable = what the GPU shows (nvidia-smi total where known)")
    limit_names = list(screening.verdicts[0].limits.values) if screening.verdicts else []
    columns = ("GPU", "usable GiB", "peak GiB", "headroom", "fits", *[f"max {n}" for n in limit_names],
               "job time (band)", "bound", "cheapest fix")
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=col == "GPU",
                         justify="left" if col in ("GPU", "cheapest fix", "job time (band)", "bound") else "right")
    for v in screening.verdicts:
        table.add_row(v.gpu_sku, _num(v.breakdown.usable_bytes), _num(v.breakdown.peak_bytes),
                      _headroom(v), _fit_mark(v), *[f"{v.limits.values[n]:,}" for n in limit_names],
                      _job_time(v), v.speed.bound if v.speed else "-", _first_fix(v))
    return table


def _job_time(v: GpuVerdict) -> str:
    if v.speed is None:
        return "-"
    s = v.speed
    return f"{duration(s.job_s)} ({duration(s.job_low_s)}–{duration(s.job_high_s)})"


def _num(nbytes: int) -> str:
    return f"{nbytes / GIB:,.1f}"


def _headroom(v: GpuVerdict) -> Text:
    return Text(_num(v.headroom_bytes), style="green" if v.fits else "red")


def _fit_mark(v: GpuVerdict) -> Text:
    return Text("yes", style="bold green") if v.fits else Text("no", style="bold red")


def _first_fix(v: GpuVerdict) -> str:
    if v.fits:
        return ""
    if v.plan:
        return ", ".join(_edits(s.spec_change) for s in v.plan)
    return "no single-GPU plan found" if not v.suggestions else _edits(v.suggestions[-1].spec_change)


def _edits(spec_change: Mapping[str, object]) -> str:
    """A suggestion as the job-spec edits that make it: 'micro_batch=1 grad_accum=16'."""
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in spec_change.items())


def breakdown_table(b: MemoryBreakdown, title: str) -> Table:
    table = Table(title=title)
    for col in ("term", "category", "GiB", "formula and source"):
        table.add_column(col, overflow="fold", justify="right" if col == "GiB" else "left")
    for t in b.terms:
        table.add_row(t.name, t.category, f"{t.bytes / GIB:,.2f}", t.formula)
    table.add_row(Text("peak", style="bold"), "", Text(f"{b.peak_bytes / GIB:,.2f}", style="bold"), "; ".join(b.notes))
    table.add_row("usable on this GPU", "", f"{b.usable_bytes / GIB:,.2f}",
                  Text("fits" if b.fits else "does NOT fit", style="green" if b.fits else "red"))
    return table


def verdict_detail(v: GpuVerdict) -> RenderableType:
    parts: list[RenderableType] = [breakdown_table(v.breakdown, f"{v.gpu_name}: memory breakdown per GPU")]
    if v.peak_by_gpu_count:
        parts.append(Text("Per-GPU peak by GPU count: " + ", ".join(
            f"{n} GPU{'s' if n > 1 else ''}: {gib(p)}" + (" ✓" if p <= v.breakdown.usable_bytes else " ✗")
            for n, p in v.peak_by_gpu_count.items())))
    if v.suggestions:
        parts.append(suggestion_table(v))
    if v.limits.values:
        parts.append(Text("Largest that fits: " + ", ".join(f"{k} = {val:,}" for k, val in v.limits.values.items())))
    if v.speed is not None:
        parts.append(speed_table(v.speed))
    return Group(*parts)


def speed_table(s: SpeedEstimate) -> RenderableType:
    """Each phase's roofline: FLOPs and bytes, the time each would take, and which bound wins."""
    table = Table(title=f"Speed on {s.gpus} × {s.gpu_sku}: job {duration(s.job_s)} "
                        f"(band {duration(s.job_low_s)}–{duration(s.job_high_s)}), {s.bound}-bound")
    for col in ("phase", "TFLOP", "GB moved", "compute s", "memory s", "comm s", "time s", "bound", "formula"):
        table.add_column(col, overflow="fold", justify="left" if col in ("phase", "bound", "formula") else "right")
    for p in s.phases:
        table.add_row(p.name, f"{p.flops / 1e12:,.3g}", f"{p.bytes / 1e9:,.3g}", f"{p.compute_s:.3g}",
                      f"{p.memory_s:.3g}", f"{p.comm_s:.3g}", f"{p.seconds:.3g}", p.bound, p.formula)
    eff = s.efficiency
    metrics = ", ".join(f"{k} = {v:,.4g}" for k, v in s.metrics.items())
    notes = Text(f"{metrics}\nefficiency: compute {eff.compute:g}, bandwidth {eff.bandwidth:g}, link {eff.link:g}, "
                 f"overlap {eff.overlap:g}, band ×{eff.band_low:g}–×{eff.band_high:g} ({eff.source})", style="dim")
    return Group(table, notes)


def suggestion_table(v: GpuVerdict) -> Table:
    table = Table(title="What to change (cheapest in speed first; each alone)")
    for col in ("change", "saves", "peak after", "fits alone", "cost in speed"):
        table.add_column(col, overflow="fold")
    for s in v.suggestions:
        table.add_row(s.change, gib(s.saves_bytes), gib(s.peak_bytes), "yes" if s.fits else "no", s.speed_cost)
    if v.plan:
        table.caption = "Combined plan that fits: " + " → ".join(s.change for s in v.plan)
    return table


def trace_table(analytic: MemoryBreakdown, traced: Mapping[str, int], traced_total: int) -> Table:
    """Analytic categories beside a FakeTensor trace; GPU-only overheads are analytic, and labelled.

    Traced category figures are each category's own maximum over the step; the analytic ones are
    the sums of their terms. Compare totals on the "allocated peak" row.
    """
    table = Table(title="Analytic estimate vs traced real model step (FakeTensorMode + MemTracker)")
    for col in ("category", "analytic", "traced", "analytic / traced"):
        table.add_column(col, justify="left" if col == "category" else "right")
    ours = bytes_by_category(analytic)
    ours["activations"] = ours.get("activations", 0) + ours.pop("kv_cache", 0)  # the trace counts KV there
    overhead = ours.pop("overhead", 0)
    for cat in ("weights", "gradients", "optimizer_states", "activations", "temporaries"):
        a, t = ours.get(cat, 0), traced.get(cat, 0)
        table.add_row(cat, gib(a), gib(t), f"{a / t:.2f}" if t else "-")
    allocated = analytic.peak_bytes - overhead
    table.add_row(Text("allocated peak", style="bold"), gib(allocated), gib(traced_total),
                  f"{allocated / traced_total:.2f}" if traced_total else "-")
    table.add_row("GPU-only overheads (analytic only)", gib(overhead), gib(overhead), "")
    table.add_row(Text("peak on the GPU", style="bold"), gib(analytic.peak_bytes), gib(traced_total + overhead), "")
    return table


def estimate_screen(screening: Screening, *, detailed: bool, wide: bool = False, trace: TraceResult | None = None,
                    trace_analytic: MemoryBreakdown | None = None, trace_scope: str | None = None,
                    trace_skipped: str | None = None) -> RenderableType:
    """The screening table; every named GPU's detail; the trace beside the analytic estimate."""
    parts: list[RenderableType] = [screening_table(screening)]
    if detailed:
        parts += [verdict_detail(v) for v in screening.verdicts]
    else:
        parts.append(Text("Detail for one GPU: gpuscout estimate JOB.toml --gpu h100", style="dim"))
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
