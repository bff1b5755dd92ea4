"""The GPU catalog as a table (`gpuscout gpus`).

Figures in columns with their units in the headers; each GPU's name, interconnect and open
verification marks are a footnote, so the table stays one line per GPU at 80 columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table

from gpuscout.hardware.catalog import Gpu
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column
from gpuscout.report.numbers import GIB, sig


def gpu_table(gpus: Sequence[Gpu]) -> RenderableType:
    notes = Footnotes()
    table = Table(title="GPU catalog (dense peaks; sources in gpus.toml)")
    label_column(table, "SKU")
    for header in ("memory\nGB", "visible\nGiB", "bandwidth\nTB/s", "bf16\nTFLOP/s", "fp8\nTFLOP/s"):
        number_column(table, header)
    label_column(table, "")
    for g in gpus:
        table.add_row(
            g.sku, sig(g.memory_bytes / 1e9, 2), sig(g.memory_visible_bytes / GIB) if g.memory_visible_bytes else "-",
            sig(g.memory_bandwidth_bytes_per_s / 1e12), _tflops(g.bf16_flops_per_s), _tflops(g.fp8_flops_per_s),
            notes.ref(_about(g)))
    return Group(table, notes.flush())


def _about(g: Gpu) -> str:
    """The footnote of one GPU: its name, interconnect, its fp16 rate where it has no bf16, and what is
    still to verify. Volta and Turing run fp16 but not bf16 on tensor cores; without the note the
    table's "—" would hide a usable rate."""
    fp16 = (f"; no bf16, fp16 {_tflops(g.fp16_flops_per_s)} TFLOP/s"
            if g.bf16_flops_per_s is None and g.fp16_flops_per_s else "")
    verify = f"; verify: {', '.join(g.verify)}" if g.verify else ""
    return f"{g.name}: {g.interconnect}{fp16}{verify}"


def _tflops(value: float | None) -> str:
    return sig(value / 1e12) if value else "—"
