"""The command line is a thin shell: it calls the api, renders with report, and builds the api's option
objects with their own builders; nothing else of gpuscout. The layer table (tests/test_layers.py) can
only name packages; this test holds the cli to the exact modules and names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "src" / "gpuscout" / "cli"

# Whole modules (and packages) the cli may use; `interrupts` because the entry point holds the process's
# stop signals for the whole command and turns the first into its exit code.
MODULES = ("gpuscout.api", "gpuscout.report", "gpuscout.cli", "gpuscout.errors", "gpuscout.units", "gpuscout.host",
           "gpuscout.outfile", "gpuscout.interrupts")
# The option builders: each checks its flags and builds the object an api call takes.
OPTION_BUILDERS = {
    "gpuscout.cost.billing": {"cost_options"},  # CostOptions for pick, cost and compare
    "gpuscout.results.ratios": {"compare_options"},  # CompareOptions for compare
    "gpuscout.measure.harness": {"bench_settings"},  # BenchSettings for bench
    "gpuscout.loadgen.plan": {"make_plan", "parse_levels"},  # the LoadPlan for load, its --sweep levels
    "gpuscout.workload.job": {"Slo"},  # the SLO of load and report
}


def imports(source: str) -> list[tuple[str, str | None]]:
    """Every gpuscout import in the source, as (module, name); `import m` gives (m, None)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("gpuscout")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpuscout"):
            found += [(node.module, a.name) for a in node.names]
    return found


def forbidden(source: str) -> list[str]:
    """The imports the cli may not make."""
    bad = []
    for module, name in imports(source):
        full = f"{module}.{name}" if module == "gpuscout" and name else module
        if any(full == m or full.startswith(m + ".") for m in MODULES):
            continue
        if name is not None and name in OPTION_BUILDERS.get(module, set()):
            continue
        bad.append(f"{module}: {name}")
    return bad


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_the_cli_imports_only_the_api_report_and_option_builders(path: Path) -> None:
    assert forbidden(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("code", [
    "from gpuscout.estimator.screen import screen\n",
    "from gpuscout.cost.billing import price_job\n",
    "import gpuscout.loadgen.client\n",
    "from gpuscout import cost\n",
])
def test_a_planted_import_past_the_api_is_reported(code: str) -> None:
    assert len(forbidden(code)) == 1


def test_no_command_module_imports_the_app() -> None:
    # The app registers the commands; a command module importing it back would be an import circle.
    for path in CLI.glob("*.py"):
        if path.name != "app.py":
            assert all(m != "gpuscout.cli.app" for m, _ in imports(path.read_text(encoding="utf-8"))), path.name
