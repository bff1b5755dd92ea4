"""A case's telemetry in words: one summary line over its runs, then what was found, run by run.

Pure: the recorded `Telemetry` (docs/measurement.md §1.13) in, short lines out. The summary
takes the worst of the runs (the highest temperature, the lowest link, the most CPU taken by
others), because one bad run is what a reader needs to see.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.report.numbers import percent
from gpuscout.results.schema import Case, CpuTelemetry, GpuTelemetry

__all__ = ["finding_lines", "telemetry_summary"]


def telemetry_summary(case: Case) -> list[str]:
    """A heading, then 'GPU: SM 1,980 MHz (median busy), ≤ 71 °C, …' and 'CPU: …' ([] when none recorded)."""
    gpus = [t.gpu for t in case.telemetry if t.gpu is not None]
    cpus = [t.cpu for t in case.telemetry if t.cpu is not None]
    parts = ([f"GPU: {_gpu_text(gpus)}"] if gpus else []) + ([f"CPU: {_cpu_text(cpus)}"] if cpus else [])
    if not parts:
        return []
    runs = len(case.telemetry)
    return [f"telemetry{f' ({runs} runs, worst shown)' if runs > 1 else ''}:", *(f"  {p}" for p in parts)]


def finding_lines(case: Case) -> list[tuple[str, bool]]:
    """(line, side_effect) per finding, with its run when the case ran more than once."""
    many = len(case.telemetry) > 1
    return [(f"{f'run {n}: ' if many else ''}{f.message}", f.side_effect)
            for n, t in enumerate(case.telemetry, 1) for f in t.findings]


def _gpu_text(gpus: Sequence[GpuTelemetry]) -> str:
    words = []
    clocks = [g.sm_clock_busy_median_mhz for g in gpus if g.sm_clock_busy_median_mhz is not None]
    if clocks:
        words.append(f"SM {min(clocks):,.0f} MHz (median busy)")
    temps = [g.temperature_max_c for g in gpus if g.temperature_max_c is not None]
    if temps:
        words.append(f"≤ {max(temps)} °C")
    power = [g.power_max_w for g in gpus if g.power_max_w is not None]
    limits = [g.power_limit_w for g in gpus if g.power_limit_w is not None]
    if power:
        words.append(f"≤ {max(power):,.0f} W" + (f" of {min(limits):,.0f} W" if limits else ""))
    link = _link(gpus)
    if link:
        words.append(link)
    others = [g.other_processes for g in gpus if g.other_processes is not None]
    if others:
        words.append(f"{max(others)} other process(es)" if max(others) else "alone on the GPU")
    return ", ".join(words) or f"{sum(g.samples for g in gpus)} samples, no field readable"


def _link(gpus: Sequence[GpuTelemetry]) -> str:
    busy = [(g.pcie_gen_busy, g.pcie_width_busy_lanes) for g in gpus
            if g.pcie_gen_busy is not None and g.pcie_width_busy_lanes is not None]
    if not busy:
        return ""
    gen, width = min(busy)
    most = next(((g.pcie_gen_max, g.pcie_width_max_lanes) for g in gpus if g.pcie_gen_max is not None), None)
    maximum = f" of Gen{most[0]} x{most[1]}" if most and most[1] is not None else ""
    return f"PCIe Gen{gen} x{width}{maximum}"


def _cpu_text(cpus: Sequence[CpuTelemetry]) -> str:
    other = max(c.other_load_cores for c in cpus)
    steal = max(c.steal_fraction for c in cpus)
    return f"others used ≤ {other:.1f} of {cpus[0].usable_cores} cores, steal ≤ {percent(steal)}"
