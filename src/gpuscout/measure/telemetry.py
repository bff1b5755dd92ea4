"""Telemetry during a bench case: was the machine doing only our work, at full speed? (docs/measurement.md §1.13)

Two machines' timings are comparable only when neither side was slowed by something outside the
job: a throttling GPU, a PCIe link trained below its maximum, another process on the GPU, CPU
time stolen by the hypervisor or taken by other tenants. This module records what it can see of
that and turns it into `Finding`s; a finding with `side_effect=True` makes the case's timings
incomparable.

Reading and judging are kept apart so the judging is tested on recorded readings:

    GpuSampler          in the case process: samples NVML every 50 ms in a thread → GpuReading list
    CpuWatch            in the parent, around the spawned case: /proc/stat, /proc/loadavg, rusage
    summarize_gpu       GpuReading list → GpuTelemetry                                        (pure)
    summarize_cpu       two CpuReadings + own CPU time → CpuTelemetry                         (pure)
    telemetry_findings  GpuTelemetry, CpuTelemetry → findings, thresholds below               (pure)
    build_telemetry     both → Telemetry (gpu, cpu, findings)

Intended use (the harness wiring lives in harness.py / bench.py):

    # inside the case process, around the whole case, beside PeakMemoryMonitor:
    with GpuSampler() as sampler:          # no NVML (CPU machine, no driver): does nothing
        ...                                # build the model, warm up, time the repeats
    gpu = sampler.result()                 # GpuTelemetry | None; send it back with the Case

    # in the bench process, around the spawned case:
    with CpuWatch() as watch:
        case = run_isolated(fn, *args, case=name, size=size)
    telemetry = build_telemetry(gpu_from_the_case, watch.result())   # CpuTelemetry | None off Linux
    incomparable = [f for f in telemetry.findings if f.side_effect]

NVML (nvidia-ml-py, imported as `pynvml`) is optional and untyped: it is reached through
`peak_memory.open_nvml` inside functions, typed `Any`, and every call may raise an `NVMLError`
(not supported on this GPU, no permission, GPU lost); a failed field is recorded as None.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- Thresholds (docs/measurement.md §1.13) -------------------------------------------------------

# A sample counts as "busy" when kernels ran in at least this share of NVML's last utilization window
# (nvidia-smi `utilization.gpu`) and the GPU-idle clock reason is clear. Throttling and the link
# are judged on busy samples only: at idle the clocks drop and the PCIe link trains down by design,
# and model building / imports at the start of a case leave the GPU idle for seconds.
BUSY_UTILIZATION_PERCENT = 25
# Throttling in at least 5% of busy samples is flagged: below that it is a blip (HW slowdown is
# also reported briefly during P-state changes, per the NVML docs) that moves a mean by well under
# the run-to-run noise; at 5% of samples with clocks cut 20–50% the mean moves 1–2.5%, which a
# bootstrap interval on a few repeats cannot tell from a real difference between machines.
THROTTLE_MIN_FRACTION = 0.05
# An enforced power limit more than 1% below the board's default means someone lowered it (the
# provider, the operator): the machine is not the stock SKU. 1% absorbs rounding of mW limits.
POWER_LIMIT_LOWERED_FRACTION = 0.01
# CPU steal at or above 5% of the CPU time this machine asked for: the hypervisor gave that much
# to other guests, and a case's CPU work (kernel launches, data loading) loses about that share
# of its time: the same size of effect as the throttle threshold.
STEAL_MIN_FRACTION = 0.05
# Other processes' load is contention when it is at least half a core (below that: daemons, the
# monitoring agent) and either takes a quarter of the CPUs the case may run on, or leaves them
# saturated (the case's own use + others ≥ 90% of them, so someone waited for a CPU).
OTHER_LOAD_MIN_CORES = 0.5
OTHER_LOAD_MIN_FRACTION = 0.25
CPU_SATURATED_FRACTION = 0.90

# --- Sampling ---------------------------------------------------------------------------------------

# 50 ms: 20 samples a second resolves a 5% throttle share in a 1 s case; the slowest NVML fields
# (power averaged over 1 s since Ampere bar the A100, utilization over 1/6–1 s) gain nothing from
# faster sampling. A thread of its own, not inside peak_memory's 10 ms loop (which stays as it is):
# ~11 NVML calls per sample would stretch that loop's period; NVML is thread-safe, and ctypes
# releases the GIL during each call.
GPU_SAMPLE_PERIOD_S = 0.050
# Above this many readings, every other one is dropped and the period doubles: a 30-minute case
# keeps ~20,000 readings (a few MB) at an even spacing instead of growing without bound.
MAX_READINGS = 20_000

FindingKind = Literal["thermal_throttle", "power_cap", "hw_slowdown", "degraded_link", "shared_device",
                      "ecc_errors", "cpu_contention", "cpu_steal"]

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


# --- Models -----------------------------------------------------------------------------------------

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuTelemetry(_Frozen):
    """One case's GPU, summarised from NVML samples. None = NVML could not say."""

    samples: int
    busy_samples: int  # the samples throttling and the link are judged on
    duration_s: float
    sm_clock_busy_max_mhz: int | None = None
    sm_clock_busy_median_mhz: float | None = None
    mem_clock_busy_median_mhz: float | None = None
    temperature_max_c: int | None = None
    power_busy_median_w: float | None = None
    power_max_w: float | None = None
    power_limit_w: float | None = None  # enforced limit, lowest seen
    power_default_limit_w: float | None = None
    # Share of busy samples (with reasons known) in which each clock-event reason was set.
    reason_fractions: dict[str, float] = Field(default_factory=dict)
    thermal_fraction: float | None = None
    thermal_sm_clock_mhz: float | None = None  # median SM clock in those samples
    power_cap_fraction: float | None = None  # SW power cap or HW power brake
    power_cap_sm_clock_mhz: float | None = None
    power_brake_fraction: float | None = None
    hw_slowdown_fraction: float | None = None  # not explained by HW thermal slowdown or the power brake
    hw_slowdown_sm_clock_mhz: float | None = None
    pcie_gen_busy: int | None = None  # best seen while busy
    pcie_width_busy_lanes: int | None = None
    pcie_gen_max: int | None = None  # the most this GPU and system support
    pcie_width_max_lanes: int | None = None
    pcie_gen_min: int | None = None  # lowest seen at any time (idle downshift included)
    pcie_width_min_lanes: int | None = None
    ecc_corrected_delta: int | None = None  # volatile counters, after − before
    ecc_uncorrected_delta: int | None = None
    other_processes: int | None = None  # most at one time
    other_pids: tuple[int, ...] = ()
    own_pid_listed: bool | None = None  # False: NVML shows host pids (container PID namespace)


class CpuTelemetry(_Frozen):
    """The CPUs the case could run on, between just before its process started and after it was reaped."""

    elapsed_s: float
    cpus_watched: int  # CPUs summed from /proc/stat (the affinity set)
    usable_cores: int
    own_cpu_s: float  # the case process and its children, plus the bench process waiting for it
    own_cores: float
    busy_cores: float  # every process on the watched CPUs
    other_load_cores: float  # busy − own
    steal_s: float
    steal_fraction: float  # stolen / (busy + stolen): of the CPU time asked for
    iowait_fraction: float  # of all CPU time on the watched CPUs
    load_avg_1m_before: float | None = None
    load_avg_1m_after: float | None = None


class Finding(_Frozen):
    kind: FindingKind
    side_effect: bool  # True: the case's timings are not comparable with another machine's
    message: str


class Telemetry(_Frozen):
    gpu: GpuTelemetry | None = None
    cpu: CpuTelemetry | None = None
    findings: tuple[Finding, ...] = ()


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


# --- Findings ---------------------------------------------------------------------------------------

def _pct(fraction: float) -> str:
    return f"{fraction:.0%}"


def _clocks(gpu: GpuTelemetry, throttled_mhz: float | None) -> str:
    if gpu.sm_clock_busy_max_mhz is None or throttled_mhz is None:
        return ""
    return f" (SM clock {gpu.sm_clock_busy_max_mhz:,} → {round(throttled_mhz):,} MHz)"


def _thermal_finding(gpu: GpuTelemetry) -> Finding | None:
    if gpu.thermal_fraction is None or gpu.thermal_fraction < THROTTLE_MIN_FRACTION:
        return None
    temp = f" up to {gpu.temperature_max_c} °C" if gpu.temperature_max_c is not None else ""
    return Finding(kind="thermal_throttle", side_effect=True,
                   message=f"thermal throttling in {_pct(gpu.thermal_fraction)} of busy samples"
                           f"{_clocks(gpu, gpu.thermal_sm_clock_mhz)}{temp}")


def power_limit_lowered(gpu: GpuTelemetry) -> bool:
    """The enforced limit sits below the board's default: someone capped this GPU."""
    if gpu.power_limit_w is None or gpu.power_default_limit_w is None:
        return False
    return gpu.power_limit_w < gpu.power_default_limit_w * (1 - POWER_LIMIT_LOWERED_FRACTION)


def _power_finding(gpu: GpuTelemetry) -> Finding | None:
    """HW power brake or a lowered limit: side effect. SW power cap at the stock limit is how
    H100/A100-class GPUs normally run dense work: reported, but the same on every such machine."""
    cap = gpu.power_cap_fraction
    if cap is None or cap < THROTTLE_MIN_FRACTION:
        return None
    clocks = _clocks(gpu, gpu.power_cap_sm_clock_mhz)
    if (gpu.power_brake_fraction or 0.0) >= THROTTLE_MIN_FRACTION:
        return Finding(kind="power_cap", side_effect=True,
                       message=f"hardware power brake in {_pct(gpu.power_brake_fraction or 0.0)} of busy samples"
                               f"{clocks}")
    limit, default = gpu.power_limit_w, gpu.power_default_limit_w
    if power_limit_lowered(gpu):
        return Finding(kind="power_cap", side_effect=True,
                       message=f"power cap in {_pct(cap)} of busy samples at a limit lowered to {limit:,.0f} W "
                               f"of the board's default {default:,.0f} W{clocks}")
    at = f"the board's default limit ({default:,.0f} W)" if default is not None else "its power limit"
    return Finding(kind="power_cap", side_effect=False,
                   message=f"power cap in {_pct(cap)} of busy samples at {at}{clocks}: normal at full load")


def _slowdown_finding(gpu: GpuTelemetry) -> Finding | None:
    if gpu.hw_slowdown_fraction is None or gpu.hw_slowdown_fraction < THROTTLE_MIN_FRACTION:
        return None
    return Finding(kind="hw_slowdown", side_effect=True,
                   message=f"hardware slowdown in {_pct(gpu.hw_slowdown_fraction)} of busy samples"
                           f"{_clocks(gpu, gpu.hw_slowdown_sm_clock_mhz)}")


def _below(current: int | None, most: int | None) -> bool:
    return current is not None and most is not None and current < most


def _link_finding(gpu: GpuTelemetry) -> Finding | None:
    """Judged on the best link seen while busy: links train down at idle by design."""
    if not (_below(gpu.pcie_gen_busy, gpu.pcie_gen_max) or _below(gpu.pcie_width_busy_lanes, gpu.pcie_width_max_lanes)):
        return None

    def link(gen: int | None, width: int | None) -> str:
        return f"gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"

    return Finding(kind="degraded_link", side_effect=True,
                   message=f"PCIe link {link(gpu.pcie_gen_busy, gpu.pcie_width_busy_lanes)} of "
                           f"{link(gpu.pcie_gen_max, gpu.pcie_width_max_lanes)} while busy")


def _shared_finding(gpu: GpuTelemetry) -> Finding | None:
    count = gpu.other_processes
    if not count:
        return None
    noun = "process" if count == 1 else "processes"
    pids = ", ".join(str(p) for p in gpu.other_pids)
    if gpu.own_pid_listed:
        where = f"pid {pids}" if len(gpu.other_pids) == 1 else f"pids {pids}"
    else:
        where = f"NVML lists host pids {pids}, this process among them"
    return Finding(kind="shared_device", side_effect=True, message=f"{count} other {noun} on the GPU ({where})")


def _ecc_finding(gpu: GpuTelemetry) -> Finding | None:
    """Uncorrected errors: the GPU is failing and the case's numbers cannot be trusted. Corrected
    errors cost no measurable time but say the memory is wearing out: reported, not disqualifying."""
    corrected, uncorrected = gpu.ecc_corrected_delta or 0, gpu.ecc_uncorrected_delta or 0
    if not corrected and not uncorrected:
        return None
    return Finding(kind="ecc_errors", side_effect=uncorrected > 0,
                   message=f"{corrected:,} corrected and {uncorrected:,} uncorrected ECC errors during the case")


def _steal_finding(cpu: CpuTelemetry) -> Finding | None:
    if cpu.steal_fraction < STEAL_MIN_FRACTION:
        return None
    return Finding(kind="cpu_steal", side_effect=True, message=f"CPU steal {_pct(cpu.steal_fraction)} during the case")


def _contention_finding(cpu: CpuTelemetry) -> Finding | None:
    other, cpus = cpu.other_load_cores, max(cpu.cpus_watched, 1)
    if other < OTHER_LOAD_MIN_CORES:
        return None
    if other < OTHER_LOAD_MIN_FRACTION * cpus and cpu.own_cores + other < CPU_SATURATED_FRACTION * cpus:
        return None
    return Finding(kind="cpu_contention", side_effect=True,
                   message=f"other processes used {other:.1f} of {cpus} cores during the case")


def telemetry_findings(gpu: GpuTelemetry | None, cpu: CpuTelemetry | None) -> tuple[Finding, ...]:
    """Everything the telemetry says about the case, side effects and notes alike."""
    checks: list[Finding | None] = []
    if gpu is not None:
        checks += [_thermal_finding(gpu), _power_finding(gpu), _slowdown_finding(gpu), _link_finding(gpu),
                   _shared_finding(gpu), _ecc_finding(gpu)]
    if cpu is not None:
        checks += [_steal_finding(cpu), _contention_finding(cpu)]
    return tuple(f for f in checks if f is not None)


def build_telemetry(gpu: GpuTelemetry | None, cpu: CpuTelemetry | None) -> Telemetry:
    return Telemetry(gpu=gpu, cpu=cpu, findings=telemetry_findings(gpu, cpu))
