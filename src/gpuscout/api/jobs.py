"""Jobs, models and the catalog: a job from its spec, the GPUs, a model's shape, what ships with gpuscout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.workload.job import Job as Job  # re-exported: the api names the job union too

if TYPE_CHECKING:
    from gpuscout.hardware.catalog import Gpu
    from gpuscout.workload.model import Model
    from gpuscout.workload.presets import LlmPreset

JobRef = Job | str | Path | None


def load_job(ref: JobRef = None) -> Job:
    """A job from a spec path, a shipped example's name, or None for the built-in default."""
    return job_and_dir(ref)[0]


def job_and_dir(ref: JobRef) -> tuple[Job, Path | None]:
    """The job and the folder its spec lies in (relative model paths are read from there)."""
    if ref is not None and not isinstance(ref, str | Path):
        return ref, None  # a job object already
    from gpuscout.workload.jobs import load_job_ref

    return load_job_ref(ref)


def job_and_model(ref: JobRef) -> tuple[Job, Model, Path | None]:
    """The job, its model's shape, and the folder its spec lies in."""
    from gpuscout.workload.jobs import resolve_job_model

    job, base_dir = job_and_dir(ref)
    return job, resolve_job_model(job, base_dir), base_dir


def gpus() -> tuple[Gpu, ...]:
    """The GPU catalog."""
    from gpuscout.hardware.catalog import load_catalog

    return tuple(load_catalog())


@dataclass(frozen=True)
class ModelReport:
    shape: Model
    weight_bytes_by_format: dict[str, int] = field(default_factory=dict)  # language models, per format
    kv_bytes_per_token_by_dtype: dict[str, int] = field(default_factory=dict)


def describe_model(ref: str) -> ModelReport:
    """A model's shape (config.json, model directory or preset), weight bytes and KV cache per token."""
    from gpuscout.estimator.weights import kv_bytes_per_token_by_dtype, weight_bytes_by_format
    from gpuscout.workload.image import ImageModelShape
    from gpuscout.workload.resolve import resolve_any
    from gpuscout.workload.video import VideoModelShape

    shape = resolve_any(ref)
    if isinstance(shape, ImageModelShape | VideoModelShape):
        return ModelReport(shape=shape)
    return ModelReport(shape=shape, weight_bytes_by_format=weight_bytes_by_format(shape),
                       kv_bytes_per_token_by_dtype=kv_bytes_per_token_by_dtype(shape))


@dataclass(frozen=True)
class ModelPresets:
    llm: tuple[LlmPreset, ...]  # language models, with their sources
    image: tuple[str, ...]  # image model ids
    video: tuple[str, ...]  # video model ids


def model_presets() -> ModelPresets:
    """The built-in model presets a job may name instead of a config.json."""
    from gpuscout.workload.image import image_preset_ids
    from gpuscout.workload.presets import llm_presets
    from gpuscout.workload.video import video_preset_ids

    return ModelPresets(llm=llm_presets(), image=image_preset_ids(), video=video_preset_ids())


def examples_dir() -> Path:
    """The folder of the example job specs and price sheet shipped with gpuscout."""
    from gpuscout.workload.jobs import examples_dir as shipped

    return shipped()
