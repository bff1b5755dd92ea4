"""One entry point for every job kind: `estimate_memory(job, model, gpu)`."""

from __future__ import annotations

from gpuscout.errors import SpecError
from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.colocate import estimate_colocated_memory
from gpuscout.estimator.image import estimate_image_memory
from gpuscout.estimator.inference import estimate_inference_memory
from gpuscout.estimator.training import estimate_finetune_memory
from gpuscout.estimator.video import estimate_video_memory
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.model import Model
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape


def estimate_memory(job: Job, model: Model, gpu: Gpu, *, gpus: int | None = None) -> MemoryBreakdown:
    """Per-GPU peak memory of `job` on `gpu`; `gpus` overrides a fine-tune's GPU count."""
    match job, model:
        case FinetuneJob(), ModelShape():
            return estimate_finetune_memory(job, model, gpu, gpus=gpus)
        case InferenceJob(), ModelShape():
            if job.co_served:  # several models on the same GPUs, one engine each
                return estimate_colocated_memory(job, model, gpu)
            return estimate_inference_memory(job, model, gpu)
        case ImageJob(), ImageModelShape():
            return estimate_image_memory(job, model, gpu)
        case VideoJob(), VideoModelShape():
            return estimate_video_memory(job, model, gpu)
    raise kind_mismatch(job, model)


def kind_mismatch(job: Job, model: Model) -> SpecError:
    return SpecError(
        f"A {job.kind} job cannot run on {model.name}.",
        "Fine-tune and inference jobs need a language model; image and video jobs need a diffusion model "
        "of their kind.",
        "Set `model` to a matching preset (`gpuscout model --list`), config.json or checkpoint.",
    )
