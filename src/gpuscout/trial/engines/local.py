"""The `local` engine: every candidate is a folder on this machine, so the whole trial runs without a cloud.

Nothing is rented and nothing bills: `launch` makes the candidate's folder, `run` starts the script with
bash in its own process group (so a stop reaches the doctor, the bench and every case process it
started), and `tear_down` stops that group: SIGTERM first, so the bench writes what finished, then
SIGKILL after a grace period. The driver still prices each box at its offer's rate, as a rehearsal of
what the same trial would cost on the offers named.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from gpuscout.trial.engine import Box, EngineError, EngineName, LaunchRequest, RunOutcome, TearDown, log_tail

# How long a stopped script gets to write what finished before it is killed: the bench writes its
# result after the case in flight is stopped, which takes a few seconds on a busy machine.
STOP_GRACE_S = 30.0
# How long processes left by a script that exited on its own get to finish exiting before they are stopped.
LEFTOVER_WAIT_S = 5.0


class LocalEngine:
    """Candidates as folders under `root`, each running the script in its own process group."""

    name: EngineName = "local"
    # The folders stay after the tear-down: the driver fetches again what a stopped script wrote on its way out.
    files_survive_tear_down = True

    def __init__(self, root: Path, *, stop_grace_s: float = STOP_GRACE_S) -> None:
        self.root = root.resolve()  # the script runs from its own folder: no path may be relative to ours
        self.stop_grace_s = stop_grace_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def launch(self, request: LaunchRequest) -> Box:
        workdir = self.root / request.candidate
        try:
            workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EngineError(f"Could not make the folder {workdir} for {request.candidate}: {exc}.") from None
        return Box(request=request, engine="local", launched_at=datetime.now(UTC), workdir=str(workdir))

    def wait_ready(self, box: Box, timeout_s: float) -> None:
        if not Path(box.workdir).is_dir():
            raise EngineError(f"The folder {box.workdir} of candidate {box.request.candidate} is gone.")
        box.ready_at = datetime.now(UTC)

    def run(self, box: Box, script: Path, timeout_s: float) -> RunOutcome:
        if box.torn_down_at is not None:
            raise EngineError(f"Candidate {box.request.candidate} was already torn down; nothing was run.")
        target = (Path(box.workdir) / "trial.sh").resolve()
        shutil.copyfile(script, target)
        log_path = Path(box.workdir) / "trial.log"
        with log_path.open("wb") as log, self._lock:
            proc = subprocess.Popen(["bash", str(target)], cwd=box.workdir, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._procs[box.request.candidate] = proc
            box.handle["pid"] = str(proc.pid)
        try:
            returncode: int | None = proc.wait(timeout=max(timeout_s, 0.0))
            timed_out = False
        except subprocess.TimeoutExpired:
            self._stop(proc)
            returncode, timed_out = None, True
        if returncode is not None and returncode < 0:  # killed by a signal: the shell's 128 + N
            returncode = 128 - returncode
        return RunOutcome(returncode=returncode, log_tail=log_tail(log_path), timed_out=timed_out)

    def fetch(self, box: Box, local_dir: Path) -> Sequence[Path]:
        source = Path(box.workdir) / "results"
        if not source.is_dir():
            return []
        local_dir.mkdir(parents=True, exist_ok=True)
        out = []
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            dest = local_dir / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.resolve() != path.resolve():
                shutil.copyfile(path, dest)
            out.append(dest)
        return out

    def tear_down(self, box: Box) -> TearDown:
        proc = self._procs.get(box.request.candidate)
        stopped = ""
        # The script may have ended while its children (a case process, a sampler) are still exiting.
        if proc is not None and (proc.poll() is None or _group_alive(proc.pid)) and not self._ended_alone(proc.pid):
            self._stop(proc)
            stopped = f"; stopped its script (process group {proc.pid})"
        if box.torn_down_at is None:
            box.torn_down_at = datetime.now(UTC)
        if proc is not None and _group_alive(proc.pid):
            return TearDown(done=False, message=f"processes of {box.request.candidate} are still running",
                            command=f"kill -KILL -- -{proc.pid}")
        return TearDown(done=True, message=f"local folder {box.workdir} kept (nothing bills){stopped}")

    def reported_cost(self, box: Box) -> float | None:
        return None

    def _ended_alone(self, pgid: int) -> bool:
        """Whether a script that already exited leaves no process behind within a few seconds."""
        proc = next((p for p in self._procs.values() if p.pid == pgid), None)
        if proc is None or proc.poll() is None:
            return False
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return not _group_alive(pgid)

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the script's whole process group, then SIGKILL when it has not ended in the grace time."""
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        # The group may outlive its leader (a case process between its own stop and exit).
        deadline = time.monotonic() + self.stop_grace_s
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(proc.pid):
            _signal_group(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + LEFTOVER_WAIT_S
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

