"""gpuscout works from any folder: the default job, the example jobs and the example price sheet ship with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def gpuscout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})


def test_pick_without_offers_ranks_the_bundled_sheet_outside_the_checkout(tmp_path: Path) -> None:
    out = gpuscout("pick", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["pick"]["rows"]
    assert sum(r["excluded"] is None for r in rows) >= 5


def test_estimate_takes_a_shipped_examples_name(tmp_path: Path) -> None:
    out = gpuscout("estimate", "llama3-70b-serving-8k", "--gpu", "h100", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["job"]["kind"] == "inference"


def test_an_unknown_job_name_suggests_the_examples(tmp_path: Path) -> None:
    out = gpuscout("estimate", "llama3-8b-qlor", cwd=tmp_path)
    assert out.returncode == 1 and "Did you mean llama3-8b-qlora" in out.stderr and "Traceback" not in out.stderr


def test_examples_lists_every_shipped_job(tmp_path: Path) -> None:
    out = gpuscout("examples", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("llama3-8b-qlora", "tiny-finetune", "sdxl-1024", "prices.example"):
        assert name in out.stdout
