"""A stopped bench keeps what finished: SIGTERM writes the partial result and exits 143; SIGKILL of the
bench leaves the last checkpoint on disk; either way no case process runs on, and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from gpuscout.results.store import load_result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def start_bench(out: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """Two cases (concurrency 1 and 2), each long enough to be killed in: many repeats of a tiny model."""
    spec = tmp_path / "job.toml"
    spec.write_text((EXAMPLES / "tiny-inference.toml").read_text().replace("concurrency = 4", "concurrency = 2")
                    .replace('model = "tiny-llama"', f'model = "{EXAMPLES / "tiny-llama"}"'))
    return subprocess.Popen([sys.executable, "-m", "gpuscout", "bench", str(spec), "-o", str(out), "--device", "cpu",
                             "--warmup", "0", "--repeats", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"})


@contextmanager
def running_bench(out: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """The bench, killed with its cases whatever the test's outcome (a failed test must not leave it running)."""
    bench = start_bench(out, tmp_path)
    try:
        yield bench
    finally:
        for pid in children(bench.pid):
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
    while not (running := [p for p in children(bench.pid) if "Z" not in _state(p)]):
        assert bench.poll() is None, bench.communicate()
        assert time.monotonic() < deadline, "the next case's process never started"
        time.sleep(0.05)
    return running


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def gone(pids: list[int], limit_s: float = 20.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


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
