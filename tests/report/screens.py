"""Rendering a screen to plain text as a user's terminal shows it, and reading its tables back.

The table reader lets tests assert what a cell says (the peak is above the usable memory, the
star marks the Pareto offers) in a way that survives a refresh of the golden files.
"""

from __future__ import annotations

import io
import re

from rich.console import Console, RenderableType

HEAD, BODY = "┃", "│"


def render(renderable: RenderableType, width: int) -> str:
    """The screen as plain text at `width` columns: no colour, no terminal, nothing read from the environment."""
    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every boxed table in `text`: its header names (a header's lines joined by spaces) and its body lines' cells."""
    found: list[tuple[list[str], list[list[str]]]] = []
    header: list[list[str]] = []
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(HEAD):
            header.append(_cells(line, HEAD))
        elif line.startswith(BODY):
            rows.append(_cells(line, BODY))
        elif line.startswith("└"):
            names = [" ".join(part for part in parts if part) for parts in zip(*header, strict=True)]
            found.append((names, rows))
            header, rows = [], []
    return found


def _cells(line: str, bar: str) -> list[str]:
    return [cell.strip() for cell in line.strip()[1:-1].split(bar)]


def rows_by_header(text: str, first_header: str) -> list[dict[str, str]]:
    """The body lines of the first table whose first column is `first_header`, as {header: cell}."""
    for names, rows in tables(text):
        if names and names[0] == first_header:
            return [dict(zip(names, row, strict=True)) for row in rows]
    raise AssertionError(f"no table starting with a {first_header!r} column in:\n{text}")


def pick_rows(text: str) -> dict[str, list[str]]:
    """The default pick table read back: each offer id (the first line of its row) to the cells of that
    line (offer, runtime, total, age, marks), cut at runs of two or more spaces (the age and the
    marks share a column). The table has no
    vertical rules, so a cell is what stands between wide gaps; the marks cell is '' when empty."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("offer ") and "runtime" in line)
    out: dict[str, list[str]] = {}
    for line in lines[start + 2:]:
        if not line.strip() or not line.startswith(tuple("abcdefghijklmnopqrstuvwxyz0123456789")):
            if not line.strip() or not line[:1].isalpha():
                break
            continue
        cells = [c for c in re.split(r" {2,}", line.rstrip()) if c]
        if len(cells) == 4 and cells[3].split()[1:2] in (["d"], ["y"]):  # the age, then the marks
            number, unit, *marks = cells[3].split()
            out[cells[0]] = [*cells[:3], f"{number} {unit}", "".join(marks)]
    return out
