"""`gpuscout trial` as a user runs it: the mistakes refused before anything starts, and a real local trial.

The local trial runs the real script end to end on this CPU: two candidates, one whose offer promises
far more vCPUs and RAM than this machine has (its doctor says *return*, so it is torn down without a
bench) and one that benches; the decision, the stored run and the screens at 80 columns are checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import descendants, gone

SRC = Path(__file__).resolve().parents[2] / "src"
JOB = SRC / "gpuscout" / "examples" / "tiny-finetune.toml"

SHEET = """
[[offer]]
id = "keeps"
provider = "test"
gpu = "rtx-4090"
gpu_count = 1
price = 0.5
price_basis = "instance"
currency = "USD"
observed_at = 2026-11-30
source = "a test sheet"
billing_increment_s = 1

[[offer]]
id = "returns"
provider = "test"
gpu = "rtx-4090"
gpu_count = 1
price = 0.6
price_basis = "instance"
currency = "USD"
observed_at = 2026-11-30
source = "a test sheet"
vcpus = 4096
ram_gb = 65536
"""


def gpuscout(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "GPUSCOUT_STORE": str(tmp_path / "store.db"), "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def sheet(tmp_path: Path) -> Path:
    path = tmp_path / "offers.toml"
    path.write_text(SHEET)
    return path


@pytest.mark.parametrize(("args", "said"), [
    (["--candidates", "keeps,kept"], "kept is not an offer of the price sheet"),
    (["--candidates", "keeps,keeps"], "names an offer twice"),
    (["--candidates", "keeps", "--top", "2"], "were both given"),
    (["--engine", "cloud"], "Unknown engine 'cloud'"),
    (["--runs", "0"], "--runs 0 is below 1"),
    (["--budget-minutes", "0"], "is not a positive time"),
    (["--max-usd", "0.0001"], "is above --max-usd"),
    (["--engine", "ssh", "--candidates", "keeps,returns"], "No ssh host for keeps, returns"),
    (["--engine", "ssh", "--ssh", "keeps"], "is not OFFER_ID=user@host:port"),
    (["--engine", "ssh", "--candidates", "keeps", "--ssh", "keeps=me@127.0.0.1:22"], "was not confirmed"),
])
def test_a_mistake_is_refused_before_anything_starts(tmp_path: Path, sheet: Path, args: list[str], said: str) -> None:
    done = gpuscout(tmp_path, "trial", str(JOB), "--offers", str(sheet), "-o", "out", *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stderr.replace("\n", " "), done.stderr
    assert "To fix:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists(), "something was launched"


def test_the_max_usd_refusal_names_the_predicted_bill(tmp_path: Path, sheet: Path) -> None:
    done = gpuscout(tmp_path, "trial", str(JOB), "--offers", str(sheet), "--max-usd", "0.0001")
    assert "nothing was launched" in done.stderr.replace("\n", " ")
    assert "predicted bill, $" in done.stderr


@pytest.mark.slow
def test_a_local_trial_runs_the_real_script_returns_the_sick_box_and_records_the_decision(
        tmp_path: Path, sheet: Path) -> None:
    done = gpuscout(tmp_path, "trial", str(JOB), "--offers", str(sheet), "--candidates", "returns,keeps",
                    "--runs", "1", "--warmup", "1", "--repeats", "2", "-o", "out", timeout=900)
    screens = done.stdout
    assert done.returncode == 0, screens + done.stderr[-3000:]
    assert max(len(line) for line in screens.splitlines()) <= 80
    assert "Only keeps finished its bench" in screens.replace("\n", " ")
    assert "deviation: no fresh environment" in screens
    steps = (tmp_path / "out" / "returns" / "results" / "steps.log").read_text()
    assert "doctor says return" in steps and "bench" not in steps.replace("doctor", "")
    kept = tmp_path / "out" / "keeps" / "results"
    assert {"doctor.json", "bench.json", "steps.log"} <= {p.name for p in kept.iterdir()}
    assert "returns: torn down" in done.stderr.replace("\n", " ") and "keeps: torn down" in done.stderr
    listed = gpuscout(tmp_path, "results", "list", "--kind", "trial", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert len(runs) == 1 and "only one: rent keeps" in json.dumps(runs[0])
    # The same script body ran on both boxes: only the header (offer, creation time) differs.
    a, b = ((tmp_path / "out" / n / "trial.sh").read_text() for n in ("returns", "keeps"))
    marker = "# ---- the same on every candidate from here on ----"
    assert a.split(marker)[1] == b.split(marker)[1]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_the_bench_tears_down_keeps_the_doctor_result_and_exits_with_the_signal(
        tmp_path: Path, sheet: Path, sig: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC), "GPUSCOUT_STORE": str(tmp_path / "store.db"), "COLUMNS": "80"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuscout", "trial", str(JOB), "--offers", str(sheet),
                             "--candidates", "keeps", "--runs", "3", "-o", "out"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    steps = tmp_path / "out" / "boxes" / "keeps" / "results" / "steps.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (steps.is_file() and " bench\n" in steps.read_text()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    assert steps.is_file() and " bench\n" in steps.read_text(), "the bench never started"
    below = descendants(proc.pid)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, out + err[-3000:]
    assert "keeps: torn down" in err.replace("\n", " ") and "Traceback" not in err
    assert "stopped by a signal: every launched box was torn down" in err.replace("\n", " ")
    assert gone(below, 30), "a process of the trial outlived the stop"
    back = tmp_path / "out" / "keeps" / "results"
    assert (back / "doctor.json").is_file()  # what finished came back
    written = tmp_path / "out" / "boxes" / "keeps" / "results" / "bench.json"
    if written.is_file():  # the bench stopped after a case finished: its partial result came back as written
        assert (back / "bench.json").read_bytes() == written.read_bytes()
