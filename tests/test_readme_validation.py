"""README.md quotes validation/published.md: the accuracy table's in-sample, leave-one-source-out and
unsafe-share figures, the point counts and the targets on sources used in no constant are the ones the
benchmark last wrote (after regenerating published.md, copy its figures into the README)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PUBLISHED = ROOT / "validation" / "published.md"


def table_after(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first markdown table after `heading`, as {column header: cell}."""
    at = text.index(heading)
    lines = text[at:].splitlines()
    lines = [line for line in (lines if heading.startswith("|") else lines[1:]) if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    header = split(lines[start])
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, split(line), strict=False)))
    return rows


def split(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def readme_rows() -> dict[str, list[str]]:
    """README accuracy-table rows keyed by the category id in backticks that starts the first cell."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `(\w+)`", line)
        if found:
            rows[found.group(1)] = split(line)
    return rows


def test_the_readme_accuracy_table_quotes_published_md() -> None:
    published = PUBLISHED.read_text(encoding="utf-8")
    summary = {row["category"]: row for row in table_after(published, "## 1. Per category")}
    quoted = readme_rows()
    assert {"training_peak", "image_peak", "kv_capacity", "max_seq_len", "speed"} <= set(quoted)
    for category, cells in quoted.items():
        row = summary[category if category != "memory" else "all memory points"]
        assert cells[1].split(" (")[0] == (row["median \\|err\\|"] if category != "max_seq_len"
                                           else f"worst {row['worst']} above"), category
        assert cells[2].split(" (")[0] == row["LOSO"], category
        assert cells[3].split(" (")[0] == row["unsafe >5% (LOSO)"], category


def test_the_readme_quotes_the_point_counts_and_the_unused_source_targets() -> None:
    published = PUBLISHED.read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    counts = re.search(r"- points: (\d+) from published/ \((\d+) counted\)", published)
    assert counts is not None
    assert f"Checked against {counts.group(1)} published measurements" in readme
    assert f"{counts.group(2)}\nwith certain conditions count" in readme or \
        f"{counts.group(2)} with certain conditions count" in readme
    unused = table_after(published, "| sources used in no constant |")
    assert len(unused) == 4
    for row in unused:
        label = row["sources used in no constant"]
        assert f"| {label} | {row['points']} | {row['value']} |" in readme, label
