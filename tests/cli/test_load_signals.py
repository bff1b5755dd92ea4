"""`gpuscout load`, one process and `--workers 2`, stopped by real signals at seeded random moments against a
real server on 127.0.0.1: every request the server finished before the signal is in the file (but those
still on their way), the file is whole, the exit code is 128 + the first signal, and no process of the
command runs on — also when the parent is killed with SIGKILL. benchmarks/signals_soak.py runs the same
at length."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import serve_in_process
from stop_runs import CONCURRENCY, StopPlan, gpuscout_env, problems, stopped_load

from processes import descendants, gone, running

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir() or not hasattr(signal, "SIGHUP"),
                                reason="POSIX signals, processes read from /proc")

INT, TERM, HUP = signal.SIGINT, signal.SIGTERM, signal.SIGHUP
PLANS = [
    StopPlan("ctrl-c twice 50 ms apart", (INT, INT)),
    StopPlan("SIGTERM to the process, then ctrl-c", (TERM, INT), to="parent", max_gap_s=0.1),
    StopPlan("SIGHUP, then SIGHUP again", (HUP, HUP)),
    StopPlan("ctrl-c three times", (INT, INT, INT), max_gap_s=0.1),
    StopPlan("workers: ctrl-c twice 50 ms apart", (INT, INT), workers=2),
    StopPlan("workers: SIGTERM twice to the parent", (TERM, TERM), workers=2, to="parent"),
    StopPlan("workers: SIGHUP, then ctrl-c", (HUP, INT), workers=2),
    StopPlan("workers: SIGHUP to one worker only", (HUP,), workers=2, to="worker"),
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_a_stopped_load_keeps_every_finished_request(tmp_path: Path, plan: StopPlan) -> None:
    rng = random.Random(f"signals {plan.name}")  # one seeded moment per plan: a failure replays
    with serve_in_process(0.005, 0.002) as server:
        outcome = stopped_load(server, tmp_path / "load.json", plan, rng)
    assert not problems(outcome), (problems(outcome), outcome.delay_s, outcome.stderr[-2000:])
    assert outcome.kept is not None and outcome.ended_before > CONCURRENCY  # the run was under way: a file
    assert (tmp_path / "load.workload.json").is_file()
    if plan.workers > 1:
        assert len(outcome.processes) > plan.workers  # the workers (and multiprocessing's tracker) were seen


@pytest.mark.parametrize("workers", [1, 2])
def test_stopped_before_any_request_finished_writes_nothing_and_says_so(tmp_path: Path, workers: int) -> None:
    """A server slow to answer (first token after 30 s): ctrl-c twice before anything finished."""
    plan = StopPlan("ctrl-c twice, nothing finished", (INT, INT), workers=workers, max_delay_s=0.5)
    with serve_in_process(30.0, 0.002) as server:
        outcome = stopped_load(server, tmp_path / "load.json", plan, random.Random(workers))
    assert not problems(outcome), (problems(outcome), outcome.stderr[-2000:])
    assert outcome.kept is None and outcome.ended_ever == 0
    assert "nothing was written" in outcome.stderr and not (tmp_path / "load.json").exists()


def test_sigkill_of_the_parent_ends_its_workers_and_their_load(tmp_path: Path) -> None:
    """kill -9 of `load --workers 2`: the kernel ends the workers with it (PR_SET_PDEATHSIG), so the server
    stops receiving requests; the checkpoint before the level (none here) is all that remains."""
    with serve_in_process(0.005, 0.002) as server:
        proc = subprocess.Popen([sys.executable, "-m", "gpuscout", "load", server.url, "--model", "m",
                                 "--concurrency", "4", "--duration", "60s", "--runs", "1", "--output-tokens", "8",
                                 "--workers", "2", "-o", str(tmp_path / "load.json"), "--no-store"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=gpuscout_env(),
                                start_new_session=True)
        workers: list[int] = []
        try:
            deadline = time.monotonic() + 120
            while len(server.records()) < 20:  # both workers are sending
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            workers = descendants(proc.pid)
            assert len(workers) >= 2
            proc.kill()
            proc.communicate(timeout=60)
            assert gone(workers, 15.0), f"still running after the parent's SIGKILL: {running(workers)}"
            after = len(server.records())
            time.sleep(1.0)
            assert len(server.records()) == after  # nobody loads the server any more
        finally:
            for pid in running([proc.pid, *workers]):  # a failed test leaves nothing behind
                os.kill(pid, signal.SIGKILL)
    assert not (tmp_path / "load.json").exists()  # one level, killed: nothing was finished to keep
