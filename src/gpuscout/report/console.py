"""Console rendering with rich. Pure: takes results, returns renderables. Units converted here only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.screen import GpuVerdict, Screening
from gpuscout.estimator.speed import SpeedEstimate
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.shape import ModelShape

GIB = 1024**3


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.2f} GiB"


def count(n: int) -> str:
    """12,345,678,901 → '12.35 B'."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return str(n)


def gpu_table(gpus: Sequence[Gpu]) -> Table:
    table = Table(title="GPU catalog (dense peaks; sources in gpus.toml)")
    for col in ("SKU", "name", "memory", "visible", "bandwidth", "bf16", "fp8", "interconnect", "verify"):
        table.add_column(col, overflow="fold")
    for g in gpus:
        table.add_row(
            g.sku, g.name, f"{g.memory_bytes / 1e9:.0f} GB",
            gib(g.memory_visible_bytes) if g.memory_visible_bytes else "-",
            f"{g.memory_bandwidth_bytes_per_s / 1e12:.2f} TB/s", _tflops(g.bf16_flops_per_s),
            _tflops(g.fp8_flops_per_s), g.interconnect, ", ".join(g.verify) or "",
        )
    return table


def _tflops(value: float | None) -> str:
    return f"{value / 1e12:,.1f} TF" if value else "—"


def model_table(shape: ModelShape) -> Table:
    table = Table(title=f"{shape.name} ({shape.family})", show_header=False)
    table.add_column("field")
    table.add_column("value")
    experts = f"{shape.num_experts} (top-{shape.experts_per_token})" if shape.num_experts else "-"
    expert_width = f" (experts {shape.moe_intermediate_size})" if shape.num_experts else ""
    rows = [
        ("source", shape.source),
        ("layers / hidden", f"{shape.num_layers} / {shape.hidden_size}"),
        ("heads / KV heads / head_dim", f"{shape.num_attention_heads} / {shape.num_kv_heads} / {shape.head_dim}"),
        ("FFN width", f"{shape.intermediate_size}{expert_width}"),
        ("experts", experts),
        ("vocab / tied embeddings", f"{shape.vocab_size:,} / {shape.tie_word_embeddings}"),
        ("max context", f"{shape.max_position_embeddings:,}"),
        ("params total / active", f"{shape.params_total:,} / {shape.params_active:,}"),
        ("attention layers", ", ".join(f"{a.count}× {a.kind}" + (f" (window {a.window})" if a.window else "")
                                       for a in shape.attention)),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def weights_table(weight_bytes: Mapping[str, int], kv_per_token: Mapping[str, int]) -> Table:
    table = Table(title="Weights and KV cache")
    table.add_column("format")
    table.add_column("weights", justify="right")
    table.add_column("KV cache per token", justify="right")
    for fmt, nbytes in weight_bytes.items():
        kv = kv_per_token.get(fmt)
        table.add_row(fmt, gib(nbytes), f"{kv:,} B" if kv is not None else "-")
    return table


def image_model_table(model: ImageModelShape) -> Table:
    table = Table(title=f"{model.name} ({model.family}, {model.denoiser_kind})")
    for col in ("component", "class", "params", "default dtype"):
        table.add_column(col)
    for c in model.components:
        table.add_row(c.name, c.class_name, f"{c.params:,}", c.default_dtype)
    table.add_row("total", "", f"{model.params_total:,}", "")
    return table


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


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


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
