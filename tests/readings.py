"""Recorded NVML readings of real GPUs under load, for judging telemetry without a GPU.

Plausible numbers from an H100 SXM (1,980 MHz SM boost, 700 W, PCIe gen5 x16) and an A100 SXM
(1,410 MHz, 400 W, gen4 x16): an idle stretch (model build, link trained down) then busy samples,
with an optional episode (a throttle, a second process) over some of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from gpuscout.measure.gpu_telemetry import GpuReading

OWN = 31337


def h100(t: float, **changes: Any) -> GpuReading:
    """An H100 SXM under load, at full boost, nothing else on it."""
    base = GpuReading(t_s=t, own_pid=OWN, sm_clock_mhz=1980, mem_clock_mhz=2619, temperature_c=64,
                      power_w=612.0, power_limit_w=700.0, power_default_limit_w=700.0, utilization_percent=99,
                      reasons=frozenset(), pcie_gen=5, pcie_width_lanes=16, pcie_gen_max=5, pcie_width_max_lanes=16,
                      pids=(OWN,))
    return replace(base, **changes)


def a100(t: float, **changes: Any) -> GpuReading:
    base = GpuReading(t_s=t, own_pid=OWN, sm_clock_mhz=1410, mem_clock_mhz=1593, temperature_c=71,
                      power_w=355.0, power_limit_w=400.0, power_default_limit_w=400.0, utilization_percent=100,
                      reasons=frozenset(), pcie_gen=4, pcie_width_lanes=16, pcie_gen_max=4, pcie_width_max_lanes=16,
                      pids=(OWN,))
    return replace(base, **changes)


def idle(make: Callable[..., GpuReading], t: float, **changes: Any) -> GpuReading:
    """Model build / imports: GPU idle, clocks down, PCIe link trained down to gen1."""
    return make(t, **{"utilization_percent": 0, "reasons": frozenset({"gpu_idle"}), "sm_clock_mhz": 345,
                      "power_w": 72.0, "pcie_gen": 1, **changes})


def run(make: Callable[..., GpuReading], busy: int, *, idle_first: int = 20,
        episode: Iterable[int] | None = None, **during: Any) -> list[GpuReading]:
    """`idle_first` idle samples, then `busy` busy ones; those whose busy index is in `episode`
    (every busy one when None) get `during`."""
    hit = set(range(busy) if episode is None else episode)
    readings = [idle(make, 0.05 * i) for i in range(idle_first)]
    readings += [make(0.05 * (idle_first + i), **(during if i in hit else {})) for i in range(busy)]
    return readings


# A thermal throttle (over the samples of an episode): clocks 1,410 → 1,140 MHz at 89 °C on an A100.
THERMAL: dict[str, Any] = {"reasons": frozenset({"hw_thermal_slowdown", "sw_thermal_slowdown", "hw_slowdown"}),
                           "sm_clock_mhz": 1140, "temperature_c": 89}


# --- doctor: the boundary cases (docs/doctor.md §4) -----------------------------------------------------

def rtx4090(t: float, **changes: Any) -> GpuReading:
    """An RTX 4090 under load: 2,520 MHz boost, 450 W, PCIe gen4 x16, no ECC on GeForce."""
    base = GpuReading(t_s=t, own_pid=OWN, sm_clock_mhz=2520, mem_clock_mhz=10501, temperature_c=68,
                      power_w=421.0, power_limit_w=450.0, power_default_limit_w=450.0, utilization_percent=100,
                      reasons=frozenset({"sw_power_cap"}), pcie_gen=4, pcie_width_lanes=16, pcie_gen_max=4,
                      pcie_width_max_lanes=16, pids=(OWN,))
    return replace(base, **changes)


# A degraded link: the card trained to x8 of its x16 while busy (a riser, a bifurcated slot).
DEGRADED_X8: dict[str, Any] = {"pcie_width_lanes": 8, "pcie_width_max_lanes": 8}
# A link that stays at gen1 under load (it never trained up), on a gen4 card in a gen4 slot.
STUCK_GEN1: dict[str, Any] = {"pcie_gen": 1}


class FakeNvml:
    """A stand-in for an initialised `pynvml` module: answers the calls doctor's inventory makes from
    per-GPU records; a field set to None raises, as NVML's NotSupported does."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1

    class NotSupported(Exception):
        pass

    def __init__(self, gpus: list[dict[str, Any]], driver: str = "550.54.15", cuda: int = 12040) -> None:
        self.gpus, self.driver, self.cuda = gpus, driver, cuda

    def _field(self, handle: int, key: str) -> Any:
        value = self.gpus[handle].get(key)
        if value is None:
            raise FakeNvml.NotSupported(key)
        return value

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._field(h, "name"))

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._field(h, "uuid"))

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return _Struct(total=self._field(h, "memory"), used=0)

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return self._field(h, "mig")

    def nvmlDeviceGetCurrentEccMode(self, h: int) -> int:
        return self._field(h, "ecc_mode")

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        key = ("volatile" if counter == self.NVML_VOLATILE_ECC else "aggregate") + (
            "_corrected" if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else "_uncorrected")
        return self._field(h, key)

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        return self._field(h, "retired_sbe" if cause == 0 else "retired_dbe")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._field(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return self._field(h, "remapped")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [_Struct(pid=p) for p in self._field(h, "pids")]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return []

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._field(h, "power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return self._field(h, "power_default_mw")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._field(h, "gen_max")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._field(h, "width_max")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return self._field(h, "gpu_gen_max")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._field(h, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._field(h, "width_max")


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def nvml_gpu(**changes: Any) -> dict[str, Any]:
    """One healthy H100 SXM as NVML reports it idle: ECC on, nothing retired or remapped, nobody on it."""
    base: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1b6c5f0e-0000-4000-8000-000000000000",
        "memory": 81_559 * 2**20, "mig": (0, 0), "ecc_mode": 1, "volatile_corrected": 0, "volatile_uncorrected": 0,
        "aggregate_corrected": 3, "aggregate_uncorrected": 0, "retired_sbe": [], "retired_dbe": [],
        "retired_pending": 0, "remapped": (0, 0, 0, 0), "pids": [], "power_limit_mw": 700_000,
        "power_default_mw": 700_000, "gen_max": 5, "width_max": 16, "gpu_gen_max": 5,
    }
    return base | changes


# Kernel log lines as the NVIDIA driver writes them (XID catalog format), with unrelated lines around.
KERNEL_LOG = """\
[    4.213] nvidia: loading out-of-tree module taints kernel.
[ 9120.554] NVRM: Xid (PCI:0000:18:00): 13, pid=4412, name=python, Graphics Exception: ESR 0x404600=0x80000002
[ 9187.001] NVRM: Xid (PCI:0000:2a:00): 79, pid=0, GPU has fallen off the bus.
[ 9188.310] NVRM: Xid (PCI:0000:2a:00): 79, pid=0, GPU has fallen off the bus.
[ 9201.777] NVRM: Xid (PCI:0000:3a:00): 63, pid=0, Row Remapper: New row marked for remapping, reset gpu to activate.
[ 9300.000] eth0: link up
"""
