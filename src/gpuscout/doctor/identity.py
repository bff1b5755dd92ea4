"""Identity: are these the GPUs that were paid for? (docs/doctor.md §4.1)

The GPUs the driver reports are held against the offer (or `--gpu NAME`): model, count and memory,
the SM count where a variant differs in it (a 4090 D has 114 SMs to the 4090's 128), MIG mode,
processes already on the GPUs, and driver against the CUDA runtime torch was built for. Pure: it
reads the inventory and the workers' device properties, never the hardware.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from gpuscout.doctor.inventory import GpuInventory, Inventory
from gpuscout.doctor.plan import RankReport
from gpuscout.doctor.verdict import finding, info
from gpuscout.errors import UnknownNameError
from gpuscout.hardware.bands import variant_named, variants_of
from gpuscout.hardware.catalog import Gpu, find_gpu, lookup_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import DoctorFinding, DoctorStatus, Scalar

# A GPU showing less than this share of its nameplate memory is a slice (vGPU, a partitioned or a
# lesser board), not the SKU: visible memory is normally above the decimal nameplate (H100 80 GB
# shows 81,559 MiB, docs/gpus.md §2); ECC on GDDR boards reserves 1/16, well inside this margin.
MEMORY_SHARE_MIN = 0.90


class Expected(BaseModel):
    """What the box is held against: an offer's GPU, count, vCPUs and RAM, or a GPU named by hand."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = ""  # "offer X in F", "--gpu NAME", "" (nothing given)
    offer_id: str | None = None
    sku: str | None = None
    gpu_count: int | None = None
    vcpus: float | None = None
    ram_bytes: int | None = None
    launch_s: float | None = None  # the offer's assumed creation → healthy (power-on + boot)

    def recorded(self) -> dict[str, Scalar]:
        return {k: v for k, v in self.model_dump().items() if v is not None and v != ""}


def expected_from_offer(offer: Offer, sheet: str) -> Expected:
    return Expected(source=f"offer {offer.id} in {sheet}", offer_id=offer.id, sku=offer.gpu, gpu_count=offer.gpu_count,
                    vcpus=offer.vcpus, ram_bytes=int(offer.ram_gb * 1e9) if offer.ram_gb else None,
                    launch_s=offer.power_on_s + offer.boot_s)


def expected_from_gpu(name: str) -> Expected:
    return Expected(source=f"--gpu {name}", sku=find_gpu(name).sku)


def gpu_sku(name: str | None) -> str | None:
    """The catalog SKU or variant a driver-reported name stands for ("NVIDIA GeForce RTX 5090 D" → rtx-5090d)."""
    variant = variant_named(name)
    if variant is not None:
        return variant.sku
    gpu = lookup_gpu(name) if name else None
    return gpu.sku if gpu is not None else None


def label(sku: str | None) -> str:
    if sku is None:
        return "an unknown GPU"
    variant = next((v for v in variants_of(sku) if v.sku == sku), None)
    if variant is not None and not variant.in_catalog:
        return variant.label
    try:
        return find_gpu(sku).name
    except UnknownNameError:
        return sku


def identity_findings(expected: Expected, inventory: Inventory, reports: Sequence[RankReport],
                      torch_cuda: str | None) -> list[DoctorFinding]:
    """Model, count, memory, SM count, MIG, other processes, driver: one finding each (or per GPU)."""
    names = [g.name for g in inventory.gpus] or [r.device_name for r in sorted(reports, key=lambda r: r.rank)]
    out = _model_findings(expected, names) + _count_findings(expected, len(names))
    out += [f for g in inventory.gpus for f in _gpu_findings(g, expected)]
    out += _sm_findings(expected, reports)
    out += _driver_findings(inventory, torch_cuda)
    return out


def _model_findings(expected: Expected, names: Sequence[str | None]) -> list[DoctorFinding]:
    skus = [gpu_sku(n) for n in names]
    if expected.sku is not None:
        wrong = [(i, n, s) for i, (n, s) in enumerate(zip(names, skus, strict=True)) if s != expected.sku]
        if wrong:
            return [finding("gpu model", "identity", "fail",
                            f"GPU {i} is {label(s) if s else repr(n)}; {expected.source} is for {label(expected.sku)}",
                            gpu=i) for i, n, s in wrong]
        return [finding("gpu model", "identity", "pass",
                        f"{len(names)} × {label(expected.sku)}, as {expected.source} says")]
    if len(set(names)) > 1:
        return [finding("gpu model", "identity", "warn", "the GPUs differ: " + ", ".join(
            f"GPU {i} {n}" for i, n in enumerate(names)))]
    if names and skus[0] is None:
        return [finding("gpu model", "identity", "warn",
                        f"{names[0]!r} is not in gpuscout's catalog: there is nothing to judge its numbers against")]
    return [info("gpu model", "identity", f"{len(names)} × {names[0]} ({skus[0]}); no offer given to hold it against")
            ] if names else []


def _count_findings(expected: Expected, count: int) -> list[DoctorFinding]:
    if expected.gpu_count is None:
        return []
    if count < expected.gpu_count:
        return [finding("gpu count", "identity", "fail", f"{count} GPUs visible; {expected.source} has "
                        f"{expected.gpu_count}", value=count)]
    return [finding("gpu count", "identity", "pass" if count == expected.gpu_count else "info",
                    f"{count} GPUs visible; {expected.source} has {expected.gpu_count}", value=count)]


def _gpu_findings(gpu: GpuInventory, expected: Expected) -> list[DoctorFinding]:
    out = []
    catalog = _catalog_row(expected.sku or gpu_sku(gpu.name))
    if catalog is not None and gpu.memory_total_bytes is not None:
        share = gpu.memory_total_bytes / catalog.memory_bytes
        status: DoctorStatus = "fail" if share < MEMORY_SHARE_MIN else "pass"
        out.append(finding("gpu memory", "identity", status,
                           f"GPU {gpu.index}: {gpu.memory_total_bytes / 2**30:.1f} GiB visible, {share:.0%} of "
                           f"the {catalog.name}'s {catalog.memory_bytes / 1e9:g} GB",
                           gpu=gpu.index, value=gpu.memory_total_bytes, unit="bytes"))
    if gpu.mig_enabled:
        out.append(finding("mig mode", "identity", "fail" if expected.sku else "warn",
                           f"GPU {gpu.index} has MIG enabled: jobs see a slice of it, not the whole GPU",
                           gpu=gpu.index))
    out += _process_findings(gpu)
    return out


def _catalog_row(sku: str | None) -> Gpu | None:
    return lookup_gpu(sku) if sku else None


def _process_findings(gpu: GpuInventory) -> list[DoctorFinding]:
    """Processes on a GPU before doctor touched it. One this machine can see is probably the renter's
    own (a notebook); one it cannot is in another container or VM: another tenant on a paid-for GPU."""
    if not gpu.pids:
        return []
    foreign = [p for p in gpu.pids if not os.path.exists(f"/proc/{p}")]
    if foreign:
        return [finding("other processes", "identity", "fail", f"GPU {gpu.index} is in use by process(es) "
                        f"{', '.join(map(str, foreign))} outside this machine's view: another tenant", gpu=gpu.index)]
    return [finding("other processes", "identity", "warn", f"GPU {gpu.index} is in use by pid(s) "
                    f"{', '.join(map(str, gpu.pids))} on this machine; stop them and re-run doctor", gpu=gpu.index)]


def _sm_findings(expected: Expected, reports: Sequence[RankReport]) -> list[DoctorFinding]:
    out = []
    for report in reports:
        sku = expected.sku or gpu_sku(report.device_name)
        want = _sm_count(sku)
        if want is None or report.sm_count is None or report.device_index is None:
            continue
        status: DoctorStatus = "pass" if report.sm_count == want else "fail"
        out.append(finding("sm count", "identity", status, f"GPU {report.device_index}: {report.sm_count} SMs; "
                           f"a {label(sku)} has {want}", gpu=report.device_index, value=report.sm_count))
    return out


def _sm_count(sku: str | None) -> int | None:
    for variant in variants_of(sku) if sku else ():
        if variant.sku == sku:
            return variant.sm_count
        if variant.of == sku:
            return variant.of_sm_count
    return None


def _driver_findings(inventory: Inventory, torch_cuda: str | None) -> list[DoctorFinding]:
    if inventory.driver is None:
        return []
    text = f"driver {inventory.driver}, CUDA {inventory.cuda_driver or '?'}; torch built for CUDA {torch_cuda or '?'}"
    if torch_cuda and inventory.cuda_driver and _version(torch_cuda) > _version(inventory.cuda_driver):
        return [finding("driver", "identity", "warn", text + ": the driver is older than the runtime "
                        "(works only with NVIDIA's forward-compatibility package)")]
    return [info("driver", "identity", text)]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())
