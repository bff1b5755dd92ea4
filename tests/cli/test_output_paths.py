"""`-o` is checked before any work starts: a folder, a device or a link is refused at once, and nothing runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def gpuscout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("target", ["folder", "/dev/null", "link"])
@pytest.mark.parametrize("command", [["bench", "tiny-finetune", "--device", "cpu"],
                                     ["load", "http://127.0.0.1:9/", "--model", "m", "--requests", "5"]])
def test_a_bad_output_path_is_refused_before_any_work(tmp_path: Path, target: str, command: list[str]) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "kept.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "kept.json")
    out = gpuscout(*command, "-o", target, cwd=tmp_path)
    assert out.returncode == 1 and "Cannot write" in out.stderr and "Traceback" not in out.stderr
    assert "connect" not in out.stderr  # refused before the load test contacted the server
    assert (tmp_path / "kept.json").read_text() == "{}"  # the link's target is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "kept.json", "link"]
