"""A ranked row's bill where the choice is made: its lines in one compact block, or in full (`--explain`).

The compute line of a bill holds the billed start-up and idle tail of the first start besides the
work; the block shows them as lines of their own, so what a short job pays for launching reads
beside what it pays for working. Amounts are in the display currency.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from gpuscout.cost.billing import JobCost
from gpuscout.cost.cost_band import band_of
from gpuscout.cost.pick import PickResult
from gpuscout.cost.pick_row import PickRow
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate, to_display
from gpuscout.report.numbers import money, money_band

BLOCKS = 3  # ranked rows whose bill is shown under the default table
_NAMES = {"failed attempts": "retries", "dataset egress (at the source)": "dataset egress"}


def shown_band(row: PickRow, shown: DisplayCurrency) -> str:
    """The row's total band in the display currency: '$3.43–7.28'."""
    low, high = band_of(row)
    return money_band(low / shown.usd_per_unit, None if high is None else high / shown.usd_per_unit, shown.code)


def bill_parts(cost: JobCost, shown: DisplayCurrency, rates: Sequence[ExchangeRate]) -> list[tuple[str, float]]:
    """(name, amount in the display currency) of each line, the compute line split into work, billed
    start-up and idle tail."""
    factor = to_display(1.0, cost.currency, shown, rates)
    per_s = cost.rate_per_hour / 3600.0
    parts: list[tuple[str, float]] = []
    for line in cost.lines:
        if line.name == "compute" and per_s > 0:
            start, tail = cost.startup_s * per_s, cost.idle_tail_s * per_s
            parts += [("compute", line.amount - start - tail), ("billed start-up", start), ("idle tail", tail)]
        else:
            parts.append((_NAMES.get(line.name, line.name), line.amount))
    merged: dict[str, float] = {}  # every storage item in one line: a compact block names kinds, not disks
    for name, amount in parts:
        key = "storage" if name.startswith("storage: ") else name
        merged[key] = merged.get(key, 0.0) + amount * factor
    return list(merged.items())


def bill_block(row: PickRow, shown: DisplayCurrency, rates: Sequence[ExchangeRate]) -> list[Text]:
    """Two or three lines: 'bill of ID, $4.56 expected:' and its lines, zero-amount extras left out."""
    if row.cost is None or row.total_usd is None:
        return []
    parts = [(n, a) for n, a in bill_parts(row.cost, shown, rates) if a or n in ("compute", "billed start-up")]
    instances = row.instances  # a serving load several instances of the offer serve
    each = f" ({instances:.0f} instances, each:)" if instances > 1 else ":"
    head = Text(f"bill of {row.offer_id}, {money(row.total_usd / shown.usd_per_unit, shown.code)} expected{each}",
                style="bold")
    body = Text("  " + " · ".join(f"{name} {money(amount, shown.code)}" for name, amount in parts), style="dim")
    return [head, body]


def bill_blocks(result: PickResult, count: int = BLOCKS) -> list[RenderableType]:
    """The bill of each of the first `count` ranked rows, and how to see any other's."""
    ranked = [r for r in result.rows if r.excluded is None and r.cost is not None][:count]
    if not ranked:
        return []
    out: list[RenderableType] = []
    for row in ranked:
        out += bill_block(row, result.currency, result.exchange_rates)
    out.append(Text("Any row's whole bill, band and layout: gpuscout pick … --explain OFFER_ID", style="dim"))
    return out


def find_row(result: PickResult, offer_id: str) -> PickRow:
    """The row of `offer_id`; an unknown id is a SpecError naming the closest ones."""
    ids = [r.offer_id for r in result.rows]
    for row in result.rows:
        if row.offer_id == offer_id:
            return row
    close = [i for i in ids if i.startswith(offer_id)][:3] or difflib.get_close_matches(offer_id, ids, n=3)
    hint = f"Did you mean {', '.join(close)}?" if close else "`gpuscout pick` lists the ids in its first column."
    raise SpecError(f"No offer {offer_id!r} in this ranking.", "--explain takes an offer id from the price sheet.",
                    hint)


def band_lines(row: PickRow, result: PickResult) -> list[Text]:
    shown = result.currency
    ranked = [r for r in result.rows if r.excluded is None]
    lines = [Text(f"total {money((row.total_usd or 0.0) / shown.usd_per_unit, shown.code)} expected, band "
                  f"{shown_band(row, shown)}"),
             Text("  low end: the expected bill at the band's fast end; high end: the P95 bill (spot "
                  "interruptions) at its slow end", style="dim")]
    if ranked and row.excluded is None:
        if ranked[0].offer_id == row.offer_id:
            lines.append(Text("the leader: the cheapest expected total"))
        elif row.separable is False:
            lines.append(Text(f"≈ its band overlaps the leader's ({ranked[0].offer_id}): not separable before "
                              "measuring"))
        elif row.separable:
            lines.append(Text(f"told apart from the leader ({ranked[0].offer_id}) before measuring"))
    return lines
