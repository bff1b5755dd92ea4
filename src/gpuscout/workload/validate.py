"""Checks of a job against its model: the ones a spec alone cannot answer."""

from __future__ import annotations

from gpuscout.errors import SpecError
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob
from gpuscout.workload.shape import ModelShape


def validate_llm_job(job: FinetuneJob | InferenceJob, shape: ModelShape) -> None:
    """Raise SpecError for contexts past the model's maximum, oversized LoRA ranks, bad TP splits."""
    context = job.seq_len if isinstance(job, FinetuneJob) else job.context_tokens
    if context > shape.max_position_embeddings and not job.allow_long_context:
        raise SpecError(
            f"The job's context ({context:,} tokens) is longer than {shape.name}'s maximum "
            f"({shape.max_position_embeddings:,}).",
            "Positions past max_position_embeddings were never trained; quality collapses without RoPE scaling.",
            "Shorten seq_len / prompt_tokens + output_tokens, or set allow_long_context = true if you extend "
            "the context on purpose.",
        )
    if isinstance(job, FinetuneJob) and job.method != "full" and job.lora.rank > shape.hidden_size:
        raise SpecError(
            f"LoRA rank {job.lora.rank} is larger than {shape.name}'s hidden size ({shape.hidden_size}).",
            "A low-rank adapter with rank above the layer width has more parameters than the layer itself.",
            "Use a rank such as 8, 16, 64 or 128 (at most the hidden size), or method = \"full\".",
        )
    if shape.num_attention_heads % job.tensor_parallel:
        raise SpecError(
            f"tensor_parallel = {job.tensor_parallel} does not divide {shape.name}'s "
            f"{shape.num_attention_heads} attention heads.",
            "Tensor parallelism splits attention heads evenly across GPUs.",
            "Use a tensor_parallel size that divides the head count (1, 2, 4 or 8 usually).",
        )


def validate_image_job(job: ImageJob, native_resolution: int, max_resolution: int) -> None:
    """Refuse resolutions past what the model can be asked for at all."""
    if max(job.width, job.height) > max_resolution:
        raise SpecError(
            f"{job.width}×{job.height} is larger than this model supports ({max_resolution}px on a side).",
            f"The model was trained at {native_resolution}px; far larger sizes need tiling or upscaling.",
            f"Use at most {max_resolution}px per side, or generate smaller and upscale.",
        )
