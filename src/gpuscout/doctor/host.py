"""The host and the start-up: CPU cores, RAM, disk, checkpoint, network, creation → ready (docs/doctor.md §4.4–4.5).

Cores and RAM are held against the offer as the operating system grants them to this process: the
CPU affinity and the cgroup's CPU quota, the RAM and the cgroup's memory limit (a container sees
the host's totals otherwise). The disk is held against a floor, the checkpoint and the network are
reported. The start-up is the time from the machine's creation to the first GPU ready for work.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from gpuscout.doctor.identity import Expected
from gpuscout.doctor.performance import metric
from gpuscout.doctor.verdict import finding, info, judge, shown
from gpuscout.hardware.bands import floor_for
from gpuscout.host import ram_bytes, usable_cores
from gpuscout.measure.startup import boot_time
from gpuscout.results.schema import Case, DoctorFinding, Metric, StartupPhase

# The OS keeps some RAM for the kernel and firmware; MemTotal of a 64 GB machine reads ~62-63 GB.
# Below 90% of what the offer states, the machine has less memory than was sold (ASSUMPTION).
RAM_SHARE_MIN = 0.90
# A boot older than this is not this rental's: a container on a long-running host sees the host's
# uptime, so "since boot" would count days of someone else's time (ASSUMPTION: launches take minutes).
FRESH_BOOT_S = 3600.0
CGROUP = Path("/sys/fs/cgroup")


def granted_cores() -> float:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (cpu.max)."""
    cores = float(usable_cores())
    try:
        quota, period = (CGROUP / "cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, int(quota) / int(period))
    except (OSError, ValueError):
        pass
    return cores


def granted_ram_bytes() -> int | None:
    """Physical RAM, capped by a cgroup v2 memory limit (memory.max)."""
    ram = ram_bytes()
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            ram = min(ram, int(limit)) if ram is not None else int(limit)
    except (OSError, ValueError):
        pass
    return ram


def host_findings(expected: Expected, cores: float, ram: int | None) -> list[DoctorFinding]:
    out = []
    if expected.vcpus is not None:
        enough = cores >= expected.vcpus - 0.5
        out.append(finding("cpu cores", "host", "pass" if enough else "fail",
                           f"{cores:g} cores granted to this process; {expected.source} has {expected.vcpus:g} vCPUs",
                           value=cores))
    else:
        out.append(info("cpu cores", "host", f"{cores:g} cores granted to this process", value=cores))
    if ram is not None and expected.ram_bytes:
        share = ram / expected.ram_bytes
        out.append(finding("ram", "host", "pass" if share >= RAM_SHARE_MIN else "fail",
                           f"{ram / 1e9:.1f} GB of RAM; {expected.source} has {expected.ram_bytes / 1e9:g} GB "
                           f"({share:.0%})", value=ram, unit="bytes"))
    elif ram is not None:
        out.append(info("ram", "host", f"{ram / 1e9:.1f} GB of RAM", value=ram, unit="bytes"))
    return out


def disk_findings(case: Case | None) -> list[DoctorFinding]:
    if case is None:
        return []
    if case.failure is not None:
        return [finding("disk", "host", "error", f"disk: {case.failure.message[:160]}")]
    out = []
    for name, check in (("disk_write_bytes_per_s", "disk_write"), ("disk_read_bytes_per_s", "disk_read")):
        m, floor = metric(case, name), floor_for(check)
        if m is not None and floor is not None:
            out.append(judge(check.replace("_", " "), "host", m.value, "bytes/s", floor))
    return out


def checkpoint_findings(case: Case | None) -> list[DoctorFinding]:
    if case is None:
        return []
    if case.failure is not None:
        return [finding("checkpoint", "host", "error", f"checkpoint save/load: {case.failure.message[:160]}")]
    save, load = metric(case, "checkpoint_save_s"), metric(case, "checkpoint_load_s")
    size = case.params.get("checkpoint_bytes")
    if save is None or load is None or not isinstance(size, int):
        return []
    rates = shown(size / save.value, "bytes/s"), shown(size / load.value, "bytes/s")
    sized = f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"
    return [info("checkpoint", "host", f"checkpoint of {sized}: save {_took(save.value)} ({rates[0]}), "
                 f"load {_took(load.value)} ({rates[1]})")]


def _took(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def network_findings(case: Case | None) -> list[DoctorFinding]:
    if case is None:
        return []
    if case.failure is not None:
        return [finding("network", "network", "error", f"network: {case.failure.message.splitlines()[0][:200]}")]
    rtt, down = metric(case, "http_keepalive_s"), metric(case, "download_bytes_per_s")
    parts = [f"round trip {rtt.value * 1000:.1f} ms" if rtt else "no round trip measured",
             f"download {shown(down.value, 'bytes/s')}" if down else "no download measured"]
    where = case.params.get("url")
    return [info("network", "network", f"network to {where}: " + ", ".join(parts))]


# --- start-up -----------------------------------------------------------------------------------------

def startup_case(created_at: float | None, ready_at: float | None, *, now: float | None = None) -> Case | None:
    """Creation (given) or a fresh boot → the first GPU (or CPU worker) ready, as a case; None when
    neither origin is known or the origin lies after the ready time."""
    if ready_at is None:
        return None
    origin, name = (created_at, "created_at") if created_at is not None else (_fresh_boot(now), "boot")
    if origin is None or not math.isfinite(origin) or ready_at < origin:
        return None
    seconds = ready_at - origin
    note = ("--created-at → the first device ready for work in doctor's workers" if name == "created_at" else
            "machine boot (/proc/uptime) → the first device ready in doctor's workers; pass --created-at for "
            "the time billing may have started")
    return Case(name="start-up", params={"origin": name},
                metrics=(Metric(name="startup_s", unit="s", value=seconds, note=note),),
                startup=(StartupPhase(name=f"since_{'created' if name == 'created_at' else 'boot'}", seconds=seconds),))


def _fresh_boot(now: float | None) -> float | None:
    booted = boot_time()
    current = now if now is not None else time.time()
    return booted if booted is not None and current - booted <= FRESH_BOOT_S else None


def startup_findings(case: Case | None, expected: Expected) -> list[DoctorFinding]:
    if case is None:
        return [info("start-up", "startup", "start-up not measured: pass --created-at (the machine's creation "
                     "time, from the provider) to measure it")]
    seconds = case.metrics[0].value
    origin = "creation" if case.params.get("origin") == "created_at" else "boot"
    text = f"{origin} → the first device ready for work in {seconds:,.0f} s"
    if expected.launch_s:
        text += f"; the offer assumes {expected.launch_s:,.0f} s (pick --doctor FILE uses the measured figure)"
    text += " — run by hand, this includes the time before doctor was started: an upper bound"
    return [info("start-up", "startup", text, value=seconds, unit="s")]
