"""Launching the doctor's workers with torchrun, watching the GPUs meanwhile, collecting what they wrote.

`python -m torch.distributed.run --standalone --nproc-per-node N -m gpuscout.doctor.worker`
starts one worker per GPU (or N CPU processes): the launcher a multi-GPU job itself uses. While they
run, this process samples every GPU through NVML (it holds no CUDA context of its own), and reads the
workers' reports for the progress bar. The run ends when torchrun exits, when its deadline passes
(the process group is killed and what finished is kept), or on Ctrl-C (the same, then re-raised).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscout.doctor.plan import DoctorPlan, RankReport
from gpuscout.host import usable_cores
from gpuscout.interrupts import set_parent_death_signal
from gpuscout.measure.gpu_telemetry import GpuReading, GpuSampler

POLL_S = 0.5
DOCTOR_PID_ENV = "GPUSCOUT_DOCTOR_PID"  # the workers end with the doctor, even if torchrun died first


@dataclass
class WorkerRun:
    reports: list[RankReport]
    returncode: int | None  # None: killed at the deadline or on Ctrl-C
    log_tail: str
    readings: dict[int, list[GpuReading]] = field(default_factory=dict)  # NVML index → samples
    sampling_started: dict[int, float] = field(default_factory=dict)  # monotonic instant of each one's t_s = 0
    timed_out: bool = False


def worker_command(plan_path: Path, nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "gpuscout.doctor.worker", str(plan_path)]


def run_workers(plan: DoctorPlan, nproc: int, *, deadline_s: float, nvml: Any | None = None,
                handles: dict[int, Any] | None = None,
                on_progress: Callable[[str], None] | None = None) -> WorkerRun:
    """Run the plan on `nproc` workers; KeyboardInterrupt kills them and propagates (reports are kept on disk)."""
    out = Path(plan.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    samplers = {i: GpuSampler(nvml=nvml, handle=h) for i, h in (handles or {}).items()}
    log_path = out / "workers.log"
    started: dict[int, float] = {}
    with log_path.open("w") as log:
        # Popen before the sampler threads start: preexec_fn runs in the forked child, safely only
        # while this process has no other threads.
        proc = subprocess.Popen(worker_command(plan_path, nproc), stdout=log, stderr=subprocess.STDOUT,
                                env=_worker_env(plan.device, nproc), start_new_session=True,
                                preexec_fn=_die_with_us if sys.platform == "linux" else None)
        try:
            for index, sampler in samplers.items():
                sampler.start()
                started[index] = time.monotonic()
            code, timed_out = _wait(proc, out, nproc, deadline_s, on_progress)
        finally:
            for sampler in samplers.values():
                sampler.stop()
    reports = read_reports(out, nproc)
    readings = {i: own_readings(s.readings, reports, i) for i, s in samplers.items()}
    return WorkerRun(reports=reports, returncode=code, log_tail=_tail(log_path), readings=readings,
                     sampling_started=started, timed_out=timed_out)


def _worker_env(device: str, nproc: int) -> dict[str, str]:
    """torchrun pins each worker to one intra-op thread unless told (with a warning); on the CPU the
    workers share the cores evenly instead, and on a GPU one thread each is what a training job uses."""
    env = dict(os.environ) | {DOCTOR_PID_ENV: str(os.getpid())}
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(usable_cores() // nproc, 1) if device == "cpu" else 1)
    return env


def _die_with_us() -> None:
    """In the torchrun process: the kernel kills it if the doctor dies (its workers follow, doctor.worker)."""
    set_parent_death_signal()


def _wait(proc: subprocess.Popen[bytes], out: Path, nproc: int, deadline_s: float,
          on_progress: Callable[[str], None] | None) -> tuple[int | None, bool]:
    end = time.monotonic() + deadline_s
    try:
        while proc.poll() is None:
            if time.monotonic() > end:
                _kill(proc)
                return None, True
            if on_progress is not None:
                on_progress(_current(out, nproc))
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        _kill(proc)
        raise
    return proc.returncode, False


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole session (torchrun and its workers), then SIGKILL what is left."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def read_reports(out: Path, nproc: int) -> list[RankReport]:
    """Every report a worker wrote; one cut short or unreadable is left out."""
    reports = []
    for rank in range(nproc):
        path = out / f"rank{rank}.json"
        try:
            reports.append(RankReport.model_validate_json(path.read_text()))
        except (OSError, ValidationError, ValueError):
            continue
    return reports


def _current(out: Path, nproc: int) -> str:
    """What the workers are doing now: 'matmul bf16 (2 of 8 workers)', or 'starting workers'."""
    reports = read_reports(out, nproc)
    doing = [r.current for r in reports if r.current]
    if not doing:
        return "starting workers" if not reports else "finishing"
    most = max(set(doing), key=doing.count)
    return f"{most} ({doing.count(most)} of {nproc} workers)"


def own_readings(readings: list[GpuReading], reports: list[RankReport], index: int) -> list[GpuReading]:
    """The samples of GPU `index` with its worker as 'this process': the other workers are ours too,
    so only processes that are not doctor's count as other tenants."""
    ours = {r.pid for r in reports}
    own = next((r.pid for r in reports if r.device_index == index), -1)
    return [replace(r, own_pid=own, pids=None if r.pids is None else tuple(p for p in r.pids
                                                                          if p == own or p not in ours))
            for r in readings]


def phase_readings(readings: list[GpuReading], t0: float, start: float, end: float) -> list[GpuReading]:
    """The samples taken between two instants of the monotonic clock (`t0`: when sampling began)."""
    return [r for r in readings if start <= t0 + r.t_s <= end]


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
