"""CPU telemetry around a bench case, read by the parent: other processes' load and CPU steal.

`CpuWatch` reads /proc/stat and /proc/loadavg before the case's process starts and after it is
reaped, with the CPU time of the case itself; `summarize_cpu` (pure, tested on recorded /proc
text) turns them into a `CpuTelemetry` (docs/measurement.md §1.13). Not Linux: not available.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gpuscout.results.schema import CpuTelemetry

# --- CPU: readings (parent side) --------------------------------------------------------------------

_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """/proc/stat jiffies summed over the watched CPUs (guest time is already inside user/nice)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int
    cpus: int

    @property
    def busy(self) -> int:
        return self.user + self.nice + self.system + self.irq + self.softirq


@dataclass(frozen=True, slots=True)
class CpuReading:
    times: CpuTimes
    clk_tck: int  # jiffies per second (USER_HZ)
    load_avg_1m: float | None = None


def parse_proc_stat(text: str, cpus: Collection[int] | None = None) -> CpuTimes | None:
    """Sum the `cpuN` lines for `cpus` (the aggregate `cpu` line when None or none match)."""
    aggregate: list[int] | None = None
    per_cpu: list[list[int]] = []
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu"):
            continue
        values = [int(v) for v in rest.split()[:len(_STAT_FIELDS)]]
        values += [0] * (len(_STAT_FIELDS) - len(values))  # kernels before 2.6.11 have no steal
        if name == "cpu":
            aggregate = values
        elif cpus is not None and name[3:].isdigit() and int(name[3:]) in cpus:
            per_cpu.append(values)
    if per_cpu:
        summed = [sum(col) for col in zip(*per_cpu, strict=True)]
        return CpuTimes(**dict(zip(_STAT_FIELDS, summed, strict=True)), cpus=len(per_cpu))
    if aggregate is None:
        return None
    count = sum(1 for line in text.splitlines() if line.startswith("cpu") and line[3:4].isdigit())
    return CpuTimes(**dict(zip(_STAT_FIELDS, aggregate, strict=True)), cpus=max(count, 1))


def parse_loadavg(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def affinity_cpus() -> set[int] | None:
    """The CPUs this process may run on (its children inherit them); None where the OS cannot say."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return None


def read_cpu(cpus: Collection[int] | None = None) -> CpuReading | None:
    """/proc/stat and /proc/loadavg now; None off Linux or when /proc is unreadable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        times = parse_proc_stat(Path("/proc/stat").read_text(), cpus)
        loadavg = parse_loadavg(Path("/proc/loadavg").read_text())
        clk_tck = int(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None
    return None if times is None else CpuReading(times=times, clk_tck=clk_tck, load_avg_1m=loadavg)


def self_and_children_cpu_s() -> float | None:
    """CPU seconds of this process and of its reaped children (a case counts once it was joined)."""
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += float(usage.ru_utime) + float(usage.ru_stime)
    return total


def summarize_cpu(before: CpuReading, after: CpuReading, own_cpu_s: float, elapsed_s: float,
                  cores: int) -> CpuTelemetry:
    """Load on the watched CPUs between two readings, minus this bench's own CPU time."""
    a, b = before.times, after.times

    def seconds(field: str) -> float:
        # Clamped: per-CPU iowait can go backwards on tickless kernels (proc(5)).
        return max(int(getattr(b, field)) - int(getattr(a, field)), 0) / after.clk_tck

    busy_s = sum(seconds(f) for f in ("user", "nice", "system", "irq", "softirq"))
    steal_s, iowait_s = seconds("steal"), seconds("iowait")
    total_s = busy_s + steal_s + iowait_s + seconds("idle")
    per_s = 1.0 / elapsed_s if elapsed_s > 0 else 0.0
    return CpuTelemetry(
        elapsed_s=elapsed_s, cpus_watched=b.cpus, usable_cores=cores,
        own_cpu_s=own_cpu_s, own_cores=own_cpu_s * per_s, busy_cores=busy_s * per_s,
        other_load_cores=max(busy_s - own_cpu_s, 0.0) * per_s,
        steal_s=steal_s, steal_fraction=steal_s / (busy_s + steal_s) if busy_s + steal_s > 0 else 0.0,
        iowait_fraction=iowait_s / total_s if total_s > 0 else 0.0,
        load_avg_1m_before=before.load_avg_1m, load_avg_1m_after=after.load_avg_1m,
    )


class CpuWatch:
    """`with CpuWatch() as watch: run the case` then `watch.result()`, in the process that spawns it.

    Exit the block only after the case's process was reaped (run_isolated does), or its CPU time
    is missing from RUSAGE_CHILDREN. `result()` is None off Linux.
    """

    def __init__(self, cpus: Collection[int] | None = None) -> None:
        self._cpus = cpus if cpus is not None else affinity_cpus()
        self._before: CpuReading | None = None
        self._after: CpuReading | None = None
        self._own: tuple[float | None, float | None] = (None, None)
        self._t: tuple[float, float] = (0.0, 0.0)

    def __enter__(self) -> CpuWatch:
        self._before = read_cpu(self._cpus)
        self._own = (self_and_children_cpu_s(), None)
        self._t = (time.monotonic(), 0.0)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._t = (self._t[0], time.monotonic())
        self._own = (self._own[0], self_and_children_cpu_s())
        self._after = read_cpu(self._cpus)

    def result(self) -> CpuTelemetry | None:
        own_before, own_after = self._own
        if self._before is None or self._after is None or own_before is None or own_after is None:
            return None
        cores = len(self._cpus) if self._cpus else self._after.times.cpus
        return summarize_cpu(self._before, self._after, own_after - own_before, self._t[1] - self._t[0], cores)
