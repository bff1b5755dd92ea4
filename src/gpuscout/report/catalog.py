"""The GPU catalog as a table (`gpuscout gpus`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from gpuscout.hardware.catalog import Gpu
from gpuscout.report.numbers import gib


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
