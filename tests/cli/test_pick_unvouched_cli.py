"""`gpuscout pick --include-placeholders / --interruptions-per-hour / --spot-advisor`: real subprocesses,
the flags reach the ranking, and bad input is a three-part error, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", "pick", "--no-store", *args], capture_output=True,
                          text=True, timeout=180, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})


def test_include_placeholders_ranks_the_placeholder_in_json() -> None:
    out = run("--include-placeholders", "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["pick"]["rows"][0]["offer_id"] == "autodl-rtx4090-placeholder"
    assert payload["unvouched"]["placeholders_ranked"] == ["autodl-rtx4090-placeholder"]


def test_a_rate_out_of_range_names_the_flag_and_the_bound() -> None:
    out = run("--interruptions-per-hour", "31")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "--interruptions-per-hour 31.0 is out of range" in out.stderr
    assert "up to 30" in out.stderr and "--interruptions-per-hour 0.05" in out.stderr


def test_a_missing_advisor_file_says_what_and_how(tmp_path: Path) -> None:
    out = run("--spot-advisor", str(tmp_path / "advisor.toml"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "advisor.toml" in out.stderr and "docs/cost.md §2.11" in out.stderr


def test_an_unknown_band_in_the_advisor_file_lists_the_bands(tmp_path: Path) -> None:
    path = tmp_path / "advisor.toml"
    path.write_text('observed_at = 2026-11-30\nsource = "s"\n[[band]]\ninstance_type = "p5.48xlarge"\n'
                    'region = "us-east-1"\nfrequency = "high"\n')
    out = run("--spot-advisor", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "unknown frequency band 'high'" in out.stderr and '"10-15%"' in out.stderr
