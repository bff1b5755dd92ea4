"""`gpuscout probe`: network round trips, transfer speed and reconnect time as a table.

Error messages and notes are footnotes, so each measure stays one line at 80 columns.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.loadgen.probe import ProbeMeasure, ProbeResult
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column
from gpuscout.report.numbers import value_in


def probe_table(result: ProbeResult) -> RenderableType:
    notes = Footnotes()
    table = Table(title=f"probe {result.url} ({result.repeats} repeats)")
    label_column(table, "measure")
    for column in ("n", "P50", "P95", "mean"):
        number_column(table, column)
    label_column(table, "errors")
    lines = []
    for m in result.measures:
        cells = [_fmt(m, v) for v in (m.summary.p50, m.summary.p95, m.summary.mean)] if m.summary else ["–"] * 3
        errors = f"{len(m.errors)} {notes.ref(f'{m.name}: {m.errors[0]}')}" if m.errors else ""
        table.add_row(m.name, str(len(m.samples)), *cells, errors)
        if m.note:
            lines.append(f"{m.name}: {m.note}")
    return Group(table, notes.flush(), *(Text(line, style="dim") for line in lines))


def _fmt(measure: ProbeMeasure, value: float) -> str:
    return value_in(value, measure.unit)
