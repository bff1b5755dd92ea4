"""The roofline that every speed estimate is built from, and the result types.

A phase (a training step, a prefill, one decode step, one denoiser step …) does `flops` of work and
moves `bytes` through device memory; its time is the slower of the two at the achieved rates
(Williams et al. roofline, as LLM-Viewer and llm-analysis apply it per op or per module;
docs/estimator.md §3), plus whatever communication is not hidden behind it:

    compute_s = flops / (peak_flops_per_s × efficiency.compute)
    memory_s  = bytes / (bandwidth_bytes_per_s × efficiency.bandwidth)
    comm_s    = comm_bytes / (link_bytes_per_s × efficiency.link)
    seconds   = max(compute_s, memory_s) + comm_s × (1 − hidden)
"""

from __future__ import annotations

from typing import Literal

from gpuscout.errors import SpecError
from gpuscout.estimator.efficiency import Efficiency
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.hardware.compat import host_staged_link_fraction

Bound = Literal["compute", "memory", "communication"]


class PhaseTime(Frozen):
    """One occurrence of a phase; `formula` says how often it happens in the job."""

    name: str
    flops: float
    bytes: float  # device-memory traffic
    comm_bytes: float  # bytes each GPU sends over the link (ring-algorithm volume)
    compute_s: float
    memory_s: float
    comm_s: float  # total communication time; only the exposed part is in `seconds`
    seconds: float  # max(compute_s, memory_s) + exposed communication
    bound: Bound
    formula: str


class SpeedEstimate(Frozen):
    job_kind: Literal["finetune", "inference", "image", "video"]
    gpu_sku: str
    gpus: int
    job_s: float
    job_low_s: float
    job_high_s: float
    bound: Bound  # of the phase that dominates job time
    metrics: dict[str, float]
    units: dict[str, float]
    phases: tuple[PhaseTime, ...]
    efficiency: Efficiency
    notes: tuple[str, ...]


class Rates(Frozen):
    """Peak rates one phase runs against: the dtype's tensor peak, memory and link bandwidth."""

    flops_per_s: float
    memory_bytes_per_s: float
    link_bytes_per_s: float


def phase(
    name: str,
    *,
    flops: float,
    bytes_moved: float,
    rates: Rates,
    efficiency: Efficiency,
    formula: str,
    comm_bytes: float = 0.0,
    hidden: float = 0.0,
) -> PhaseTime:
    """Roofline time of one phase; `hidden` is the fraction of its communication overlapped."""
    compute_s = flops / (rates.flops_per_s * efficiency.compute)
    memory_s = bytes_moved / (rates.memory_bytes_per_s * efficiency.bandwidth)
    comm_s = comm_bytes / (rates.link_bytes_per_s * efficiency.link) if comm_bytes else 0.0
    exposed = comm_s * (1.0 - hidden)
    work = max(compute_s, memory_s)
    bound: Bound = "communication" if exposed > work else ("compute" if compute_s >= memory_s else "memory")
    return PhaseTime(
        name=name, flops=flops, bytes=bytes_moved, comm_bytes=comm_bytes, compute_s=compute_s,
        memory_s=memory_s, comm_s=comm_s, seconds=work + exposed, bound=bound, formula=formula,
    )


def link_bytes_per_s(gpu: Gpu, gpus: int) -> float:
    """NVLink when the GPU has it and it reaches every peer, else PCIe (catalog figures).

    A GPU without peer-to-peer (GeForce) gets its PCIe rate cut to the host-staged fraction.
    NVLink *bridges* on PCIe cards join pairs only ("NVLink bridge 600 GB/s (2 GPUs)", docs/gpus.md §2);
    the H200 NVL bridge joins up to four. Beyond that, traffic crosses PCIe. One GPU sends nothing,
    so any positive rate serves (the memory bandwidth, for GPUs the catalog lists no link for).
    """
    if gpus <= 1:
        return gpu.nvlink_bytes_per_s or gpu.pcie_bytes_per_s or gpu.memory_bandwidth_bytes_per_s
    if not gpu.peer_to_peer and gpu.pcie_bytes_per_s is not None:
        # The driver refuses GPU-to-GPU copies (GeForce): NCCL stages each collective through host
        # memory, measured at a fraction of the P2P rate (hardware/compat.toml [host_staged]).
        return gpu.pcie_bytes_per_s * host_staged_link_fraction()
    text = gpu.interconnect.lower()
    reach = (4 if "4-way" in text else 2) if "bridge" in text and "nvlink" in text else gpus
    if gpu.nvlink_bytes_per_s is not None and gpus <= reach:
        return gpu.nvlink_bytes_per_s
    if gpu.pcie_bytes_per_s is not None:
        return gpu.pcie_bytes_per_s
    if gpu.nvlink_bytes_per_s is not None:
        return gpu.nvlink_bytes_per_s
    raise SpecError(
        f"The catalog has no interconnect bandwidth for {gpu.name}.",
        "This GPU has no NVLink or PCIe figure in the catalog, and a multi-GPU job needs one to time its "
        "collectives (a GH200's only link, NVLink-C2C, goes to its own CPU; docs/gpus.md §2.7).",
        "Run this job on one GPU, or add the figure to gpus.toml with its source.",
    )


def ring_all_reduce_bytes(payload_bytes: float, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(n−1)/n × payload (NCCL/Patarasuk–Yuan)."""
    return 2.0 * (ranks - 1) / ranks * payload_bytes if ranks > 1 else 0.0


def ring_gather_bytes(payload_bytes: float, ranks: int) -> float:
    """All-gather or reduce-scatter of a payload split over n ranks: (n−1)/n × payload."""
    return (ranks - 1) / ranks * payload_bytes if ranks > 1 else 0.0


def dominant(phases: list[tuple[PhaseTime, float]]) -> Bound:
    """Bound of the phase with the largest share of job time (phase, occurrences per job)."""
    return max(phases, key=lambda item: item[0].seconds * item[1])[0].bound


def banded(seconds: float, efficiency: Efficiency) -> tuple[float, float, float]:
    """Job time with its optimistic and pessimistic ends."""
    return seconds, seconds * efficiency.band_low, seconds * efficiency.band_high


def gib(value: float) -> str:
    """Compact byte count for formula strings."""
    return f"{value / 2**30:,.2f} GiB"


def tflop(value: float) -> str:
    """Compact FLOP count for formula strings."""
    return f"{value / 1e12:,.3f} TFLOP"


# accelerate's offload hooks (diffusers enable_model_cpu_offload / enable_sequential_cpu_offload) copy one
# tensor at a time, synchronously, from pageable host memory, far below the catalog PCIe figure. The
# Hugging Face SDXL blog's A100 40GB (Colab) runs measured it (docs/estimator.md §2.10): sequential offload
# moved 121 GiB per batch in 55.8 s more than the resident run (2.3 GB/s), model offload 2 × 6.6 GiB in
# 4.7 s (3.0 GB/s). 2.5 GB/s; one host measured, so other hosts are an ASSUMPTION (fit.SEQUENTIAL_OFFLOAD
# widens the band).
OFFLOAD_HOOK_BYTES_PER_S = 2.5e9


def offload_rates(rates: Rates, efficiency: Efficiency) -> Rates:
    """`rates` with the link at accelerate's offload copy rate (or the PCIe figure, if lower).

    The hook rate is an achieved figure, so it is divided by the link efficiency here for `phase`
    to multiply it back: the phase then takes exactly min(PCIe × link efficiency, hook rate)."""
    achieved = min(rates.link_bytes_per_s * efficiency.link, OFFLOAD_HOOK_BYTES_PER_S)
    return rates.model_copy(update={"link_bytes_per_s": achieved / efficiency.link})
