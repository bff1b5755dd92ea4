"""`gpuscout load` as a user runs it: a subprocess against the fake server, --json, -o, no key leak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuscout.results.store import load_result

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

ROOT = Path(__file__).parent.parent.parent
KEY = "sk-cli-secret-987654321"


def gpuscout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "MY_KEY": KEY})


def test_one_liner_json_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with serve_in_thread(FakeConfig(ttft_s=0.005, token_delay_s=0.001)) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "8", "--requests", "40",
                        "--output-tokens", "16", "--api-key-env", "MY_KEY", "--json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["kind"] == "load" and payload["cases"][0]["name"] == "concurrency 8"
    result = load_result(out)
    names = {m.name for m in result.cases[0].metrics}
    assert {"ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "send_lag_s", "ttft_from_intended_s"} <= names
    assert (tmp_path / "load.workload.json").is_file() and result.fixed.data_hash
    assert srv.seen[0]["authorization"] == f"Bearer {KEY}"
    for text in (done.stdout, done.stderr, out.read_text(), (tmp_path / "load.workload.json").read_text()):
        assert KEY not in text
    compared = gpuscout("compare", str(out), str(out), "--format", "json")
    assert compared.returncode == 0, compared.stderr


def test_table_output_and_a_refused_url(tmp_path: Path) -> None:
    done = gpuscout("load", "http://127.0.0.1:9", "--model", "M", "--requests", "3")
    assert done.returncode == 0, done.stderr
    assert "every request failed to connect" in done.stderr and "Traceback" not in done.stderr


def test_malformed_url_exits_1_with_what_why_fix() -> None:
    done = gpuscout("load", "not a url", "--model", "M")
    assert done.returncode == 1
    assert "not an http" in done.stderr and "To fix" in done.stderr and "Traceback" not in done.stderr
