"""GPU telemetry from NVML during a bench case: readings in a sampling thread, and their summary.

`GpuSampler` runs in the case process and samples NVML every 50 ms; `summarize_gpu` turns the
readings into a `GpuTelemetry` (pure, tested on recorded readings). The judging of what the
numbers mean lives in `measure.telemetry` (docs/measurement.md §1.13).

NVML (nvidia-ml-py, imported as `pynvml`) is optional and untyped: it is reached through
`peak_memory.open_nvml` inside functions, typed `Any`, and every call may raise an `NVMLError`
(not supported on this GPU, no permission, GPU lost); a failed field is recorded as None.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any

from gpuscout.results.schema import GpuTelemetry

# 50 ms: 20 samples a second resolves a 5% throttle share in a 1 s case; the slowest NVML fields
# (power averaged over 1 s since Ampere bar the A100, utilization over 1/6–1 s) gain nothing from
# faster sampling. A thread of its own, not inside peak_memory's 10 ms loop (which stays as it is):
# ~11 NVML calls per sample would stretch that loop's period; NVML is thread-safe, and ctypes
# releases the GIL during each call.
GPU_SAMPLE_PERIOD_S = 0.050
# Above this many readings, every other one is dropped and the period doubles: a 30-minute case
# keeps ~20,000 readings (a few MB) at an even spacing instead of growing without bound.
MAX_READINGS = 20_000

# A sample counts as "busy" when kernels ran in at least this share of NVML's last utilization window
# (nvidia-smi `utilization.gpu`) and the GPU-idle clock reason is clear. Throttling and the link
# are judged on busy samples only: at idle the clocks drop and the PCIe link trains down by design,
# and model building / imports at the start of a case leave the GPU idle for seconds.
BUSY_UTILIZATION_PERCENT = 25



# Our name for each NVML clock-event reason (the nvidia-smi `clocks_event_reasons.*` field names),
# and the suffix pynvml uses after `nvmlClocksEventReason` or the older `nvmlClocksThrottleReason`.
REASON_SUFFIXES: dict[str, str] = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
    "board_limit": "BoardLimit",
    "reliability": "Reliability",
}
THERMAL_REASONS = frozenset({"hw_thermal_slowdown", "sw_thermal_slowdown"})
POWER_CAP_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
POWER_BRAKE_REASONS = frozenset({"hw_power_brake_slowdown"})
HW_SLOWDOWN_REASONS = frozenset({"hw_slowdown"})
# NVML sets HW slowdown alongside HW thermal slowdown and the HW power brake; those samples are
# already reported under their cause, so the hw_slowdown finding counts the unexplained ones.
HW_SLOWDOWN_EXPLAINED_BY = frozenset({"hw_thermal_slowdown", "hw_power_brake_slowdown"})
# The current NVML name first; drivers before R535 only have the throttle-named function.
REASON_FUNCTIONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


# --- GPU: readings ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GpuReading:
    """One NVML sample; None = that call failed. Units as nvidia-smi prints them."""

    t_s: float  # since sampling started
    own_pid: int
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    utilization_percent: int | None = None
    reasons: frozenset[str] | None = None
    pcie_gen: int | None = None
    pcie_width_lanes: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max_lanes: int | None = None
    ecc_corrected: int | None = None  # read at the first and last sample only
    ecc_uncorrected: int | None = None
    pids: tuple[int, ...] | None = None  # compute and graphics processes on the GPU, this one included


def _try(call: Callable[[], Any]) -> Any | None:
    """The call's value, or None: pynvml raises an NVMLError subclass per cause (NotSupported on
    GeForce ECC, NoPermission, GpuIsLost, FunctionNotFound on old drivers) and old bindings lack
    some functions (AttributeError); each means "not available", never a failed case."""
    try:
        return call()
    except Exception:
        return None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


def reason_bits(nvml: Any) -> dict[str, int]:
    """Each named reason's bit, from pynvml's constants (the event name, else the older throttle name)."""
    bits: dict[str, int] = {}
    for name, suffix in REASON_SUFFIXES.items():
        value = getattr(nvml, f"nvmlClocksEventReason{suffix}", None)
        if value is None:
            value = getattr(nvml, f"nvmlClocksThrottleReason{suffix}", None)
        if isinstance(value, int) and value:
            bits[name] = value
    return bits


def decode_reasons(mask: int, bits: dict[str, int]) -> frozenset[str]:
    """The named reasons set in `mask`; bits pynvml has no name for become `unknown_0x…`."""
    names = {name for name, bit in bits.items() if mask & bit}
    known = 0
    for bit in bits.values():
        known |= bit
    if mask & ~known:
        names.add(f"unknown_{mask & ~known:#x}")
    return frozenset(names)


class NvmlReader:
    """Reads one `GpuReading` at a time from an initialised pynvml module and a device handle."""

    def __init__(self, nvml: Any, handle: Any, own_pid: int) -> None:
        self._nvml = nvml
        self._handle = handle
        self._own_pid = own_pid
        self._bits = reason_bits(nvml)
        self._reasons_fn = self._working_reasons_function()
        # Fixed for the case: read once.
        self._gen_max = _int(_try(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
        self._width_max = _int(_try(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)))
        self._default_limit_w = _watts(_try(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)))

    def _working_reasons_function(self) -> Any | None:
        """The first reasons function this driver answers: R535+ has the event name, older only the other."""
        for name in REASON_FUNCTIONS:
            fn: Any = getattr(self._nvml, name, None)
            if fn is not None and _try(partial(fn, self._handle)) is not None:
                return fn
        return None

    def read(self, t_s: float, *, ecc: bool = False) -> GpuReading:
        nvml, handle = self._nvml, self._handle
        corrected, uncorrected = self._ecc() if ecc else (None, None)
        return GpuReading(
            t_s=t_s, own_pid=self._own_pid,
            sm_clock_mhz=_int(_try(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
            mem_clock_mhz=_int(_try(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))),
            temperature_c=_int(_try(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
            power_w=_watts(_try(lambda: nvml.nvmlDeviceGetPowerUsage(handle))),
            power_limit_w=_watts(_try(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))),
            power_default_limit_w=self._default_limit_w,
            utilization_percent=_int(_try(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            reasons=self._reasons(),
            pcie_gen=_int(_try(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))),
            pcie_width_lanes=_int(_try(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))),
            pcie_gen_max=self._gen_max, pcie_width_max_lanes=self._width_max,
            ecc_corrected=corrected, ecc_uncorrected=uncorrected,
            pids=self._pids(),
        )

    def _reasons(self) -> frozenset[str] | None:
        fn = self._reasons_fn
        mask = None if fn is None else _try(lambda: fn(self._handle))
        return None if mask is None else decode_reasons(int(mask), self._bits)

    def _ecc(self) -> tuple[int | None, int | None]:
        """Volatile (since the driver loaded) corrected and uncorrected totals; GeForce: not supported."""
        nvml, handle = self._nvml, self._handle

        def total(kind: str) -> int | None:
            return _int(_try(lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, getattr(nvml, kind),
                                                                         nvml.NVML_VOLATILE_ECC)))

        return total("NVML_MEMORY_ERROR_TYPE_CORRECTED"), total("NVML_MEMORY_ERROR_TYPE_UNCORRECTED")

    def _pids(self) -> tuple[int, ...] | None:
        nvml, handle = self._nvml, self._handle
        lists = [_try(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)),
                 _try(lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))]
        if all(found is None for found in lists):
            return None
        return tuple(sorted({int(proc.pid) for found in lists if found is not None for proc in found}))


def thin_readings(readings: list[GpuReading]) -> list[GpuReading]:
    """Every other reading, keeping the first and the last (the ECC before/after)."""
    kept = readings[::2]
    if readings and kept[-1] is not readings[-1]:
        kept.append(readings[-1])
    return kept


class GpuSampler:
    """Samples this process's GPU through NVML in a daemon thread while the `with` block runs.

    Does nothing where NVML cannot start (no nvidia-ml-py, no driver): `result()` is then None.
    `nvml` and `handle` are for tests and callers that already hold them; by default the sampler
    opens NVML with `peak_memory.open_nvml` and finds torch's current device by UUID.
    """

    def __init__(self, period_s: float = GPU_SAMPLE_PERIOD_S, *, nvml: Any | None = None,
                 handle: Any | None = None) -> None:
        self.period_s = period_s
        self._nvml = nvml
        self._handle = handle
        self._reader: NvmlReader | None = None
        self._readings: list[GpuReading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuscout-telemetry", daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def readings(self) -> list[GpuReading]:
        return list(self._readings)

    def start(self) -> None:
        self._reader = self._open()
        if self._reader is None:
            return
        self._t0 = time.monotonic()
        self._readings.append(self._reader.read(0.0, ecc=True))
        self._thread.start()

    def stop(self) -> None:
        if self._reader is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=2)
        self._readings.append(self._reader.read(time.monotonic() - self._t0, ecc=True))

    def result(self) -> GpuTelemetry | None:
        return summarize_gpu(self._readings) if self._readings else None

    def _open(self) -> NvmlReader | None:
        nvml, handle = self._nvml, self._handle
        if nvml is None:
            # The one NVML opener (peak_memory), imported here so this module loads without torch/NVML.
            from gpuscout.measure.peak_memory import nvml_handle_for_current_device, open_nvml

            nvml = open_nvml()
            if nvml is None:
                return None
        if handle is None:
            handle = _try(lambda: nvml_handle_for_current_device(nvml))  # torch missing or no CUDA: None
            if handle is None:
                return None
        return NvmlReader(nvml, handle, os.getpid())

    def _run(self) -> None:
        reader = self._reader
        assert reader is not None  # started only after the reader opened
        while not self._stop.wait(self.period_s):
            self._readings.append(reader.read(time.monotonic() - self._t0))
            if len(self._readings) >= MAX_READINGS:
                self._readings = thin_readings(self._readings)
                self.period_s *= 2


# --- GPU: summary -----------------------------------------------------------------------------------

def _is_busy(reading: GpuReading) -> bool | None:
    """Busy = under load at working clocks; None when neither utilization nor reasons were readable."""
    if reading.reasons is not None and "gpu_idle" in reading.reasons:
        return False
    if reading.utilization_percent is not None:
        return reading.utilization_percent >= BUSY_UTILIZATION_PERCENT
    return True if reading.reasons is not None else None


def busy_readings(readings: Sequence[GpuReading]) -> list[GpuReading]:
    """The samples taken under load; all of them when no sample could say (judge on what there is)."""
    verdicts = [_is_busy(r) for r in readings]
    if all(v is None for v in verdicts):
        return list(readings)
    return [r for r, v in zip(readings, verdicts, strict=True) if v]


def _present(values: Iterable[int | float | None]) -> list[float]:
    return [float(v) for v in values if v is not None]


def _median(values: Iterable[int | float | None]) -> float | None:
    present = _present(values)
    return statistics.median(present) if present else None


def _max_int(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _min_int(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _share(busy: Sequence[GpuReading], group: frozenset[str],
           unless: frozenset[str] = frozenset()) -> tuple[float | None, float | None]:
    """Share of busy samples with a reason of `group` set (and none of `unless`), and their median SM clock."""
    known = [r for r in busy if r.reasons is not None]
    if not known:
        return None, None
    hit = [r for r in known if r.reasons and r.reasons & group and not r.reasons & unless]
    return len(hit) / len(known), _median(r.sm_clock_mhz for r in hit)


def _reason_fractions(busy: Sequence[GpuReading]) -> dict[str, float]:
    known = [r.reasons for r in busy if r.reasons is not None]
    names = sorted({name for reasons in known for name in reasons})
    return {name: sum(name in reasons for reasons in known) / len(known) for name in names}


def _ecc_delta(values: Sequence[int | None]) -> int | None:
    """Last − first reading; None without two readings, or when the counter went back (driver reload)."""
    present = [v for v in values if v is not None]
    if len(present) < 2 or present[-1] < present[0]:
        return None
    return present[-1] - present[0]


def _processes(readings: Sequence[GpuReading]) -> tuple[int | None, tuple[int, ...], bool | None]:
    """(most other processes at one time, their pids, whether NVML listed this process's own pid).

    In a container with its own PID namespace NVML lists host pids (NVIDIA/nvidia-docker#1483), so
    this process is not found under `os.getpid()`; one listed process is then taken to be this one.
    No process listed in any sample: NVML hides them here, so the count is unknown.
    """
    seen = [r for r in readings if r.pids is not None]
    if not any(r.pids for r in seen):
        return None, (), None
    own_listed = any(r.own_pid in (r.pids or ()) for r in seen)
    if own_listed:
        others = [set(r.pids or ()) - {r.own_pid} for r in seen]
        return max(len(o) for o in others), tuple(sorted({p for o in others for p in o})), True
    most = max(max(len(r.pids or ()) - 1, 0) for r in seen)
    return most, tuple(sorted({p for r in seen for p in (r.pids or ())})), False


def summarize_gpu(readings: Sequence[GpuReading]) -> GpuTelemetry:
    """Clocks, power and throttling over the busy samples; link, ECC and other processes over all."""
    busy = busy_readings(readings)
    thermal, thermal_clock = _share(busy, THERMAL_REASONS)
    cap, cap_clock = _share(busy, POWER_CAP_REASONS)
    brake, _ = _share(busy, POWER_BRAKE_REASONS)
    slowdown, slowdown_clock = _share(busy, HW_SLOWDOWN_REASONS, unless=HW_SLOWDOWN_EXPLAINED_BY)
    others, other_pids, own_listed = _processes(readings)
    power_limits = _present(r.power_limit_w for r in readings)
    return GpuTelemetry(
        samples=len(readings), busy_samples=len(busy),
        duration_s=readings[-1].t_s - readings[0].t_s if readings else 0.0,
        sm_clock_busy_max_mhz=_max_int(r.sm_clock_mhz for r in busy),
        sm_clock_busy_median_mhz=_median(r.sm_clock_mhz for r in busy),
        mem_clock_busy_median_mhz=_median(r.mem_clock_mhz for r in busy),
        temperature_max_c=_max_int(r.temperature_c for r in readings),
        power_busy_median_w=_median(r.power_w for r in busy),
        power_max_w=max(_present(r.power_w for r in readings), default=None),
        power_limit_w=min(power_limits) if power_limits else None,
        power_default_limit_w=next((r.power_default_limit_w for r in readings
                                    if r.power_default_limit_w is not None), None),
        reason_fractions=_reason_fractions(busy),
        thermal_fraction=thermal, thermal_sm_clock_mhz=thermal_clock,
        power_cap_fraction=cap, power_cap_sm_clock_mhz=cap_clock, power_brake_fraction=brake,
        hw_slowdown_fraction=slowdown, hw_slowdown_sm_clock_mhz=slowdown_clock,
        pcie_gen_busy=_max_int(r.pcie_gen for r in busy),
        pcie_width_busy_lanes=_max_int(r.pcie_width_lanes for r in busy),
        pcie_gen_max=_max_int(r.pcie_gen_max for r in readings),
        pcie_width_max_lanes=_max_int(r.pcie_width_max_lanes for r in readings),
        pcie_gen_min=_min_int(r.pcie_gen for r in readings),
        pcie_width_min_lanes=_min_int(r.pcie_width_lanes for r in readings),
        ecc_corrected_delta=_ecc_delta([r.ecc_corrected for r in readings]),
        ecc_uncorrected_delta=_ecc_delta([r.ecc_uncorrected for r in readings]),
        other_processes=others, other_pids=other_pids, own_pid_listed=own_listed,
    )
