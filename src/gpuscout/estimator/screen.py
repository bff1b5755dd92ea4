"""Screen a job against GPUs: breakdown, fit, limits, what to change, and GPU counts — per GPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.colocate import Colocation, colocation
from gpuscout.estimator.compat import Finding, check, excluded, no_time_note
from gpuscout.estimator.fit import (
    Limits,
    Suggestion,
    combined_plan,
    fit_over_gpu_counts,
    limits,
    plan_keeping_task,
    suggest_changes,
)
from gpuscout.estimator.host import HostNeeds, estimate_host
from gpuscout.estimator.margin import FITS, Band, band_for, judge_fit
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.speed.estimate import SpeedEstimate, estimate_speed
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.job import FinetuneJob, InferenceJob, Job
from gpuscout.workload.model import Model
from gpuscout.workload.shape import ModelShape


class GpuVerdict(Frozen):
    gpu_sku: str
    gpu_name: str
    breakdown: MemoryBreakdown
    fits: bool
    headroom_bytes: int
    limits: Limits
    suggestions: tuple[Suggestion, ...]  # single changes, cheapest first (only when it does not fit)
    plan: tuple[Suggestion, ...]  # cumulative changes that make it fit (only when it does not fit); when it
    # is tight, the task-keeping changes that leave the error band's headroom (empty if none do)
    peak_by_gpu_count: dict[int, int]  # sharded / tensor-parallel jobs: per-GPU peak at each count
    speed: SpeedEstimate | None  # None when this GPU cannot run the job's precision at all
    speed_note: str | None = None  # why `speed` is None: the speed model's reason, shown in place of a time
    colocation: Colocation | None = None  # co-served models: the split of the GPU, each model's limit
    # The compatibility rules' findings (estimator/compat.py); an "excluded" one leaves `speed` None.
    compat: tuple[Finding, ...] = ()
    # fits / tight / does not fit, against the estimator's error band (estimator/margin.py)
    fit_verdict: str = FITS
    band: Band | None = None


class Screening(Frozen):
    job_name: str
    job_kind: str
    model_name: str
    verdicts: tuple[GpuVerdict, ...]
    host: HostNeeds | None = None  # host RAM and disk of the job as written (docs/estimator.md §2.13)
    # The trainer whose defaults the job resolved, "<id>@<version>" (workload/frameworks.toml); None: none named.
    framework: str | None = None
    quiet_defaults: ClassVar[dict[str, Any]] = {"framework": None}


def screen(job: Job, model: Model, gpus: Sequence[Gpu], margin_pct: float | None = None) -> Screening:
    """`margin_pct`: the user's --margin, in place of the validated error band."""
    band = band_for(job, margin_pct)
    return Screening(job_name=job.name, job_kind=job.kind, model_name=model.name,
                     verdicts=tuple(judge(job, model, gpu, band) for gpu in gpus), host=estimate_host(job, model),
                     framework=job.framework if isinstance(job, FinetuneJob) else None)


def judge(job: Job, model: Model, gpu: Gpu, band: Band | None = None) -> GpuVerdict:
    band = band if band is not None else band_for(job)
    breakdown = estimate_memory(job, model, gpu)
    fits = breakdown.fits
    spread = _is_spread(job)
    findings = check(job, model, gpu)
    # A setup the rules say cannot run gets no job time; the findings say why and the fix.
    speed, speed_note = _speed(job, model, gpu) if not excluded(findings) else (None, no_time_note(findings))
    return GpuVerdict(
        gpu_sku=gpu.sku, gpu_name=gpu.name, breakdown=breakdown, fits=fits,
        headroom_bytes=breakdown.headroom_bytes, limits=limits(job, model, gpu, band),
        suggestions=() if fits else suggest_changes(job, model, gpu),
        plan=_plan(job, model, gpu, breakdown, band),
        peak_by_gpu_count={n: b.peak_bytes for n, b in fit_over_gpu_counts(job, model, gpu).items()}
        if spread else {},
        speed=speed, speed_note=speed_note, compat=findings,
        colocation=colocation(job, model, gpu) if isinstance(job, InferenceJob) and job.co_served
        and isinstance(model, ModelShape) else None,
        fit_verdict=judge_fit(breakdown.peak_bytes, breakdown.usable_bytes, band), band=band,
    )


def _plan(job: Job, model: Model, gpu: Gpu, breakdown: MemoryBreakdown, band: Band) -> tuple[Suggestion, ...]:
    """Not fitting: the cheapest plan that fits. Tight: the task-keeping plan that leaves the band's headroom."""
    if not breakdown.fits:
        return combined_plan(job, model, gpu)
    if judge_fit(breakdown.peak_bytes, breakdown.usable_bytes, band) == FITS:
        return ()
    return plan_keeping_task(job, model, gpu, band=band)


def _speed(job: Job, model: Model, gpu: Gpu) -> tuple[SpeedEstimate | None, str | None]:
    """The job's speed, or None and the reason: a precision the GPU has no rate for (bf16 on a V100
    or T4), or a multi-GPU job on a GPU with no GPU-to-GPU link in the catalog (GH200). The reason
    names no GPU, so a screen prints it once for every GPU it applies to."""
    try:
        return estimate_speed(job, model, gpu), None
    except GpuscoutError as exc:
        why, fix = (f"{s[:1].lower()}{s[1:]}" for s in (exc.why, exc.fix))
        return None, f"No job time: {why} To fix: {fix}"


def _is_spread(job: Job) -> bool:
    sharded = getattr(job, "sharding", "none") != "none" or getattr(job, "gpus", 1) > 1
    return sharded or getattr(job, "tensor_parallel", 1) > 1
