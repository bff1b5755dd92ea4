"""The layer rule (docs/design.md §3): data flows one way, and each package imports only what it may.

The rule is checked on the real tree, and the checker itself is checked on planted trees: a
forbidden import must be reported, so a broken checker cannot pass silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "gpuscout"

# What each package may import besides itself and the leaf modules.
ALLOWED: dict[str, set[str]] = {
    "hardware": set(),
    "workload": {"hardware"},
    "estimator": {"workload", "hardware"},
    "torchmodel": {"workload", "hardware"},
    "measure": {"torchmodel", "workload", "hardware"},
    "trace": {"torchmodel", "workload", "hardware"},
    # doctor checks a rented box with the bench's probes and telemetry, against the offer's hardware.
    "doctor": {"measure", "torchmodel", "workload", "hardware"},
    "loadgen": {"workload"},
    # results compares measurements and sets the estimate beside them: estimates are facts too.
    "results": {"estimator", "workload", "hardware"},
    # cost ranks offers from the estimator's facts (memory fit, speed) and prices stored results.
    "cost": {"results", "estimator", "hardware", "workload"},
    # documents reads gpuscout's own outputs back (estimate, pick, compare, results) into the models that wrote them.
    "documents": {"results", "cost", "estimator", "workload", "hardware"},
    "report": {"estimator", "measure", "doctor", "trace", "loadgen", "results", "cost", "documents", "workload",
               "hardware"},
    "api": {"estimator", "torchmodel", "measure", "doctor", "trace", "loadgen", "results", "cost", "documents",
            "workload", "hardware"},
    "__init__": {"api", "loadgen", "measure", "workload", "cost"},
    "__main__": {"cli"},
    "cli": {"api", "report", "estimator", "measure", "doctor", "trace", "loadgen", "results", "cost", "documents",
            "workload", "hardware"},
    # examples: specs, the price sheet, and standalone scripts a user runs beside gpuscout (an image server)
    "examples": set(),
}
# Leaves import nothing of gpuscout but other leaves.
LEAVES = {"errors", "units", "userfile", "outfile", "stats", "host", "interrupts"}
# The result schema (and merging runs of its cases) is shared vocabulary: the bench and the load
# generator write their records in it; results stores and compares them (the flow stays
# measure/loadgen → results → cost → report).
SHARED = {"gpuscout.results.schema", "gpuscout.results.runs"}


def imported_packages(path: Path) -> set[str]:
    """The gpuscout packages (first name after `gpuscout.`) that a module imports."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} if node.module != "gpuscout" else {f"gpuscout.{a.name}" for a in node.names}
    return {n.split(".")[1] for n in names if n.startswith("gpuscout.") and n not in SHARED}


def owner(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def violations(root: Path) -> list[str]:
    """Every import in the tree under `root` that its package may not make."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        pkg = owner(rel)
        used = imported_packages(path) - {pkg} - LEAVES
        allowed = set() if pkg in LEAVES else ALLOWED.get(pkg)
        if allowed is None:
            found.append(f"{rel}: package {pkg!r} is not in the layer table")
        elif used - allowed:
            found.append(f"{rel} imports {sorted(used - allowed)}")
    return found


def test_the_source_tree_follows_the_layer_rule() -> None:
    assert violations(PACKAGE) == []


@pytest.mark.parametrize(("module", "code"), [
    ("estimator/speed/estimate.py", "from gpuscout.measure.bench import run_bench\n"),
    ("estimator/speed/estimate.py", "import gpuscout.loadgen.client\n"),
    ("workload/job.py", "from gpuscout import cost\n"),
    ("report/numbers.py", "from gpuscout.cli.app import main\n"),
    ("api.py", "from gpuscout.report.estimate import screening_table\n"),
    ("measure/bench.py", "from gpuscout.trace.llm import trace_finetune_step\n"),
    ("errors.py", "from gpuscout.workload.job import FinetuneJob\n"),
    ("newthing/x.py", "x = 1\n"),
])
def test_a_planted_forbidden_import_is_reported(tmp_path: Path, module: str, code: str) -> None:
    planted = tmp_path / module
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(code)
    assert len(violations(tmp_path)) == 1


def test_allowed_imports_are_not_reported(tmp_path: Path) -> None:
    for module, code in (("estimator/speed/estimate.py", "from gpuscout.workload.job import FinetuneJob\n"),
                         ("measure/bench.py", "from gpuscout.results.schema import Case\n"),
                         ("cli/app.py", "from gpuscout.report.numbers import gib\n"),
                         ("units.py", "from gpuscout.errors import SpecError\n")):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text(code)
    assert violations(tmp_path) == []
