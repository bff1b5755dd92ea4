"""The public Python API: every exported name resolves, imports stay cheap, and docs/api.md's example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gpuscout

ROOT = Path(__file__).resolve().parent.parent


def test_every_public_name_resolves() -> None:
    for name in gpuscout.__all__:
        assert getattr(gpuscout, name) is not None, name
    assert callable(gpuscout.estimate) and callable(gpuscout.load) and callable(gpuscout.bench)


def test_api_functions_are_not_shadowed_by_subpackages() -> None:
    # Importing a subpackage sets an attribute on its parent; no subpackage may be named like a function.
    import gpuscout.estimator.screen
    import gpuscout.loadgen.client

    assert callable(gpuscout.estimate) and callable(gpuscout.load)


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
