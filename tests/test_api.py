"""The public Python API: every exported name resolves, imports stay cheap, and docs/api.md's example runs."""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import gpuscout

ROOT = Path(__file__).resolve().parent.parent


def test_every_public_name_resolves() -> None:
    for name in gpuscout.__all__:
        assert getattr(gpuscout, name) is not None, name
    assert callable(gpuscout.estimate) and callable(gpuscout.load) and callable(gpuscout.bench)


# The exports that are not the api's own: the types and option builders its calls take and return.
NOT_API = {"BenchResult", "BenchSettings", "CostOptions", "FinetuneJob", "GpuscoutError", "ImageJob", "InferenceJob",
           "LoadPlan", "ProbeResult", "StoredRun", "VideoJob", "bench_settings", "make_plan"}


def test_all_is_the_apis_public_names_and_the_listed_others() -> None:
    # As httpx tests its exports: the export list is exactly what is meant to be public, nothing more or less.
    import gpuscout.api

    assert gpuscout.__all__ == sorted(gpuscout.__all__)
    assert set(gpuscout.__all__) == set(gpuscout.api.__all__) | NOT_API
    assert len(gpuscout.__all__) == len(set(gpuscout.__all__))
    public = {n for n, v in vars(gpuscout.api).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
    assert public - {"annotations"} == set(gpuscout.api.__all__)  # every public name of the api is exported


def test_every_exported_name_imports_from_gpuscout_as_the_object_it_names() -> None:
    # In a fresh interpreter, as a user's script starts: the api's names, then the others.
    import gpuscout.api

    code = ("import gpuscout, importlib\n"
            f"from gpuscout import {', '.join(gpuscout.api.__all__)}\n"
            f"from gpuscout import {', '.join(sorted(NOT_API))}\n"
            "for name in gpuscout.__all__:\n"
            "    assert globals()[name] is getattr(importlib.import_module(gpuscout._MODULE_OF[name]), name), name\n"
            "print(len(gpuscout.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(gpuscout.__all__)


@pytest.mark.parametrize("name", ["cost", "doctor"])
def test_an_api_function_named_like_a_subpackage_survives_the_subpackages_import(name: str) -> None:
    code = (f"import gpuscout.{name}.{'billing' if name == 'cost' else 'verdict'}\n"
            f"from gpuscout import {name}\n"
            f"assert callable({name}), {name}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_names_type_checkers_see_are_the_exports() -> None:
    # Type checkers read the `if TYPE_CHECKING:` imports, not the table: the two must name the same things.
    tree = ast.parse((ROOT / "src" / "gpuscout" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen: set[str] = set()
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        if node.names[0].name == "*":
            import gpuscout.api

            assert node.module == "gpuscout.api"
            seen |= set(gpuscout.api.__all__)
        else:
            assert all(a.asname == a.name for a in node.names)  # `X as X`: re-exported
            assert {gpuscout._MODULE_OF[a.name] for a in node.names} == {node.module}
            seen |= {a.name for a in node.names}
    assert seen == set(gpuscout.__all__)


def documented_names() -> set[str]:
    """The functions (`name(`), classes (`CamelCase`) and `from gpuscout import …` names docs/api.md lists."""
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    functions = set(re.findall(r"`([a-z_][a-z0-9_]*)\(", doc))
    classes = set(re.findall(r"`([A-Z][A-Za-z0-9]*)`", doc)) - set(dir(builtins))  # not `None`
    imported = {n.strip() for line in re.findall(r"^from gpuscout import (.+)$", doc, re.MULTILINE)
                for n in line.split(",")}
    return functions | classes | imported


def test_every_name_docs_api_lists_imports_from_gpuscout() -> None:
    names = documented_names()
    assert {"estimate", "list_results", "report_inputs", "EstimateReport", "ProbeResult", "make_plan"} <= names
    missing = sorted(n for n in names if n not in gpuscout.__all__)
    assert missing == []
    code = f"from gpuscout import {', '.join(sorted(names))}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_an_input_error_names_parameters_in_python_and_flags_on_the_command_line() -> None:
    from gpuscout.api import InputError, cost
    from gpuscout.cli.output import flag, worded
    from gpuscout.errors import SpecError

    try:
        cost(hours=1, offers="prices.toml", offer="x", usd_per_gpu_hour=2.0, startup_s=60)
    except InputError as exc:
        assert exc.what == "usd_per_gpu_hour, startup_s cannot be used with offer."
        on_the_command_line = worded(exc)
        assert isinstance(on_the_command_line, SpecError)
        assert on_the_command_line.what == "--usd-per-gpu-hour, --startup-s cannot be used with --offer."
    else:
        raise AssertionError("manual billing terms beside an offer were not refused")
    assert (flag("load_results"), flag("offer_ids"), flag("target_rps")) == ("--load", "--offer", "--target-rps")
    refused = InputError("{target_rps} {rate} is not a positive rate.", "why {target_rps}", "fix", rate="{x}")
    assert refused.render() == "target_rps {x} is not a positive rate.\n  Why: why target_rps\n  To fix: fix"


def test_api_functions_are_not_shadowed_by_subpackages() -> None:
    # Importing a subpackage sets an attribute on its parent; no subpackage may be named like a function.
    import gpuscout.api.bench
    import gpuscout.api.cost
    import gpuscout.api.doctor
    import gpuscout.api.estimate
    import gpuscout.api.load
    import gpuscout.api.pick
    import gpuscout.estimator.screen
    import gpuscout.loadgen.client

    assert callable(gpuscout.estimate) and callable(gpuscout.load)
    # Inside the api, each journey's module is named like its function: the package keeps the function.
    api = gpuscout.api
    assert all(callable(f) for f in (api.bench, api.cost, api.doctor, api.estimate, api.load, api.pick))


def test_importing_gpuscout_is_cheap() -> None:
    heavy = "('torch', 'httpx', 'rich', 'gpuscout.api')"
    code = f"import sys, gpuscout; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_documented_example_runs(tmp_path: Path, capsys: object) -> None:
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = doc[doc.index("## 2. A runnable example"):doc.index("## 3.")]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    out = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("rtx-4090: peak") and lines[1].startswith("a100-pcie-40gb: peak")
    assert lines[2].startswith("cheapest: ") and "for the whole job" in lines[2]
    assert len(lines) >= 4  # the verdict of comparing the two runs
