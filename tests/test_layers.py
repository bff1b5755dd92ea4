"""The layer rule of DESIGN.md §2: estimate never imports measure/load; nothing imports cli."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "gpuscout"

# What each package may import (besides itself and the leaf modules errors/units).
ALLOWED = {
    "hardware": set(),
    "workload": {"hardware"},
    "estimate": {"workload", "hardware"},
    "measure": {"workload", "hardware"},
    "load": {"workload"},
    "results": {"estimate", "measure", "load", "workload", "hardware"},
    # cost ranks offers from the estimator's facts (memory fit, speed); estimates are facts like results.
    "cost": {"results", "estimate", "hardware", "workload"},
    "report": {"estimate", "measure", "load", "results", "cost", "workload", "hardware"},
}
LEAVES = {"errors", "units", "userfile", "stats", "host"}


# The result schema is shared vocabulary: measurement and load tests write their records in it,
# results stores and compares them (the flow stays measure/load → results → cost → report).
SHARED_SCHEMA = "gpuscout.results.schema"


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n.split(".")[1] for n in names if n.startswith("gpuscout.") and n.count(".") >= 1 and n != SHARED_SCHEMA}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layer_rule(path: Path) -> None:
    rel = path.relative_to(PACKAGE)
    owner = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    used = imported_packages(path) - {owner} - LEAVES
    if owner == "cli" or owner == "__main__":
        return  # the shell may import everything
    assert "cli" not in used, f"{rel} imports cli"
    if owner in ALLOWED:
        assert used <= ALLOWED[owner], f"{rel} imports {sorted(used - ALLOWED[owner])}"


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from gpuscout.measure.trace import trace_finetune_step\nimport gpuscout.cli.app\n")
    assert imported_packages(bad) == {"measure", "cli"}
