"""One entry point for the speed model: `estimate_speed(job, model, gpu)`.

How long a job takes on a GPU, with an error band and the bound (compute, memory or
communication) of the phase that dominates. Each phase is a roofline over its FLOPs and bytes
(`roofline`), with achieved-efficiency factors from `efficiency.toml`:

* fine-tuning — `train`: training step, QLoRA dequantization, optimizer, collectives;
* serving — `serve`: prefill (TTFT), decode step (TPOT) at the concurrency, TP all-reduces;
* image generation — `image`: text encoders, denoiser steps, VAE decode;
* video generation — `video`: text encoder, DiT steps over frames × tokens, 3D VAE decode.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

from gpuscout.estimator.efficiency import Efficiency, calibrated, default_efficiency
from gpuscout.estimator.memory import Job, Model, kind_mismatch
from gpuscout.estimator.speed.colocate import estimate_colocated_speed
from gpuscout.estimator.speed.image import estimate_image_speed
from gpuscout.estimator.speed.roofline import Bound, PhaseTime, SpeedEstimate
from gpuscout.estimator.speed.serve import estimate_inference_speed
from gpuscout.estimator.speed.train import estimate_finetune_speed
from gpuscout.estimator.speed.video import estimate_video_speed
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, VideoJob
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape

if TYPE_CHECKING:
    from gpuscout.estimator.calibration import Calibration

__all__ = [
    "Bound",
    "Efficiency",
    "PhaseTime",
    "SpeedEstimate",
    "default_efficiency",
    "estimate_speed",
]


def estimate_speed(
    job: Job, model: Model, gpu: Gpu, *, gpus: int | None = None, efficiency: Efficiency | None = None,
    calibration: Calibration | None = None,
) -> SpeedEstimate:
    """Time of the whole job on `gpu`. `gpus` overrides the GPU count (fine-tune: all GPUs, split
    into tensor_parallel groups; inference: the tensor-parallel size). `efficiency` replaces the
    defaults for every phase; `calibration` replaces them per phase where it has this GPU
    (docs/estimator.md §3.11; None keeps any calibration already in force)."""
    with calibrated(calibration) if calibration is not None else nullcontext():
        return _estimate_speed(job, model, gpu, gpus=gpus, efficiency=efficiency)


def _estimate_speed(job: Job, model: Model, gpu: Gpu, *, gpus: int | None,
                    efficiency: Efficiency | None) -> SpeedEstimate:
    match job, model:
        case FinetuneJob(), ModelShape():
            return estimate_finetune_speed(job, model, gpu, gpus=gpus, efficiency=efficiency)
        case InferenceJob(), ModelShape():
            if job.co_served:  # several models time-slicing the same GPUs
                return estimate_colocated_speed(job, model, gpu, gpus=gpus, efficiency=efficiency)
            return estimate_inference_speed(job, model, gpu, gpus=gpus, efficiency=efficiency)
        case ImageJob(), ImageModelShape():
            return estimate_image_speed(job, model, gpu, efficiency=efficiency)
        case VideoJob(), VideoModelShape():
            return estimate_video_speed(job, model, gpu, efficiency=efficiency)
    raise kind_mismatch(job, model)
