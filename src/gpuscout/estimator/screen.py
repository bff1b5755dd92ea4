"""Screen a job against GPUs: breakdown, fit, limits, what to change, and GPU counts — per GPU."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.fit import (
    Limits,
    Suggestion,
    combined_plan,
    fit_over_gpu_counts,
    limits,
    suggest_changes,
)
from gpuscout.estimator.memory import Job, Model, estimate_memory
from gpuscout.estimator.speed import SpeedEstimate, estimate_speed
from gpuscout.hardware.catalog import Gpu


class GpuVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_sku: str
    gpu_name: str
    breakdown: MemoryBreakdown
    fits: bool
    headroom_bytes: int
    limits: Limits
    suggestions: tuple[Suggestion, ...]  # single changes, cheapest first (only when it does not fit)
    plan: tuple[Suggestion, ...]  # cumulative changes that make it fit (only when it does not fit)
    peak_by_gpu_count: dict[int, int]  # sharded / tensor-parallel jobs: per-GPU peak at each count
    speed: SpeedEstimate | None  # None when this GPU cannot run the job's precision at all


class Screening(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    job_name: str
    job_kind: str
    model_name: str
    verdicts: tuple[GpuVerdict, ...]


def screen(job: Job, model: Model, gpus: Sequence[Gpu]) -> Screening:
    return Screening(job_name=job.name, job_kind=job.kind, model_name=model.name,
                     verdicts=tuple(judge(job, model, gpu) for gpu in gpus))


def judge(job: Job, model: Model, gpu: Gpu) -> GpuVerdict:
    breakdown = estimate_memory(job, model, gpu)
    fits = breakdown.fits
    spread = _is_spread(job)
    return GpuVerdict(
        gpu_sku=gpu.sku, gpu_name=gpu.name, breakdown=breakdown, fits=fits,
        headroom_bytes=breakdown.headroom_bytes, limits=limits(job, model, gpu),
        suggestions=() if fits else suggest_changes(job, model, gpu),
        plan=() if fits else combined_plan(job, model, gpu),
        peak_by_gpu_count={n: b.peak_bytes for n, b in fit_over_gpu_counts(job, model, gpu).items()}
        if spread else {},
        speed=_speed(job, model, gpu),
    )


def _speed(job: Job, model: Model, gpu: Gpu) -> SpeedEstimate | None:
    try:
        return estimate_speed(job, model, gpu)
    except GpuscoutError:
        return None  # e.g. an fp32 job on a GPU with no published fp32 rate


def _is_spread(job: Job) -> bool:
    sharded = getattr(job, "sharding", "none") != "none" or getattr(job, "gpus", 1) > 1
    return sharded or getattr(job, "tensor_parallel", 1) > 1
