"""`gpuscout load` stopped by real signals at a random moment, checked against what the server recorded.

Shared by tests/cli/test_load_signals.py (a few runs) and benchmarks/signals_soak.py (many). One run:
start the command (its own session, so a signal to its process group is what a terminal's Ctrl-C
is), wait until the server has received its first request, wait a seeded random time more, note the
command's processes, send the signals, and read back what is on disk. `problems` says what is wrong
with an outcome, in words; an empty list is a pass.

What "every finished request is kept" means here: the server stamps the moment it wrote each
request's last byte (`Served.end_s`, on the clock the test shares with it: CLOCK_MONOTONIC). Those
that ended before the first signal must all be in the file, except those whose last bytes were
still on their way to the client when the signal came — at most one per request in flight, i.e.
the concurrency. And the file can hold no more requests than the server ever finished.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fake_openai import FakeProcess, Served

import gpuscout
from gpuscout.errors import GpuscoutError
from gpuscout.results.store import load_result
from processes import descendants, gone, running

CONCURRENCY = 4


@dataclass(frozen=True)
class StopPlan:
    """Which signals, how far apart, to whom: the process group (a terminal's Ctrl-C), the process, or one
    of its `--workers` processes (someone's `kill` of it)."""

    name: str
    signals: tuple[signal.Signals, ...]
    workers: int = 1
    to: str = "group"  # group | parent | worker
    max_gap_s: float = 0.05  # the later signals come 0 … this long after the one before
    max_delay_s: float = 1.2  # the first comes 0 … this long after the server's first request

    @property
    def first(self) -> signal.Signals:
        return self.signals[0]


@dataclass
class Outcome:
    plan: StopPlan
    returncode: int
    stderr: str
    kept: int | None  # requests in the file (None: no file)
    file_error: str | None  # why the file could not be read, if it could not
    notes: tuple[str, ...]
    ended_before: int  # requests the server finished before the first signal
    ended_ever: int  # requests the server finished at all
    processes: list[int] = field(default_factory=list)  # the command's processes when the signal came
    left: list[int] = field(default_factory=list)  # of them, those still running after the command ended
    signals_sent: int = 0
    delay_s: float = 0.0


def gpuscout_env() -> dict[str, str]:
    """The command's environment: the gpuscout under test, a wide screen, nothing else of ours."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": "200",
            "PYTHONPATH": str(Path(gpuscout.__file__).resolve().parents[1])}


def stopped_load(server: FakeProcess, out: Path, plan: StopPlan, rng: random.Random,
                 duration_s: float = 60.0) -> Outcome:
    """One `gpuscout load` run stopped by `plan`'s signals at a moment drawn from `rng`."""
    base = len(server.records())
    proc = subprocess.Popen([sys.executable, "-m", "gpuscout", "load", server.url, "--model", "m",
                             "--concurrency", str(CONCURRENCY), "--duration", f"{duration_s:g}s", "--runs", "1",
                             "--output-tokens", "8", "--workers", str(plan.workers), "-o", str(out), "--no-store"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=gpuscout_env(),
                            start_new_session=True)
    try:
        _wait_for_requests(server, base, proc)
        delay = rng.uniform(0.0, plan.max_delay_s)
        time.sleep(delay)
        processes = [proc.pid, *descendants(proc.pid)]
        target = _target(plan, proc.pid, processes)
        t_signal = time.perf_counter()
        sent = 0
        for i, sig in enumerate(plan.signals):
            if i:
                time.sleep(rng.uniform(0.0, plan.max_gap_s))
            if proc.poll() is not None:
                break
            try:
                (os.killpg if plan.to == "group" else os.kill)(target, sig)
            except ProcessLookupError:  # it ended between the check and the signal
                break
            sent += 1
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    served = server.records()[base:]
    kept, error, notes = _read(out)
    left = [] if gone(processes, 15.0) else running(processes)
    return Outcome(plan=plan, returncode=proc.returncode, stderr=stderr, kept=kept, file_error=error, notes=notes,
                   ended_before=_ended(served, t_signal), ended_ever=_ended(served, float("inf")),
                   processes=processes, left=left, signals_sent=sent, delay_s=delay)


def problems(outcome: Outcome) -> list[str]:
    """What is wrong with a stopped run; empty when nothing is."""
    found = []
    plan = outcome.plan
    if outcome.returncode != 128 + plan.first:
        found.append(f"exit code {outcome.returncode}, not {128 + plan.first} (128 + {plan.first.name})")
    if "Traceback" in outcome.stderr:
        found.append("a traceback on stderr: " + outcome.stderr[outcome.stderr.index("Traceback"):][:600])
    if outcome.file_error is not None:
        found.append(f"the result file is unreadable: {outcome.file_error}")
    kept = outcome.kept or 0
    if kept < outcome.ended_before - CONCURRENCY:
        found.append(f"{kept} request(s) kept, but the server had finished {outcome.ended_before} before the "
                     f"signal (at most {CONCURRENCY} in flight may be dropped)")
    if kept > outcome.ended_ever:
        found.append(f"{kept} request(s) kept, but the server finished only {outcome.ended_ever}")
    if outcome.kept is not None and not any(f"interrupted by {plan.first.name}" in n for n in outcome.notes):
        found.append(f"the result does not say it was interrupted by {plan.first.name}: {outcome.notes}")
    if outcome.kept is None and outcome.file_error is None and "nothing was written" not in outcome.stderr:
        found.append("no result file, and stderr does not say why")
    if outcome.left:
        found.append(f"process(es) {outcome.left} still running after the command ended")
    return found


def _target(plan: StopPlan, pid: int, processes: list[int]) -> int:
    """The process (or group) id to signal."""
    if plan.to != "worker":
        return pid
    for candidate in processes[1:]:
        try:
            cmdline = Path(f"/proc/{candidate}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:  # a load worker (multiprocessing's resource tracker is the other child)
            return candidate
    raise AssertionError(f"no worker process among {processes}")


def _wait_for_requests(server: FakeProcess, base: int, proc: subprocess.Popen[str], limit_s: float = 120.0) -> None:
    """Until the server has received this run's first request: the command is past its start-up."""
    deadline = time.monotonic() + limit_s
    while len(server.records()) <= base:
        if proc.poll() is not None:
            raise AssertionError(f"gpuscout load ended before sending anything: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError("gpuscout load sent nothing within two minutes")
        time.sleep(0.02)


def _ended(served: list[Served], before: float) -> int:
    return sum(1 for r in served if r.end_s is not None and r.end_s < before and r.status == 200)


def _read(out: Path) -> tuple[int | None, str | None, tuple[str, ...]]:
    """(requests kept, why the file is unreadable, the result's notes); (None, None, ()) when there is no file."""
    if not out.exists():
        return None, None, ()
    try:
        result = load_result(out)
    except GpuscoutError as exc:
        return None, exc.render(), ()
    kept = 0
    for case in result.cases:
        e2e = next((m for m in case.metrics if m.name == "e2e_s"), None)
        kept += e2e.summary.n if e2e is not None and e2e.summary is not None else 0
    return kept, None, result.notes
