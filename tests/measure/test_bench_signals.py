"""A stopped bench keeps what finished: SIGTERM writes the partial result and exits 143; Ctrl-C pressed
twice, or SIGHUP then SIGTERM, at a random moment of `--runs 2` keeps every case run finished before it
and exits 128 + the first signal; SIGKILL of the bench leaves the last checkpoint on disk; in every case
no case process runs on, and no traceback."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from gpuscout.results.schema import Case
from gpuscout.results.store import load_result
from processes import children, descendants, gone
from processes import running as still_running

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def start_bench(out: Path, tmp_path: Path, *more: str) -> subprocess.Popen[str]:
    """Two cases (concurrency 1 and 2), each long enough to be killed in: many repeats of a tiny model. In a
    session of its own: a signal to its process group is what a terminal's Ctrl-C is."""
    spec = tmp_path / "job.toml"
    spec.write_text((EXAMPLES / "tiny-inference.toml").read_text().replace("concurrency = 4", "concurrency = 2")
                    .replace('model = "tiny-llama"', f'model = "{EXAMPLES / "tiny-llama"}"'))
    return subprocess.Popen([sys.executable, "-m", "gpuscout", "bench", str(spec), "-o", str(out), "--device", "cpu",
                             "--warmup", "0", "--repeats", "400", "--no-store", *more], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"})


@contextmanager
def running_bench(out: Path, tmp_path: Path, *more: str) -> Iterator[subprocess.Popen[str]]:
    """The bench, killed with its cases whatever the test's outcome (a failed test must not leave it running)."""
    bench = start_bench(out, tmp_path, *more)
    try:
        yield bench
    finally:
        for pid in descendants(bench.pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if bench.poll() is None:
            bench.kill()
            bench.communicate(timeout=60)


def wait_for_checkpoint(out: Path, bench: subprocess.Popen[str], limit_s: float = 600.0) -> None:
    """Until the first case is written (the checkpoint after it), or the bench ends."""
    deadline = time.monotonic() + limit_s
    while not out.exists():
        assert bench.poll() is None, bench.communicate()
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)


def wait_for_children(bench: subprocess.Popen[str], limit_s: float = 600.0) -> list[int]:
    """The bench's child processes, once it has one (the next case's process, started after the checkpoint):
    watched for, not assumed after a sleep, which a busy machine outlasts."""
    deadline = time.monotonic() + limit_s
    while not (now := still_running(children(bench.pid))):
        assert bench.poll() is None, bench.communicate()
        assert time.monotonic() < deadline, "the next case's process never started"
        time.sleep(0.05)
    return now


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process parents from /proc")
def test_sigterm_writes_what_finished_and_exits_143(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running_bench(out, tmp_path) as bench:
        _sigterm(out, bench)


def _sigterm(out: Path, bench: subprocess.Popen[str]) -> None:
    wait_for_checkpoint(out, bench)
    running = wait_for_children(bench)  # the second case's process is running
    bench.send_signal(signal.SIGTERM)
    _, stderr = bench.communicate(timeout=60)
    assert bench.returncode == 128 + signal.SIGTERM and "Traceback" not in stderr
    result = load_result(out)
    assert not result.complete and result.cases[0].failure is None
    assert result.cases[-1].failure is not None and result.cases[-1].failure.kind == "interrupted"
    assert "SIGTERM" in result.cases[-1].failure.message
    assert gone(running)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process parents from /proc")
def test_sigkill_of_the_bench_keeps_the_checkpoint_and_ends_the_case(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running_bench(out, tmp_path) as bench:
        _sigkill(out, bench, tmp_path)


def _sigkill(out: Path, bench: subprocess.Popen[str], tmp_path: Path) -> None:
    wait_for_checkpoint(out, bench)
    running = wait_for_children(bench)
    assert running, "the second case runs in its own process"
    bench.kill()
    bench.communicate(timeout=60)
    result = load_result(out)
    assert not result.complete and len(result.cases) == 1 and result.cases[0].failure is None
    assert any("partial" in n for n in result.notes)
    assert gone(running)  # the kernel ends the case with its parent (PR_SET_PDEATHSIG)
    assert not list(tmp_path.glob(".r.json.*.tmp"))


def finished_runs(case: Case) -> int:
    """The runs of a case that finished (an interrupted or failed one is kept beside them, not counted)."""
    return case.runs - len(case.failed_runs) - (case.failure is not None)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process parents from /proc")
@pytest.mark.parametrize(("signals", "group"), [((signal.SIGINT, signal.SIGINT), True),
                                                ((signal.SIGHUP, signal.SIGTERM), False)],
                         ids=["ctrl-c twice", "SIGHUP then SIGTERM"])
def test_repeated_signals_at_a_random_moment_keep_every_finished_run(tmp_path: Path, signals: tuple[int, ...],
                                                                      group: bool) -> None:
    out = tmp_path / "r.json"
    rng = random.Random(f"bench {signals}")
    with running_bench(out, tmp_path, "--runs", "2") as bench:
        wait_for_checkpoint(out, bench)
        time.sleep(rng.uniform(0.0, 3.0))
        before = {c.name: finished_runs(c) for c in load_result(out).cases}
        running = descendants(bench.pid)
        for i, sig in enumerate(signals):
            if i:
                time.sleep(rng.uniform(0.0, 0.1))
            (os.killpg if group else os.kill)(bench.pid, sig)
        _, stderr = bench.communicate(timeout=120)
    assert bench.returncode == 128 + signals[0] and "Traceback" not in stderr, stderr
    result = load_result(out)
    after = {c.name: finished_runs(c) for c in result.cases}
    assert all(after.get(name, 0) >= n for name, n in before.items()), (before, after)
    assert not result.complete and any(f"interrupted by {'Ctrl-C' if signals[0] == signal.SIGINT else 'SIGHUP'}"
                                       in n for n in result.notes), result.notes
    assert gone(running)
