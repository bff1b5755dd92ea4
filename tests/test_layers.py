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
    # trial runs the same script on every rented candidate through an engine, then prices and judges what came
    # back with the cost and results layers (it never imports measure or doctor: those run on the box).
    "trial": {"results", "cost", "estimator", "workload", "hardware"},
    # documents reads gpuscout's own outputs back (estimate, pick, compare, results) into the models that wrote them.
    "documents": {"results", "cost", "estimator", "workload", "hardware"},
    "report": {"estimator", "measure", "doctor", "trace", "loadgen", "results", "cost", "documents", "trial",
               "workload", "hardware"},
    "api": {"estimator", "torchmodel", "measure", "doctor", "trace", "loadgen", "results", "cost", "documents",
            "trial", "workload", "hardware"},
    # __init__ re-exports the api, and the types and option builders its calls take and return.
    "__init__": {"api", "loadgen", "measure", "workload", "cost", "results"},
    "__main__": {"cli"},
    # cli calls the api and renders with report; of the rest it imports only the builders of the api's
    # option objects, which check each flag: cost.billing.cost_options, results.ratios.compare_options,
    # measure.harness.bench_settings, loadgen.plan.make_plan and parse_levels, workload.job.Slo
    # (tests/cli/test_cli_imports.py holds the cli to exactly these modules).
    "cli": {"api", "report", "cost", "results", "measure", "loadgen", "workload"},
    # examples: specs, the price sheet, and standalone scripts a user runs beside gpuscout (an image server)
    "examples": set(),
}
# Leaves import nothing of gpuscout but other leaves.
LEAVES = {"errors", "units", "userfile", "outfile", "stats", "host", "interrupts", "frozen", "redact"}
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


# --- No import circles -------------------------------------------------------------------------------
# The layer rule above is between packages; inside a package, modules can still import each other in a
# circle. A circle is counted whatever hides it: an import inside a function (which only defers it to
# the first call) and an import under `if TYPE_CHECKING:` alike. A type-only import never runs, but the
# module still names the other's types, so the two cannot be read, tested or moved apart; and moving an
# import under TYPE_CHECKING would otherwise be a way to hide a circle rather than open it.

def module_name(root: Path, path: Path) -> str:
    parts = ("gpuscout", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, me: str, is_package: bool, modules: set[str]) -> set[str]:
    """The gpuscout modules an import statement loads by name. `from a import b` loads the module a.b
    where one exists, else a name inside module a. The parent packages every import runs first are not
    counted: else each package whose __init__ imports its own modules would be a circle."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & modules
    base = node.module or ""
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = me.split(".") if is_package else me.split(".")[:-1]
        base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names} & modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each gpuscout module under `root` → the gpuscout modules it imports anywhere in its body."""
    paths = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for me, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found |= _imported(node, me, path.name == "__init__.py", modules)
        graph[me] = found - {me}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that each reach every other in the group."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while (member := stack.pop()) != node:
                        group.add(member)
                        on_stack.discard(member)
                    on_stack.discard(node)
                    groups.append(group | {node})
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph.get(nxt, ())))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return [g for g in groups if len(g) > 1]


def chain(graph: dict[str, set[str]], group: set[str]) -> str:
    """The shortest circle through the group's first module, as 'a → b → a' (breadth-first)."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                return " → ".join([*paths[node], start])
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    raise AssertionError(group)  # a strongly connected group always closes a circle


def circles(root: Path) -> list[str]:
    """Every import circle between the modules under `root`, each as a readable chain."""
    graph = import_graph(root)
    return sorted(chain(graph, group) + (f" (with {', '.join(sorted(group))})" if len(group) > 2 else "")
                  for group in strongly_connected(graph))


def test_no_import_circles_between_modules() -> None:
    assert circles(PACKAGE) == []


def test_a_planted_circle_through_a_function_level_import_is_reported(tmp_path: Path) -> None:
    (tmp_path / "cost").mkdir()
    (tmp_path / "cost" / "pick.py").write_text("from gpuscout.cost.rows import Row\n")
    (tmp_path / "cost" / "rows.py").write_text("def judge():\n    from gpuscout.cost.pick import pick\n")
    assert circles(tmp_path) == ["gpuscout.cost.pick → gpuscout.cost.rows → gpuscout.cost.pick"]


def test_planted_circles_through_type_checking_and_relative_imports_are_reported(tmp_path: Path) -> None:
    (tmp_path / "loadgen").mkdir()
    (tmp_path / "loadgen" / "client.py").write_text("from . import conversation\n")
    (tmp_path / "loadgen" / "conversation.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuscout.loadgen.workers import Part\n")
    (tmp_path / "loadgen" / "workers.py").write_text("import gpuscout.loadgen.client\n")
    assert circles(tmp_path) == ["gpuscout.loadgen.client → gpuscout.loadgen.conversation → gpuscout.loadgen.workers"
                                 " → gpuscout.loadgen.client (with gpuscout.loadgen.client, "
                                 "gpuscout.loadgen.conversation, gpuscout.loadgen.workers)"]


def test_a_tree_without_a_circle_reports_none(tmp_path: Path) -> None:
    (tmp_path / "cost").mkdir()
    (tmp_path / "cost" / "__init__.py").write_text("from gpuscout.cost.pick import pick\n")
    (tmp_path / "cost" / "pick.py").write_text("from gpuscout.cost import rows\nfrom gpuscout.errors import E\n")
    (tmp_path / "cost" / "rows.py").write_text("def judge():\n    from gpuscout.errors import E\n")
    (tmp_path / "errors.py").write_text("E = ValueError\n")
    assert circles(tmp_path) == []
