"""Rendering of the whole machine: the job's host RAM and disk, and what each offer's host adds.

`estimate --gpu X` shows the host needs as a table under the GPU breakdown (formulas as footnotes);
`pick` lists, under its table, the dataset pull and its egress, extra disk bought, and what a sheet
did not state, each grouped over the offers it applies to (docs/cost.md §2.14).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.machine import MachineCheck
from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.host import HostNeeds
from gpuscout.hardware.currency import USD, DisplayCurrency
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, prose_column, some_ids
from gpuscout.report.numbers import duration, gib_number, money, money_in, sig

GB = 10**9


def host_table(needs: HostNeeds, notes: Footnotes) -> RenderableType:
    """Host RAM and disk of the job as written, term by term; each formula is a footnote."""
    table = Table(title=f"Host RAM and disk ({needs.processes} GPU process{'es' if needs.processes > 1 else ''})")
    prose_column(table, "term")
    label_column(table, "on")
    number_column(table, "GiB")
    label_column(table, "")
    for t in (*needs.ram, *needs.disk):
        if t.bytes:
            table.add_row(t.name, "RAM" if t.kind == "ram" else "disk", gib_number(t.bytes, 1),
                          notes.ref(f"{t.name}: {t.formula}"))
    table.add_row(Text("host RAM", style="bold"), "", Text(gib_number(needs.ram_bytes, 1), style="bold"), "")
    table.add_row(Text("disk", style="bold"), "", Text(gib_number(needs.disk_bytes, 1), style="bold"), "")
    return Group(table, notes.flush())


def machine_lines(rows: Sequence[PickRow], shown: DisplayCurrency = USD) -> list[RenderableType]:
    """Under the ranking: the dataset's pull, extra disk and unstated host facts, grouped by offer."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        if row.excluded is None and row.machine is not None:
            for line in row_lines(row.machine, row.currency, shown):
                groups.setdefault(line, []).append(row.offer_id)
    return [Text(f"{line}: {some_ids(ids)}", style="dim") for line, ids in groups.items()]


def row_lines(check: MachineCheck, currency: str, shown: DisplayCurrency = USD) -> list[str]:
    """One offer's host lines: its dataset pull, outputs sent back, extra disk, what its sheet leaves out."""
    lines = []
    t = check.transfer
    if t is not None:
        egress = money_in(t.egress_usd, shown.code, shown.usd_per_unit)
        lines.append(f"dataset {sig(t.gb)} GB from {t.source}, {t.route} at ${t.usd_per_gb:g}/GB and "
                     f"{t.gbps:g} Gbit/s: {egress} egress, {duration(t.seconds)} pull billed")
    if check.returned_gb:
        lines.append(f"outputs ({sig(check.returned_gb)} GB) go back where the data lives, at the offer's egress")
    if check.extra_disk_gb and check.extra_disk_price_per_gb_month is not None:
        price = money(check.extra_disk_price_per_gb_month, currency)
        lines.append(f"extra disk {sig(check.extra_disk_gb)} GB at {price}/GB-month (the job needs "
                     f"{sig(check.needs.disk_bytes / GB)} GB)")
    lines += [f"note, {note}" for note in check.notes]
    return lines
