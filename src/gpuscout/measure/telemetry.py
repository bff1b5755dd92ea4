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

from gpuscout.measure.cpu_telemetry import CpuWatch, summarize_cpu
from gpuscout.measure.gpu_telemetry import (
    GpuReading,
    GpuSampler,
    summarize_gpu,
)
from gpuscout.results.schema import CpuTelemetry, Finding, GpuTelemetry, Telemetry

__all__ = ["CpuWatch", "GpuReading", "GpuSampler", "build_telemetry", "summarize_cpu", "summarize_gpu",
           "telemetry_findings"]

# --- Thresholds (docs/measurement.md §1.13) -------------------------------------------------------

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
