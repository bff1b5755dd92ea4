"""`gpuscout spec [KIND]` and docs/spec.md: the job-spec reference, one block per field, at 80 columns.

Both are rendered from `workload.spec_fields.spec_tables`, which reads the job models themselves.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from gpuscout.workload.spec_fields import SpecTable

WIDTH = 80
REGENERATE = "gpuscout spec --markdown > docs/spec.md"


def spec_text(tables: Sequence[SpecTable], width: int = WIDTH) -> str:
    """Each table's heading, then per field: `name  type · default · range`, its meaning indented below."""
    out: list[str] = []
    for table in tables:
        out += [table.heading, "-" * min(width, len(table.heading))]
        for f in table.fields:
            facts = " · ".join(x for x in (f.type, f"default {f.default}" if f.default != "required" else
                                            "required", f.range) if x)
            out += textwrap.wrap(f"{f.name}  {facts}", width, subsequent_indent="    ", break_on_hyphens=False)
            out += textwrap.wrap(f.meaning, width, initial_indent="    ", subsequent_indent="    ",
                                 break_on_hyphens=False)
        out.append("")
    return "\n".join(out)


def spec_markdown(tables: Sequence[SpecTable]) -> str:
    """docs/spec.md: one Markdown table per TOML table, generated (the test says how to regenerate)."""
    out = ["# Job-spec reference", "",
           f"Generated from the job models (`src/gpuscout/workload/job.py`) by `{REGENERATE}`; do not edit",
           "by hand. `gpuscout spec KIND` prints the same at 80 columns. A field left out takes its default;",
           "`unset` means the field is optional and has no value unless given. An unknown key is an error",
           "that names the nearest field.", ""]
    kind = ""
    for table in tables:
        if table.kind != kind:
            kind = table.kind
            out += [f"## {kind}", ""]
        if table.table:
            out += [f"### `{table.heading}` in {kind}", ""]
        out += ["| field | type | default | range | meaning |", "|---|---|---|---|---|"]
        out += [f"| `{f.name}` | {_cell(f.type)} | {_cell(f.default)} | {_cell(f.range)} | {_cell(f.meaning)} |"
                for f in table.fields]
        out.append("")
    return "\n".join(out)


def spec_payload(tables: Sequence[SpecTable]) -> dict[str, Any]:
    return {"tables": [{"kind": t.kind, "table": t.table or None, "heading": t.heading,
                        "fields": [vars(f) | {} for f in t.fields]} for t in tables]}


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""
