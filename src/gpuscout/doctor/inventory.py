"""What the driver says about every GPU before doctor loads it: identity and health counters.

Read from NVML in the doctor's own process, which never creates a CUDA context, so processes found
on a GPU here belong to someone else. Every field an NVML call cannot give (GeForce has no ECC, old
drivers lack row remapping, MIG hides some counters) is None, never a failure. The kernel log's XID
lines are read where `dmesg` is permitted. The machine's identity (hostname, boot id, GPU UUIDs) is
hashed, so a bench result can carry the doctor result of its own machine and refuse another's.

Reading and judging are apart: `health` and `identity` judge these records, and the
tests feed them recorded values (tests/readings.py).
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.measure.gpu_telemetry import NvmlReader
from gpuscout.results.schema import MachineIdentity


@dataclass(frozen=True)
class GpuInventory:
    """One GPU as NVML describes it, idle, before doctor starts. None: NVML could not say."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    mig_enabled: bool | None = None
    pcie_gen_max: int | None = None  # the most this GPU and this system support together
    pcie_width_max: int | None = None
    pcie_gen_gpu_max: int | None = None  # the most the GPU itself supports (a gen5 card in a gen4 slot)
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None  # since the driver loaded
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None  # over the GPU's life
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None  # pages retired after repeated single-bit errors
    retired_pages_dbe: int | None = None  # after a double-bit (uncorrectable) error
    retired_pages_pending: bool | None = None  # a retirement waits for the next driver reload
    remapped_rows_correctable: int | None = None  # Ampere and later: rows remapped instead of pages retired
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None  # a remap waits for a GPU reset
    remap_failed: bool | None = None  # a remap failed at some point in the GPU's life
    pids: tuple[int, ...] | None = None  # processes holding a context on it right now
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None


@dataclass(frozen=True)
class Xid:
    """One XID line of the kernel log: the driver reporting a GPU error (NVIDIA's XID catalog)."""

    code: int
    pci: str
    text: str


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInventory, ...]
    driver: str | None = None
    cuda_driver: str | None = None  # the CUDA version the driver supports (nvidia-smi's "CUDA Version")
    xids: tuple[Xid, ...] = ()
    xids_readable: bool = False
    xid_note: str = ""
    nvml: bool = False  # False: no NVML here (no nvidia-ml-py, no driver, a CPU machine)


def _try(call: Callable[[], Any]) -> Any | None:
    try:
        return call()
    except Exception:  # NVMLError_* per cause, AttributeError on old bindings: "not available"
        return None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def read_inventory(nvml: Any | None, *, kernel_log: str | None = None) -> Inventory:
    """Every GPU NVML lists (it ignores CUDA_VISIBLE_DEVICES), the driver, and the kernel log's XIDs.

    `nvml` is an initialised pynvml module (None: no NVML); `kernel_log` replaces `dmesg` in tests.
    """
    xids, readable, note = parse_xids(kernel_log) if kernel_log is not None else read_xids()
    if nvml is None:
        return Inventory(gpus=(), xids=xids, xids_readable=readable, xid_note=note)
    count = _int(_try(nvml.nvmlDeviceGetCount)) or 0
    gpus = tuple(read_gpu(nvml, i) for i in range(count))
    cuda = _int(_try(nvml.nvmlSystemGetCudaDriverVersion))
    return Inventory(gpus=gpus, driver=_text(_try(nvml.nvmlSystemGetDriverVersion)),
                     cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
                     xids=xids, xids_readable=readable, xid_note=note, nvml=True)


def read_gpu(nvml: Any, index: int) -> GpuInventory:
    handle = _try(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        return GpuInventory(index=index)
    memory = _try(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    mig = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
    ecc = _try(lambda: nvml.nvmlDeviceGetCurrentEccMode(handle))
    reader = NvmlReader(nvml, handle, own_pid=-1)  # the telemetry reader's ECC, power and process calls
    idle = reader.read(0.0, ecc=True)
    return GpuInventory(
        index=index, name=_text(_try(lambda: nvml.nvmlDeviceGetName(handle))),
        uuid=_text(_try(lambda: nvml.nvmlDeviceGetUUID(handle))),
        memory_total_bytes=_int(memory.total) if memory is not None else None,
        mig_enabled=bool(mig[0]) if mig is not None else None,
        pcie_gen_max=idle.pcie_gen_max, pcie_width_max=idle.pcie_width_max_lanes,
        pcie_gen_gpu_max=_int(_try(lambda: nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle))),
        ecc_enabled=bool(ecc) if ecc is not None else None,
        ecc_volatile_corrected=idle.ecc_corrected, ecc_volatile_uncorrected=idle.ecc_uncorrected,
        ecc_aggregate_corrected=_ecc_total(nvml, handle, "CORRECTED"),
        ecc_aggregate_uncorrected=_ecc_total(nvml, handle, "UNCORRECTED"),
        **_retired_pages(nvml, handle), **_remapped_rows(nvml, handle),
        pids=idle.pids, power_limit_w=idle.power_limit_w, power_default_limit_w=idle.power_default_limit_w,
    )


def _ecc_total(nvml: Any, handle: Any, kind: str) -> int | None:
    return _int(_try(lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, getattr(nvml, f"NVML_MEMORY_ERROR_TYPE_{kind}"),
                                                               nvml.NVML_AGGREGATE_ECC)))


def _retired_pages(nvml: Any, handle: Any) -> dict[str, Any]:
    """Dynamic page retirement (pre-Ampere datacenter GPUs; NVIDIA's dynamic page retirement docs)."""
    def count(cause: str) -> int | None:
        pages = _try(lambda: nvml.nvmlDeviceGetRetiredPages(handle, getattr(nvml, cause)))
        return None if pages is None else len(pages)

    pending = _try(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    return {"retired_pages_sbe": count("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
            "retired_pages_dbe": count("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
            "retired_pages_pending": None if pending is None else bool(int(pending))}


def _remapped_rows(nvml: Any, handle: Any) -> dict[str, Any]:
    """Row remapping (Ampere and later): (correctable, uncorrectable, pending, failure occurred)."""
    rows = _try(lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    if rows is None:
        return {}
    corr, unc, pending, failed = (int(v) for v in rows)
    return {"remapped_rows_correctable": corr, "remapped_rows_uncorrectable": unc, "remap_pending": bool(pending),
            "remap_failed": bool(failed)}


# --- the kernel log ---------------------------------------------------------------------------------

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus." (NVIDIA XID catalog format)
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)")


def read_xids() -> tuple[tuple[Xid, ...], bool, str]:
    """XIDs since boot from `dmesg`; unreadable where the kernel restricts it (kernel.dmesg_restrict=1)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return (), False, f"dmesg could not run ({type(exc).__name__})"
    if done.returncode != 0:
        return (), False, f"dmesg refused: {done.stderr.strip()[:120] or f'exit code {done.returncode}'}"
    return parse_xids(done.stdout)


def parse_xids(text: str) -> tuple[tuple[Xid, ...], bool, str]:
    found = [Xid(code=int(m.group(2)), pci=m.group(1), text=m.group(3).strip()[:200])
             for m in (XID_LINE.search(line) for line in text.splitlines()) if m]
    return tuple(found), True, ""


# --- identity ---------------------------------------------------------------------------------------

def _hash(value: str | None) -> str | None:
    return None if not value else hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def machine_identity(gpu_uuids: tuple[str | None, ...] = ()) -> MachineIdentity:
    """This machine's hashed hostname, boot id and GPU UUIDs (docs/doctor.md §5)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return MachineIdentity(host=_hash(socket.gethostname()), boot=_hash(boot),
                           gpus=tuple(h for h in (_hash(u) for u in gpu_uuids) if h))


def current_identity() -> MachineIdentity:
    """`machine_identity` with the UUIDs NVML lists here (none on a CPU machine)."""
    from gpuscout.measure.peak_memory import open_nvml

    nvml = open_nvml()
    if nvml is None:
        return machine_identity()
    count = _int(_try(nvml.nvmlDeviceGetCount)) or 0
    return machine_identity(tuple(_uuid(nvml, i) for i in range(count)))


def _uuid(nvml: Any, index: int) -> str | None:
    return _text(_try(lambda: nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))))


def different_machine(doctor: MachineIdentity, here: MachineIdentity) -> str:
    """Why a doctor result is not of this machine ("" when it is): the GPUs decide where both have
    them (a reboot keeps them), else the hostname and the boot."""
    if doctor.gpus or here.gpus:
        missing = [g for g in here.gpus if g not in doctor.gpus]
        if not here.gpus or not doctor.gpus or missing:
            return (f"its GPUs differ ({len(missing) or len(here.gpus)} of this machine's {len(here.gpus)} GPUs are "
                    f"not among its {len(doctor.gpus)})")
        return ""
    if doctor.host != here.host:
        return "it was written on another host"
    if doctor.boot != here.boot:
        return "this machine has rebooted since (another boot id)"
    return ""
