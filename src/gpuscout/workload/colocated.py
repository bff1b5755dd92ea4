"""Several models served on the same GPUs: one engine per model, each a single-model job.

An inference spec may list `[[co_served]]` models beside its `model`. gpuscout models them the
way vLLM runs them: one process per model, each with its own CUDA context, weights, KV cache and
`gpu_memory_utilization` (docs/estimator.md §2.12). This module turns such a spec into the
single-model jobs the estimators already understand, and resolves and checks every model.
"""

from __future__ import annotations

from pathlib import Path

from gpuscout.errors import GpuscoutError, SpecError, UnknownNameError
from gpuscout.workload.job import CoServed, InferenceJob, ServedModel
from gpuscout.workload.resolve import resolve_llm
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.validate import validate_llm_job


class ColocatedShape(ModelShape):
    """The main model's shape, carrying the shapes of the models served beside it (same order as
    the spec's `co_served`). A `ModelShape` itself, so every single-model path still sees the main
    model; the estimators that know about co-serving read `co_served`."""

    co_served: tuple[ModelShape, ...]
    main_name: str  # `name` is "A + B" for titles; this is the main model's own name


def served_jobs(job: InferenceJob) -> tuple[InferenceJob, ...]:
    """The main model's job (without its co-served list), then one job per co-served model.

    Each co-served model gets the job's GPUs, tensor parallelism, engine and SLO-free defaults;
    its own weights, KV dtype, lengths, concurrency, batched tokens and request count.
    """
    return (job.model_copy(update={"co_served": (), "name": label(job.model, None)}),
            *(co_served_job(job, other) for other in job.co_served))


def co_served_job(job: InferenceJob, other: CoServed) -> InferenceJob:
    # Every per-model field (ServedModel's) comes from the co-served table, so a field added there is
    # never silently dropped; the GPUs, tensor parallelism and engine are the job's.
    own = {name: getattr(other, name) for name in ServedModel.model_fields}
    return InferenceJob(kind="inference", name=label(other.model, other.name), engine=job.engine,
                        gpu_memory_utilization=job.gpu_memory_utilization, tensor_parallel=job.tensor_parallel,
                        **own)


def label(model: str, name: str | None) -> str:
    """How a served model is named in reports: its own `name`, else the model reference's last part."""
    return name or model.rstrip("/").rsplit("/", 1)[-1] or model


def labels(job: InferenceJob) -> tuple[str, ...]:
    """One distinct label per served model, main first ('#2' added where two would read the same)."""
    raw = [j.name for j in served_jobs(job)]
    return tuple(name if raw.count(name) == 1 else f"{name} #{raw[:i + 1].count(name)}"
                 for i, name in enumerate(raw))


def resolve_colocated(job: InferenceJob, main: ModelShape, base_dir: Path | None) -> ColocatedShape:
    """Resolve and check every co-served model; an unknown one is named with its place in the spec."""
    shapes = tuple(_resolve_one(job, i, base_dir) for i in range(len(job.co_served)))
    title = " + ".join([main.name, *(s.name for s in shapes)])
    return ColocatedShape(**main.model_dump() | {"name": title}, co_served=shapes, main_name=main.name)


def _resolve_one(job: InferenceJob, index: int, base_dir: Path | None) -> ModelShape:
    other = job.co_served[index]
    where = f"co_served[{index}]"
    try:
        shape = resolve_llm(other.model, base_dir=base_dir)
        validate_llm_job(co_served_job(job, other), shape)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{where}: {exc.what}", exc.why, exc.fix) from None
    except GpuscoutError as exc:
        raise SpecError(f"{where}: {exc.what}", exc.why, exc.fix) from None
    return shape


def require_colocated(shape: ModelShape, job: InferenceJob) -> ColocatedShape:
    """The co-served shapes, or a clear error when a caller passed only the main model's (or the
    shapes of another job's models)."""
    if isinstance(shape, ColocatedShape) and len(shape.co_served) == len(job.co_served):
        return shape
    raise SpecError(
        f"The job serves several models but only {shape.name}'s shape was given.",
        "Co-served models are resolved with the job (`[[co_served]]` in the spec).",
        "Load the job with gpuscout.load_job / resolve_job_model, which resolves every served model.",
    )
