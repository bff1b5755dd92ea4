"""`gpuscout estimate`: screen a job spec across GPUs, optionally beside a FakeTensor trace."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.memory import Job, Model, estimate_memory
from gpuscout.estimator.screen import screen
from gpuscout.estimator.validate import validate_llm_job
from gpuscout.hardware.catalog import Gpu, find_gpu, load_catalog
from gpuscout.report.console import screening_table, trace_table, verdict_detail
from gpuscout.workload.hf_config import config_with_depth, shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, load_job, parse_job
from gpuscout.workload.lora import lora_target_names
from gpuscout.workload.resolve import llm_config, resolve_image, resolve_llm
from gpuscout.workload.shape import ModelShape


def run_estimate(job_path: Path | None, gpu_names: list[str], *, trace: bool,
                 trace_layers: int | None) -> tuple[dict[str, Any], RenderableType]:
    job, base_dir = load_job_or_default(job_path)
    model = resolve_model(job, base_dir)
    gpus = [find_gpu(n) for n in gpu_names] if gpu_names else list(load_catalog())
    screening = screen(job, model, gpus)
    payload: dict[str, Any] = {"job": job.model_dump(), "screening": screening.model_dump()}
    parts: list[RenderableType] = [screening_table(screening)]
    if gpu_names:
        parts += [verdict_detail(v) for v in screening.verdicts]
    else:
        parts.append(Text("Detail for one GPU: gpuscout estimate JOB.toml --gpu h100", style="dim"))
    if trace:
        parts += trace_parts(job, model, gpus[0], base_dir, trace_layers, payload)
    return payload, Group(*parts)


def load_job_or_default(job_path: Path | None) -> tuple[Job, Path | None]:
    if job_path is not None:
        return load_job(job_path), job_path.parent
    text = resources.files("gpuscout.workload").joinpath("default_job.toml").read_text(encoding="utf-8")
    return parse_job(tomllib.loads(text), origin="built-in default job"), None


def resolve_model(job: Job, base_dir: Path | None) -> Model:
    if isinstance(job, ImageJob):
        return resolve_image(job.model)
    shape = resolve_llm(job.model, base_dir=base_dir)
    validate_llm_job(job, shape)
    return shape


def trace_parts(job: Job, model: Model, gpu: Gpu, base_dir: Path | None, layers: int | None,
                payload: dict[str, Any]) -> list[RenderableType]:
    """Trace the job's real model and set the analytic estimate of the same traced job beside it.

    The trace runs one process on one device with the standard loss, so the analytic side is
    re-estimated for exactly that: the same depth, one GPU, no sharding, no chunked loss.
    """
    if not isinstance(job, (FinetuneJob, InferenceJob)) or not isinstance(model, ModelShape):
        return [Text("Trace mode covers language models only; image estimates are analytic.", style="yellow")]
    config = llm_config(job.model, base_dir=base_dir)
    if layers is not None:
        config = config_with_depth(config, layers)
        model = shape_from_hf_config(config, name=f"{model.name} ({layers} layers)", source=model.source)
    traced_job = _as_traced(job)
    try:
        traced = run_trace(traced_job, model, config)
    except GpuscoutError as exc:
        return [Text(f"Trace skipped: {exc.render()}", style="yellow")]
    payload["trace"] = traced.model_dump()
    analytic = estimate_memory(traced_job, model, gpu)
    payload["trace_analytic"] = analytic.model_dump()
    scope = f"{model.num_layers} layers, 1 GPU, no sharding" + (
        ", one micro-batch, standard cross-entropy" if isinstance(job, FinetuneJob) else ", HF generate")
    return [Text(f"Compared as traced: {scope}.", style="bold"),
            trace_table(analytic, trace_categories(traced.peak_bytes), traced.peak_total_bytes),
            Text("\n".join(traced.notes), style="dim")]


def _as_traced(job: FinetuneJob | InferenceJob) -> FinetuneJob | InferenceJob:
    if isinstance(job, FinetuneJob):
        return job.model_copy(update={"gpus": 1, "sharding": "none", "tensor_parallel": 1, "grad_accum": 1,
                                      "chunked_cross_entropy": False, "optimizer_offload": False})
    # HF generate: prefill the prompt, then one decode step.
    return job.model_copy(update={"tensor_parallel": 1, "engine": "hf", "output_tokens": 1})


def run_trace(job: FinetuneJob | InferenceJob, model: ModelShape, config: dict[str, Any]) -> Any:
    from gpuscout.trace.llm import trace_finetune_step, trace_inference_step

    if isinstance(job, FinetuneJob):
        return trace_finetune_step(
            config, micro_batch=job.micro_batch, seq_len=job.seq_len, precision=job.precision,
            optimizer=job.optimizer, method=job.method, lora_rank=job.lora.rank, lora_alpha=job.lora.alpha,
            lora_target_modules=_trace_targets(job, model), gradient_checkpointing=job.gradient_checkpointing,
            attention="eager" if job.attention == "eager" else "sdpa")
    weight = job.weights if job.weights in ("fp32", "bf16", "fp16") else "bf16"
    return trace_inference_step(config, batch=job.concurrency, prompt_tokens=job.prompt_tokens, weight_dtype=weight)


def _trace_targets(job: FinetuneJob, model: ModelShape) -> tuple[str, ...]:
    """The leaf module names the analytic estimate adapts, so both sides adapt the same layers."""
    if job.method == "full":
        return ()
    return lora_target_names(model, job.lora)


def trace_categories(peaks: dict[str, int]) -> dict[str, int]:
    """MemTracker's categories in the estimator's names (parameters + buffers are weights)."""
    names = {"parameters": "weights", "buffers": "weights", "other": "temporaries"}
    out: dict[str, int] = {}
    for cat, value in peaks.items():
        out[names.get(cat, cat)] = out.get(names.get(cat, cat), 0) + value
    return out
