"""Health: is anything on these GPUs broken or holding them back? (docs/doctor.md §4.2)

From the inventory (read idle, before the load): ECC counters, retired pages, remapped rows, and the
XIDs in the kernel log. From the telemetry under load (NVML sampled while the workers ran): throttle
reasons, temperature and power, and the PCIe link against the one the card has. Pure functions of
recorded values, tested on recorded NVML readings (tests/readings.py).

Where the thresholds come from:
* ECC, page retirement and row remapping: NVIDIA's GPU memory error management and dynamic page
  retirement documents (an uncorrectable error, a pending retirement, a failed remap); the count of
  retired pages that warrants service follows Meta's GPU cluster health checks (gcm, default 10).
* XIDs: NVIDIA's XID catalog; the codes below say the hardware (memory, NVLink, the bus, the GSP)
  failed, as against XIDs an application causes (13, 31, 43, 45: bad kernels, page faults).
* throttling, power cap, the link while busy: the bench telemetry's thresholds (measure/telemetry.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.doctor.inventory import GpuInventory, Inventory, Xid
from gpuscout.doctor.verdict import finding, info
from gpuscout.hardware.catalog import Gpu
from gpuscout.measure.telemetry import telemetry_findings
from gpuscout.results.schema import DoctorFinding, DoctorStatus, GpuTelemetry

RETIRED_PAGES_WARN = 10  # gcm's gpu_retired_pages threshold
# XIDs that mean the hardware is failing (NVIDIA XID catalog): double-bit ECC (48), page retirement or
# row remap failure (64), NVLink error (74), fallen off the bus (79), uncontained ECC (95), GSP RPC
# timeout / error (119, 120), unrecovered ECC (140).
XID_FAIL = frozenset({48, 64, 74, 79, 95, 119, 120, 140})
# XIDs that mean the hardware coped but is wearing: micro-controller halt/breakpoint (61, 62), a page
# retired or row remapped (63), a high single-bit ECC rate (92), a contained ECC error (94).
XID_WARN = frozenset({61, 62, 63, 92, 94})
# Every catalog GPU has a x16 host interface (gpus.toml `interconnect`): a narrower link is a slot, a
# riser or a bifurcation setting, never the card.
CARD_LANES = 16


def health_findings(inventory: Inventory, soak: dict[int, GpuTelemetry], run: dict[int, GpuTelemetry],
                    catalog: Gpu | None) -> list[DoctorFinding]:
    """Per GPU: memory errors, then throttling under the soak (else the whole run), then the link
    while busy over the whole run (the host copies load it most); then the kernel log."""
    out: list[DoctorFinding] = []
    for gpu in inventory.gpus:
        out += memory_error_findings(gpu)
        loaded = soak.get(gpu.index) or run.get(gpu.index)
        if loaded is not None:
            out += load_findings(gpu.index, loaded)
        if gpu.index in run:
            out += link_findings(gpu, run[gpu.index], catalog)
    out += xid_findings(inventory)
    return out


def memory_error_findings(gpu: GpuInventory) -> list[DoctorFinding]:
    i, out = gpu.index, []
    if gpu.ecc_enabled is None and gpu.ecc_volatile_uncorrected is None:
        return [info("ecc", "health", f"GPU {i}: no ECC on this GPU (or NVML cannot read it)", gpu=i)]
    if gpu.ecc_enabled is False:
        out.append(finding("ecc", "health", "warn", f"GPU {i}: ECC is turned off: memory errors go unnoticed", gpu=i))
    if gpu.ecc_volatile_uncorrected:
        out.append(finding("ecc", "health", "fail", f"GPU {i}: {gpu.ecc_volatile_uncorrected:,} uncorrectable ECC "
                           "errors since the driver loaded", gpu=i, value=gpu.ecc_volatile_uncorrected))
    elif gpu.ecc_aggregate_uncorrected:
        out.append(finding("ecc", "health", "warn", f"GPU {i}: {gpu.ecc_aggregate_uncorrected:,} uncorrectable ECC "
                           "errors over its life (none since the driver loaded)", gpu=i))
    elif gpu.ecc_enabled:
        corrected = gpu.ecc_volatile_corrected or 0
        out.append(finding("ecc", "health", "pass", f"GPU {i}: no uncorrectable ECC errors ({corrected:,} corrected "
                           "since the driver loaded)", gpu=i))
    return out + _retirement_findings(gpu)


def _retirement_findings(gpu: GpuInventory) -> list[DoctorFinding]:
    i, out = gpu.index, []
    if gpu.remap_failed:
        out.append(finding("row remapping", "health", "fail", f"GPU {i}: a row remap failed: the memory has run out "
                           "of spare rows; NVIDIA calls for servicing the GPU", gpu=i))
    if gpu.remap_pending:
        out.append(finding("row remapping", "health", "warn", f"GPU {i}: a row remap is pending until the GPU is "
                           "reset", gpu=i))
    if gpu.retired_pages_pending:
        out.append(finding("retired pages", "health", "fail", f"GPU {i}: a page waits to be retired at the next "
                           "driver reload; until then its bad memory is in use", gpu=i))
    retired = (gpu.retired_pages_sbe or 0) + (gpu.retired_pages_dbe or 0)
    if retired >= RETIRED_PAGES_WARN:
        out.append(finding("retired pages", "health", "warn", f"GPU {i}: {retired} pages retired "
                           f"({gpu.retired_pages_dbe or 0} after uncorrectable errors)", gpu=i, value=retired))
    return out


def load_findings(index: int, gpu: GpuTelemetry) -> list[DoctorFinding]:
    """Throttling, a lowered power limit, processes and ECC errors during the load, from the telemetry."""
    out = [info("under load", "health", f"GPU {index} under load: {_load_text(gpu)}", gpu=index)]
    for f in telemetry_findings(gpu, None):
        if f.kind == "degraded_link":
            continue  # judged below against the card's own link
        status: DoctorStatus = "fail" if f.side_effect else "info"
        out.append(finding(f.kind.replace("_", " "), "health", status, f"GPU {index}: {f.message}", gpu=index))
    return out


def _load_text(gpu: GpuTelemetry) -> str:
    parts = []
    if gpu.temperature_max_c is not None:
        parts.append(f"up to {gpu.temperature_max_c} °C")
    if gpu.power_busy_median_w is not None:
        limit = f" of a {gpu.power_limit_w:,.0f} W limit" if gpu.power_limit_w else ""
        parts.append(f"{gpu.power_busy_median_w:,.0f} W median{limit}")
    if gpu.sm_clock_busy_median_mhz is not None:
        parts.append(f"SM clock {gpu.sm_clock_busy_median_mhz:,.0f} MHz")
    return ", ".join(parts) or f"{gpu.busy_samples} busy samples"


def link_findings(inv: GpuInventory, gpu: GpuTelemetry, catalog: Gpu | None) -> list[DoctorFinding]:
    """The link while busy against the card's: x16, and the generation the catalog gives the SKU."""
    i = inv.index
    gen, width = gpu.pcie_gen_busy, gpu.pcie_width_busy_lanes
    if gen is None or width is None:
        return [info("pcie link", "health", f"GPU {i}: NVML reports no PCIe link (an SXM module's host link may "
                     "be hidden)", gpu=i)]
    card_gen = (catalog.pcie_gen if catalog is not None else None) or inv.pcie_gen_gpu_max or gpu.pcie_gen_max
    system_gen = gpu.pcie_gen_max or gen
    where = f"GPU {i}: PCIe link gen{gen} x{width} while busy"
    if width < CARD_LANES:
        return [finding("pcie link", "health", "fail", f"{where}, of the card's x{CARD_LANES}", gpu=i, value=width)]
    if card_gen is not None and gen < min(card_gen, system_gen):
        return [finding("pcie link", "health", "fail", f"{where}; it trained below the gen{min(card_gen, system_gen)} "
                        "the card and slot support", gpu=i, value=gen)]
    if card_gen is not None and system_gen < card_gen:
        return [finding("pcie link", "health", "warn", f"{where}: a gen{card_gen} card in a gen{system_gen} slot, "
                        "host copies at the slot's rate", gpu=i, value=gen)]
    return [finding("pcie link", "health", "pass", f"{where}, the most the card supports", gpu=i, value=gen)]


def xid_findings(inventory: Inventory) -> list[DoctorFinding]:
    if not inventory.xids_readable:
        return [info("xid errors", "health", f"kernel log not readable ({inventory.xid_note}): XIDs not checked")]
    if not inventory.xids:
        return [finding("xid errors", "health", "pass", "no XID errors in the kernel log since boot")]
    return [_xid_finding(code, [x for x in inventory.xids if x.code == code])
            for code in sorted({x.code for x in inventory.xids})]


def _xid_finding(code: int, events: Sequence[Xid]) -> DoctorFinding:
    status: DoctorStatus = "fail" if code in XID_FAIL else "warn" if code in XID_WARN else "info"
    where = ", ".join(sorted({x.pci for x in events}))
    return finding("xid errors", "health", status, f"XID {code} × {len(events)} since boot on {where}: "
                   f"{events[-1].text[:100]}", value=len(events))
