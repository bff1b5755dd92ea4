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
