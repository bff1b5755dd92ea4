"""Column kinds shared by every table, so screens stay legible at 80 columns.

Numbers never wrap (a figure broken over two lines reads as two figures); prose may wrap at
words; identifiers and short labels that must stay on one line are cut with an ellipsis when the
terminal is too narrow, and their full text is in a footnote or in `--wide`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text


def number_column(table: Table, header: str) -> None:
    """A right-aligned figure that is never wrapped; put its unit in the header ('peak\\nGiB')."""
    table.add_column(header, justify="right", no_wrap=True, overflow="ellipsis")


def label_column(table: Table, header: str) -> None:
    """A name or mark kept whole on one line (GPU SKU, offer id, yes/no)."""
    table.add_column(header, no_wrap=True, overflow="ellipsis")


def prose_column(table: Table, header: str) -> None:
    """Words that may wrap; the column gives way first when the terminal is narrow."""
    table.add_column(header, overflow="fold")


def one_line(text: str, style: str = "") -> Text:
    """Text for a shrinkable column that stays on one line, cut with '…' when there is no room."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def plain(text: str) -> Text:
    """Text that is not read as rich markup: '[s, lower is better]' and formulas with '[…]' stay as written."""
    return Text(text)


def some_ids(ids: Sequence[str], limit: int = 8) -> str:
    """'a, b, c' — or the first `limit` and 'and N more' (a catalog can hold thousands)."""
    more = f" and {len(ids) - limit:,} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more
