"""`gpuscout probe URL`: network round trip, transfer speed and reconnect time to an endpoint."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.loadgen.probe import DEFAULT_UPLOAD_BYTES, ProbeMeasure, ProbeResult, probe


def run_probe(url: str, *, repeats: int = 10, download_url: str | None = None, upload_url: str | None = None,
              as_json: bool = False, upload_bytes: int = DEFAULT_UPLOAD_BYTES,
              timeout_s: float = 10.0) -> tuple[dict[str, Any], RenderableType]:
    """Probe `url` and return the JSON payload and a console table (`as_json` needs no extra work:
    the caller prints the payload instead of the table)."""
    del as_json  # the payload and the table are both cheap; the caller picks one
    result = asyncio.run(probe(url, repeats=repeats, download_url=download_url, upload_url=upload_url,
                               upload_bytes=upload_bytes, timeout_s=timeout_s))
    return result.model_dump(mode="json"), probe_table(result)


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
    # Display-only unit conversion (docs/design.md §4: SI inside, converted for display).
    if measure.unit == "bytes/s":
        return f"{value / 1e6:.1f} MB/s"
    return f"{value * 1e3:.2f} ms"
