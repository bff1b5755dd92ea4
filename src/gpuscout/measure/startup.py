"""Startup phases of one case (docs/measurement.md §1): how long until the first useful step.

A rented machine is billed from creation, so the time it spends booting, importing, initialising
CUDA and building the model is part of the job's cost. Each case records, in its own process:

    interpreter  process start → the case function runs (Python start-up, unpickling the case,
                 gpuscout and pydantic imports)
    imports      torch, transformers, peft / diffusers
    cuda_init    CUDA context creation and a first allocation (GPU only)
    model_build  building (or loading) the model on the device, adapters, optimizer
    first_step   the first training step / generation / denoising call (lazy allocations, kernel
                 selection, optimizer-state creation)
    since_boot   machine boot (`/proc/uptime`) → end of the first step; `since_created` instead
                 when the user gave the machine's creation time (`--created-at`)

Wall-clock times (`time.time`) are used because the origins (process start, boot, creation)
are wall-clock instants; the phases between them are seconds apart, so clock steps matter little.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuscout.results.schema import StartupPhase


def boot_time() -> float | None:
    """Epoch seconds of machine boot, from /proc/uptime (Linux); None elsewhere."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime


def process_start_time() -> float | None:
    """Epoch seconds at which this process started: /proc/self/stat's starttime, else psutil."""
    booted = boot_time()
    try:
        stat = Path("/proc/self/stat").read_text()
        # Field 22 (starttime, clock ticks since boot); the command name in field 2 may hold spaces.
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        if booted is not None:
            return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    try:
        psutil: Any = importlib.import_module("psutil")  # optional; imported untyped (no stubs)
    except ImportError:
        return None
    return float(psutil.Process().create_time())


class StartupClock:
    """Marks consecutive phases of a case's start-up; `phases()` returns them in order."""

    def __init__(self, created_at: float | None = None) -> None:
        self._created_at = created_at
        self._phases: list[StartupPhase] = []
        self._last = time.time()
        started = process_start_time()
        if started is not None and started <= self._last:
            self._phases.append(StartupPhase(name="interpreter", seconds=self._last - started))

    def mark(self, name: str) -> float:
        """Close the phase `name` at this instant; returns its seconds."""
        now = time.time()
        seconds = now - self._last
        self._phases.append(StartupPhase(name=name, seconds=seconds))
        self._last = now
        return seconds

    def init_cuda(self, torch: Any, device: str) -> None:
        """On CUDA: create the context and allocate once, closing the `cuda_init` phase, so the
        first timed step does not pay for it."""
        if device != "cuda":
            return
        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        self.mark("cuda_init")

    def first_step(self, seconds: float, *, started_at: float) -> None:
        """Record the first step (timed by the harness) and the time from boot/creation to its end."""
        self._phases.append(StartupPhase(name="first_step", seconds=seconds))
        end = started_at + seconds
        origin, name = (self._created_at, "since_created") if self._created_at is not None else (
            boot_time(), "since_boot")
        if origin is not None and end >= origin:
            self._phases.append(StartupPhase(name=name, seconds=end - origin))
        self._last = time.time()

    def phases(self) -> tuple[StartupPhase, ...]:
        return tuple(self._phases)


def startup_seconds(phases: Iterable[StartupPhase]) -> float:
    """The start-up a job pays in its own process (imports, CUDA init, model build, first step …).

    The machine-level phases (`since_boot`, `since_created`) are billed before the job starts and
    belong to the offer's start-up, not to the job's time.
    """
    return sum(p.seconds for p in phases if not p.name.startswith("since_"))
