"""Numbered footnotes under a table: formulas, sources and long notes stay out of narrow cells.

A cell holds a short reference, '[3]', and the text is printed once under the table with a
hanging indent, so it wraps at words at any terminal width instead of folding inside a column.
One `Footnotes` can serve several tables of a screen: numbers keep counting, and each table
prints only the notes it added (`flush`).
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text


class Footnotes:
    """The notes of one screen, numbered from 1 in the order they were first referred to."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._shown = 0  # notes before this index were already printed under an earlier table

    def ref(self, text: str) -> str:
        """'[n]' for `text`; the same text keeps its number, so a note shared by many rows prints once."""
        if text not in self._texts:
            self._texts.append(text)
        return f"[{self._texts.index(text) + 1}]"

    def flush(self) -> RenderableType:
        """The notes added since the last flush, one '[n] text' line each (wrapped lines indented)."""
        grid = Table.grid(padding=(0, 1, 0, 0))
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(overflow="fold")
        for number, text in enumerate(self._texts[self._shown:], start=self._shown + 1):
            grid.add_row(f"[{number}]", Text(text))  # Text: formulas hold '[…]', which is not markup
        self._shown = len(self._texts)
        return grid
