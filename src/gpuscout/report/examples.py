"""`gpuscout examples`: the job specs and price sheet that ship with gpuscout."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


def examples_payload(folder: Path) -> dict[str, Any]:
    """`examples --json`: the folder, and per shipped example its name, kind, title and path."""
    rows = []
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        kind = data.get("kind", "price sheet" if "offer" in data else "?")
        rows.append({"name": path.stem, "kind": str(kind), "path": str(path),
                     "what": str(data.get("name", _sheet_summary(data.get("offer", []))))})
    return {"folder": str(folder), "examples": rows}


def examples_table(folder: Path) -> RenderableType:
    """One row per shipped example: the name to pass, its kind and its title."""
    table = Table(title="Shipped examples (pass the name, or copy the file and edit it)")
    for col in ("name", "kind", "what"):
        table.add_column(col)
    for row in examples_payload(folder)["examples"]:
        table.add_row(row["name"], row["kind"], row["what"])
    return Group(table, Text(f"Folder: {folder}", style="dim"))


def _sheet_summary(offers: list[dict[str, object]]) -> str:
    """A template (every price a placeholder, to be filled in) is not a sheet of dated examples."""
    if offers and all(offer.get("placeholder") is True for offer in offers):
        return f"TEMPLATE, {len(offers)} offers to fill in"
    return f"{len(offers)} EXAMPLE offers"
