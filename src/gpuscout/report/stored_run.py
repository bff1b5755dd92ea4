"""`gpuscout results show`: one stored run, with the screen its command printed (bench, load, pick) or its checks."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.documents.kinds import CheckMetric, ChecksDoc, PickDoc, RunDoc
from gpuscout.documents.read import to_document
from gpuscout.report.bench import bench_screen
from gpuscout.report.layout import label_column, number_column, one_line, prose_column
from gpuscout.report.load import load_screen
from gpuscout.report.numbers import size, value_in
from gpuscout.report.pick import pick_screen
from gpuscout.results.database import StoredRun


def stored_run_screen(entry: StoredRun, payload: dict[str, Any]) -> RenderableType:
    """What is known of the run, then the screen its command printed (bench, load, pick), or its checks."""
    head = Text.assemble((f"run {entry.id}", "bold"), f" — {entry.kind}" + (
        f" ({entry.result_kind})" if entry.result_kind and entry.result_kind != entry.kind else ""))
    facts = Table.grid(padding=(0, 2))
    for key, value in (("made", f"{entry.created_at:%Y-%m-%d %H:%M:%S} UTC"),
                       ("recorded", f"{entry.recorded_at:%Y-%m-%d %H:%M:%S} UTC"), ("job", entry.job),
                       ("machine", entry.machine), ("name", entry.name), ("summary", entry.summary),
                       ("gpuscout", entry.gpuscout_version), ("stored", size(entry.payload_bytes) + " of JSON")):
        facts.add_row(Text(key, style="dim"), Text(value))
    return Group(head, facts, Text(""), _command_screen(entry, payload))


def _command_screen(entry: StoredRun, payload: dict[str, Any]) -> RenderableType:
    doc = to_document(payload, f"run {entry.id}")
    if isinstance(doc, PickDoc):
        return pick_screen(doc.pick, doc.notes)
    if isinstance(doc, RunDoc) and doc.result.kind == "load":
        costs = tuple(c.cost for c in doc.costs) if len(doc.costs) == len(doc.result.cases) else ()
        parts: list[RenderableType] = [load_screen(doc.result, output=None, costs=costs, search=None)]
        if doc.search is not None:
            parts.append(Text(f"search: {doc.search.message}"))
        return Group(*parts)
    if isinstance(doc, RunDoc):
        return bench_screen(doc.result, doc.estimate, None, stored_as=entry.id)
    if isinstance(doc, ChecksDoc):
        return checks_table(doc)
    return Text(f"(a {doc.kind} document: `gpuscout results show {entry.id} --json` prints it)")


def checks_table(doc: ChecksDoc) -> RenderableType:
    """Cases × metrics of a result of any other kind (doctor, probe), with their expected bands."""
    table = Table(title=f"{doc.result_kind}: {doc.name}", title_justify="left")
    for header in ("check", "status", "metric"):
        label_column(table, header)
    number_column(table, "value")
    label_column(table, "expected")
    prose_column(table, "note")
    for case in doc.cases:
        for m in case.metrics or ():
            band = _band(m)
            table.add_row(one_line(case.name), m.status or case.status, one_line(m.name),
                          value_in(m.value, m.unit) if m.value is not None else "—", band, Text(m.note))
        if not case.metrics:
            table.add_row(one_line(case.name), case.status, "", "", "", Text(case.message))
    return table


def _band(m: CheckMetric) -> str:
    if m.low is None and m.high is None:
        return ""
    low = value_in(m.low, m.unit) if m.low is not None else ""
    return f"{low}–{value_in(m.high, m.unit) if m.high is not None else ''}"
