"""What a trace beside an estimate covers: the job as traced, the model at the traced depth, in words.

A trace runs one process on one device with the standard loss, so the job is traced as that: one
GPU, no sharding, one micro-batch, no chunked loss (a fine-tune); HF generate of the main model
alone (a serving job). An FSDP fine-tune on several GPUs that the sharded trace can run (full or
LoRA, AdamW, no offload, whole-layer checkpointing) keeps its GPUs and sharding: rank 0 of them is
traced on a fake process group (`trace.sharded`). `estimate --trace` estimates exactly the traced job
beside the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscout.errors import GpuscoutError
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob

if TYPE_CHECKING:
    from gpuscout.trace.llm import TraceResult
    from gpuscout.workload.model import Model
    from gpuscout.workload.shape import ModelShape


@dataclass(frozen=True)
class ScopedTrace:
    """A traced step and what was traced."""

    result: TraceResult
    job: FinetuneJob | InferenceJob  # the job as traced
    model: ModelShape  # the model at the traced depth
    scope: str  # in words: "2 layers, 1 GPU, no sharding, …"


@dataclass(frozen=True)
class TraceSkipped:
    reason: str  # why no trace was made


def trace_scoped(job: Job, model: Model, base_dir: Path | None,
                 layers: int | None) -> ScopedTrace | TraceSkipped:
    """Trace the job's real model as one process on one device, `layers` deep when given.

    A model that cannot be read raises; a trace that cannot run (no torch, an unsupported
    architecture) is skipped with its reason, so the analytic estimate still shows.
    """
    from gpuscout.workload.hf_config import config_with_depth, shape_from_hf_config
    from gpuscout.workload.resolve import llm_config
    from gpuscout.workload.shape import ModelShape

    if isinstance(job, ImageJob | VideoJob) or not isinstance(model, ModelShape):
        return TraceSkipped("trace mode covers language models only; image and video estimates are analytic")
    config = llm_config(job.model, base_dir=base_dir)
    if layers is not None:
        config = config_with_depth(config, layers)
        model = shape_from_hf_config(config, name=f"{model.name} ({layers} layers)", source=model.source)
    traced_job = as_traced(job)
    try:
        traced = run_trace(traced_job, model, config)
    except GpuscoutError as exc:
        return TraceSkipped(exc.render())
    where = (f"rank 0 of {job.gpus} GPUs (FSDP2 per decoder layer, fake process group)"
             if isinstance(job, FinetuneJob) and fsdp_traceable(job) else "1 GPU, no sharding")
    scope = f"{model.num_layers} layers, {where}" + (
        ", one micro-batch, standard cross-entropy" if isinstance(job, FinetuneJob) else ", HF generate")
    if isinstance(job, InferenceJob) and job.co_served:
        scope += ", the main model alone (co-served models are not traced)"
    return ScopedTrace(result=traced, job=traced_job, model=model, scope=scope)


def fsdp_traceable(job: Job) -> bool:
    """An FSDP fine-tune on several GPUs whose rank 0 the sharded trace can run as specified."""
    return (isinstance(job, FinetuneJob) and job.sharding == "fsdp" and job.gpus > 1 and job.tensor_parallel == 1
            and job.method != "qlora" and not job.offload_params and job.optimizer == "adamw"
            and not job.activation_offload and not job.optimizer_in_backward
            and (not job.gradient_checkpointing or job.checkpoint_policy == "full"))


def as_traced(job: FinetuneJob | InferenceJob) -> FinetuneJob | InferenceJob:
    """The job as one trace runs it."""
    if isinstance(job, FinetuneJob) and fsdp_traceable(job):
        # Rank 0 of the job's GPUs under FSDP2, in eager mode, one micro-batch, the standard loss.
        return job.model_copy(update={"grad_accum": 1, "chunked_cross_entropy": False,
                                      "optimizer_offload": False, "compile": False})
    if isinstance(job, FinetuneJob):
        # One process on one device, in eager mode: no sharding or parameter offload, no compile.
        return job.model_copy(update={"gpus": 1, "sharding": "none", "tensor_parallel": 1, "grad_accum": 1,
                                      "chunked_cross_entropy": False, "loss": None, "optimizer_offload": False,
                                      "offload_params": False, "compile": False})
    # HF generate: prefill the prompt, then one decode step; of the main model alone when co-served.
    return job.model_copy(update={"tensor_parallel": 1, "engine": "hf", "output_tokens": 1, "co_served": ()})


def run_trace(job: FinetuneJob | InferenceJob, model: ModelShape, config: dict[str, Any]) -> TraceResult:
    """One traced step of the job's model, built from its Hugging Face config."""
    from gpuscout.trace.llm import trace_finetune_step, trace_inference_step
    from gpuscout.workload.lora import lora_target_names

    if isinstance(job, FinetuneJob) and fsdp_traceable(job):
        from gpuscout.trace.sharded import trace_fsdp_finetune_step

        result: TraceResult = trace_fsdp_finetune_step(
            config, world_size=job.gpus, micro_batch=job.micro_batch, seq_len=job.seq_len,
            precision=job.precision, method=job.method, lora_rank=job.lora.rank, lora_alpha=job.lora.alpha,
            lora_target_modules=lora_target_names(model, job.lora) if job.method != "full" else (),
            gradient_checkpointing=job.gradient_checkpointing,
            attention="eager" if job.attention == "eager" else "sdpa")
        return result
    if isinstance(job, FinetuneJob):
        return trace_finetune_step(
            config, micro_batch=job.micro_batch, seq_len=job.seq_len, precision=job.precision,
            optimizer=job.optimizer, method=job.method, lora_rank=job.lora.rank, lora_alpha=job.lora.alpha,
            lora_target_modules=lora_target_names(model, job.lora) if job.method != "full" else (),
            gradient_checkpointing=job.gradient_checkpointing,
            attention="eager" if job.attention == "eager" else "sdpa", checkpoint_policy=job.checkpoint_policy,
            activation_offload=job.activation_offload, optimizer_in_bwd=job.optimizer_in_backward,
            checkpoint_layer_interval=job.checkpoint_layer_interval)
    weight = job.weights if job.weights in ("fp32", "bf16", "fp16") else "bf16"
    return trace_inference_step(config, batch=job.concurrency, prompt_tokens=job.prompt_tokens, weight_dtype=weight)
