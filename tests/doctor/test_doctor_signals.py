"""`gpuscout doctor` stopped by real signals while its torchrun workers run (CPU, two gloo processes): Ctrl-C
pressed twice, or SIGTERM then SIGHUP, at a seeded random moment keeps the checks that finished in a whole
file and exits 128 + the first signal; SIGKILL of the doctor ends torchrun and its workers with it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest

import gpuscout
from gpuscout.results.store import load_result
from processes import descendants, gone, running

pytestmark = [pytest.mark.slow,  # each run starts torchrun and two torch workers: ~15 s on 2 cores
              pytest.mark.skipif(not Path("/proc").is_dir() or not hasattr(signal, "SIGHUP"),
                                 reason="POSIX signals, processes read from /proc")]


def start_doctor(out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpuscout", "doctor", "--device", "cpu", "--nproc", "2", "-o",
                             str(out), "--no-store"], cwd=out.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "COLUMNS": "100",
                                 "PYTHONPATH": str(Path(gpuscout.__file__).resolve().parents[1])})


def wait_for_workers(out: Path, proc: subprocess.Popen[str]) -> list[int]:
    """Until the disk check is written and torchrun's workers run; the doctor's processes then."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        below = descendants(proc.pid)
        if out.exists() and len(below) >= 3:  # torchrun and its two workers
            return below
        time.sleep(0.2)
    raise AssertionError(f"the workers never ran: {proc.communicate(timeout=60) if proc.poll() is not None else ''}")


@pytest.mark.parametrize(("signals", "group"), [((signal.SIGINT, signal.SIGINT), True),
                                                ((signal.SIGTERM, signal.SIGHUP), False)],
                         ids=["ctrl-c twice", "SIGTERM then SIGHUP"])
def test_repeated_signals_keep_the_finished_checks(tmp_path: Path, signals: tuple[signal.Signals, ...],
                                                   group: bool) -> None:
    out = tmp_path / "d.json"
    rng = random.Random(f"doctor {signals}")
    proc = start_doctor(out)
    below: list[int] = []
    try:
        below = wait_for_workers(out, proc)
        time.sleep(rng.uniform(0.0, 2.0))
        below = descendants(proc.pid)
        for i, sig in enumerate(signals):
            if i:
                time.sleep(rng.uniform(0.0, 0.1))
            (os.killpg if group else os.kill)(proc.pid, sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        for pid in running([proc.pid, *below]):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signals[0] and "Traceback" not in stderr, stderr
    result = load_result(out)
    assert not result.complete and result.doctor is not None
    assert any(c.name == "disk sequential" and c.failure is None for c in result.cases)
    assert "interrupted" in " ".join(f.message for f in result.doctor.findings)
    assert gone(below), f"still running: {running(below)}"


def test_sigkill_of_the_doctor_ends_torchrun_and_its_workers(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    proc = start_doctor(out)
    below: list[int] = []
    try:
        below = wait_for_workers(out, proc)
        proc.kill()
        proc.communicate(timeout=60)
        assert gone(below, 15.0), f"still running after the doctor's SIGKILL: {running(below)}"
    finally:
        for pid in running([proc.pid, *below]):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    result = load_result(out)  # the checkpoint after the disk check, whole
    assert not result.complete and any(c.name == "disk sequential" for c in result.cases)
