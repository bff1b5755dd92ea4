"""Identity: are these the GPUs that were paid for? (docs/doctor.md §4.1)

The GPUs the driver reports are held against the offer (or `--gpu NAME`): model, count and memory,
the SM count where a variant differs in it (a 4090 D has 114 SMs to the 4090's 128), MIG mode,
processes already on the GPUs, and driver against the CUDA runtime torch was built for. Pure: it
reads the inventory and the workers' device properties, never the hardware.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpuscout.doctor.inventory import GpuInventory, Inventory
from gpuscout.doctor.plan import RankReport
from gpuscout.doctor.verdict import finding, info
from gpuscout.errors import UnknownNameError
from gpuscout.frozen import Frozen
from gpuscout.hardware.bands import variant_named, variants_of
from gpuscout.hardware.catalog import Gpu, find_gpu, lookup_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import DoctorFinding, DoctorStatus, Scalar

# A GPU showing less than this share of its nameplate memory is a slice (vGPU, a partitioned or a
# lesser board), not the SKU: visible memory is normally above the decimal nameplate (H100 80 GB
# shows 81,559 MiB, docs/gpus.md §2); ECC on GDDR boards reserves 1/16, well inside this margin.
MEMORY_SHARE_MIN = 0.90


class Expected(Frozen):
    """What the box is held against: an offer's GPU, count, vCPUs and RAM, or a GPU named by hand."""


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
    """Model, count, memory, SM count, MIG, other processes, driver: one finding each (or per GPU).

    A check the readings cannot answer (no GPU reported, a name or memory size NVML would not give) is
    an "error" finding, "not checked": never silently passed, so the verdict is at best inconclusive."""
    names = [g.name for g in inventory.gpus] or [r.device_name for r in sorted(reports, key=lambda r: r.rank)]
    if not names:
        return _nothing_reported(expected) + _driver_findings(inventory, torch_cuda)
    out = _model_findings(expected, names) + _count_findings(expected, len(names))
    out += [f for g in inventory.gpus for f in _gpu_findings(g, expected)]
    if not inventory.gpus:  # no NVML: the memory the workers' torch saw stands in for it
        out += [f for r in reports for f in _report_memory_findings(r, expected)]
    out += _sm_findings(expected, reports)
    out += _driver_findings(inventory, torch_cuda)
    return out


def promise(expected: Expected) -> str:
    """What the box was held against, as a sentence's subject: "the offer X in F promises 1 × GeForce …"."""
    if expected.offer_id is not None:
        return f"{expected.source} promises {expected.gpu_count or 1} × {label(expected.sku)}"
    return f"{expected.source} names {label(expected.sku)}"


def unused_gpu_findings(expected: Expected, requested: str, inventory: Inventory,
                        torch_cuda: str | None) -> list[DoctorFinding]:
    """The checks ran on the CPU though the box is held against a GPU (`expected.sku` is set).

    With `--device auto` that means torch saw no GPU. When the driver (NVML) sees none either there is
    no GPU to be had: the box fails the one thing it was rented for. When the driver lists GPUs, their
    identity is judged from it, and what needs the GPUs under load is "not checked". An explicit
    `--device cpu` judges nothing it did not look at: "not checked", never passed."""
    why = ("--device cpu ran every check on the CPU" if requested == "cpu" else
           "torch sees no CUDA GPU (a CPU-only torch build, or CUDA_VISIBLE_DEVICES hides them)")
    if inventory.gpus:
        return [*identity_findings(expected, inventory, (), torch_cuda),
                finding("gpu checks", "performance", "error", f"not checked: {why}; the GPUs' speed, links and "
                        "health under load were not measured")]
    if requested == "cpu":
        return [finding("gpu model", "identity", "error", f"not checked: {why}; {promise(expected)}, which was "
                        "not looked at (run doctor without --device cpu)")]
    return [finding("gpu model", "identity", "fail", f"no GPU visible: {promise(expected)}; neither torch nor the "
                    "NVIDIA driver (NVML) sees one here")]


def _nothing_reported(expected: Expected) -> list[DoctorFinding]:
    if expected.sku is None:
        return []
    out = [finding("gpu model", "identity", "error", "not checked: neither NVML nor a worker reported a GPU "
                   f"to hold against {expected.source}")]
    if expected.gpu_count is not None:
        out.append(finding("gpu count", "identity", "error", f"not checked: no GPU was reported to count against "
                           f"{expected.source}'s {expected.gpu_count}"))
    return out


def _model_findings(expected: Expected, names: Sequence[str | None]) -> list[DoctorFinding]:
    skus = [gpu_sku(n) for n in names]
    if expected.sku is not None:
        unnamed = [finding("gpu model", "identity", "error", f"not checked: the driver gave no name for GPU {i}",
                           gpu=i) for i, n in enumerate(names) if n is None]
        wrong = [(i, n, s) for i, (n, s) in enumerate(zip(names, skus, strict=True)) if n is not None
                 and s != expected.sku]
        if wrong:
            return [finding("gpu model", "identity", "fail",
                            f"GPU {i} is {label(s) if s else repr(n)}; {expected.source} is for {label(expected.sku)}",
                            gpu=i) for i, n, s in wrong] + unnamed
        return unnamed or [finding("gpu model", "identity", "pass",
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
    out += _memory_findings(gpu.index, gpu.memory_total_bytes, catalog, expected, "NVML")
    if gpu.mig_enabled:
        out.append(finding("mig mode", "identity", "fail" if expected.sku else "warn",
                           f"GPU {gpu.index} has MIG enabled: jobs see a slice of it, not the whole GPU",
                           gpu=gpu.index))
    out += _process_findings(gpu)
    return out


def _report_memory_findings(report: RankReport, expected: Expected) -> list[DoctorFinding]:
    if report.device_index is None:
        return []
    catalog = _catalog_row(expected.sku or gpu_sku(report.device_name))
    return _memory_findings(report.device_index, report.memory_bytes, catalog, expected, "torch")


def _memory_findings(index: int, visible: int | None, catalog: Gpu | None, expected: Expected,
                     reader: str) -> list[DoctorFinding]:
    if catalog is None:
        return []
    if visible is None:  # against an offer the memory is part of what was paid for: unread is not passed
        return [finding("gpu memory", "identity", "error", f"not checked: {reader} did not report GPU {index}'s "
                        "memory", gpu=index)] if expected.sku is not None else []
    share = visible / catalog.memory_bytes
    status: DoctorStatus = "fail" if share < MEMORY_SHARE_MIN else "pass"
    return [finding("gpu memory", "identity", status,
                    f"GPU {index}: {visible / 2**30:.1f} GiB visible, {share:.0%} of "
                    f"the {catalog.name}'s {catalog.memory_bytes / 1e9:g} GB",
                    gpu=index, value=visible, unit="bytes")]


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
        if want is None or report.device_index is None:
            continue
        if report.sm_count is None:
            out.append(finding("sm count", "identity", "error", f"not checked: the worker of GPU "
                               f"{report.device_index} did not report its SM count", gpu=report.device_index))
            continue
        status: DoctorStatus = "pass" if report.sm_count == want else "fail"
        out.append(finding("sm count", "identity", status, f"GPU {report.device_index}: {report.sm_count} SMs; "
                           f"a {label(sku)} has {want}", gpu=report.device_index, value=report.sm_count))
    if not out and _sm_count(expected.sku) is not None:  # the SM count is what tells this SKU from its variant
        out.append(finding("sm count", "identity", "error", "not checked: no worker bound a GPU and reported its "
                           f"SM count, which tells a {label(expected.sku)} from its variants"))
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
