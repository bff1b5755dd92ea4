"""`gpuscout probe`: network round trips, transfer speed and reconnect time as a table."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.loadgen.probe import ProbeMeasure, ProbeResult
from gpuscout.report.numbers import value_in


def probe_table(result: ProbeResult) -> RenderableType:
    table = Table(title=f"probe {result.url} ({result.repeats} repeats)")
    for column in ("measure", "n", "P50", "P95", "mean", "errors"):
        table.add_column(column, justify="left" if column in ("measure", "errors") else "right")
    notes = []
    for m in result.measures:
        cells = [_fmt(m, v) for v in (m.summary.p50, m.summary.p95, m.summary.mean)] if m.summary else ["–"] * 3
        table.add_row(m.name, str(len(m.samples)), *cells, f"{len(m.errors)}: {m.errors[0]}" if m.errors else "")
        if m.note:
            notes.append(f"{m.name}: {m.note}")
    return Group(table, *(Text(note, style="dim") for note in notes))


def _fmt(measure: ProbeMeasure, value: float) -> str:
    return value_in(value, measure.unit)
