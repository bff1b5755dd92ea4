"""What the doctor's torchrun workers run, and what each writes back (docs/doctor.md §2).

The parent writes one `DoctorPlan` as JSON; each worker (`doctor.worker`, one per GPU, or
per CPU process with gloo) reads it and rewrites its `RankReport` after every check, so Ctrl-C or a
hung collective loses at most the check in flight.

The budgets: `--quick` must finish within 60 s, the default within 5 minutes on 8 GPUs. The GPUs
work at the same time (one worker each), so the per-GPU checks cost their time once; the host
copies run one GPU at a time (they share the CPU's root complex) and the GPU pairs one pair at a time.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuscout.frozen import Frozen
from gpuscout.results.schema import Case

CPU_MATMUL_N = {"fp32": 512, "bf16": 512, "fp16": 256}  # as the bench probe (measure/probes.py)
# Square sizes doctor tries on a GPU: the bands' source reported the best of n = 1024…10240 (TPD in
# hardware/expected_bands.toml) and its best sizes were 2048–10240; three sizes keep the burst short.
GPU_MATMUL_N = (2048, 4096, 8192)


class DoctorPlan(Frozen):
    device: str  # "cuda" or "cpu"
    out_dir: str
    dtypes: tuple[str, ...]
    soak_dtype: str | None  # the dtype held under load until the clocks settle
    burst_s: float = Field(gt=0)  # timed seconds per dtype (split over the sizes)
    soak_s: float = Field(ge=0)
    warmup: int = Field(1, ge=0)  # of the copy and checkpoint probes
    repeats: int = Field(3, ge=1)
    host_copies: bool = True
    p2p_bytes: int = Field(ge=4)
    p2p_repeats: int = Field(ge=1)
    pairs: Literal["all", "ring"] = "all"  # ring: each GPU to the next only (--quick)
    allreduce_bytes: tuple[int, ...] = ()
    allreduce_repeats: int = Field(5, ge=1)
    checkpoint_bytes: int | None = None  # rank 0 saves and loads a checkpoint of this size
    model_bytes: int | None = None
    folder: str = "."
    seed: int = 0
    collective_timeout_s: float = Field(300.0, gt=0)


class Phase(Frozen):
    """One check as a worker ran it, on the machine-wide monotonic clock (the parent slices its
    NVML samples with these)."""


    name: str
    start: float
    end: float


class RankReport(Frozen):
    rank: int
    world: int
    pid: int
    device_index: int | None = None
    device_name: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    capability: str | None = None
    ready_at: float | None = None  # epoch seconds at which this worker's device took its first tensor
    backend: str = ""
    phases: tuple[Phase, ...] = ()
    cases: tuple[Case, ...] = ()
    current: str = ""  # the check in flight, for the progress bar
    done: bool = False
    error: str | None = None


def doctor_plan(device: str, out_dir: str, *, quick: bool, dtypes: tuple[str, ...], soak_dtype: str | None,
                checkpoint_bytes: int | None, model_bytes: int | None, folder: str, seed: int) -> DoctorPlan:
    """The checks for this device, at --quick or default depth."""
    gpu = device == "cuda"
    return DoctorPlan(
        device=device, out_dir=out_dir, dtypes=dtypes, soak_dtype=soak_dtype,
        # Quick: 1 s a dtype and a 6 s soak; default: 3 s and 60 s, long enough for a GPU's clock to
        # settle at its power or thermal limit (docs/doctor.md §2.3).
        burst_s=(1.0 if quick else 3.0) if gpu else (0.5 if quick else 1.5),
        soak_s=(6.0 if quick else 60.0) if gpu else (2.0 if quick else 10.0),
        warmup=0 if quick else 1, repeats=2 if quick else 5, host_copies=gpu,
        p2p_bytes=(256 << 20) if gpu else (8 << 20), p2p_repeats=3 if quick else 5, pairs="ring" if quick else "all",
        allreduce_bytes=_allreduce_sizes(gpu, quick), allreduce_repeats=5 if quick else 10,
        checkpoint_bytes=checkpoint_bytes, model_bytes=model_bytes, folder=folder, seed=seed,
        collective_timeout_s=120.0 if quick else 300.0)


def _allreduce_sizes(gpu: bool, quick: bool) -> tuple[int, ...]:
    """Message sizes: nccl-tests' peak bus bandwidth needs large messages (256 MiB is too small on
    8 H100s, NVIDIA/nccl-tests#212), so the GPU sweep ends at 2 GiB; gloo on a CPU is far slower."""
    if gpu:
        return (64 << 20, 1 << 30) if quick else (16 << 20, 128 << 20, 1 << 30, 2 << 30)
    return (1 << 20, 16 << 20) if quick else (1 << 20, 16 << 20, 64 << 20)
