"""Fit verdicts, what to change when a job does not fit, and inverse queries.

Every suggestion is computed by re-running the estimator on the changed job, so the memory it
saves is the estimator's own number, not a rule of thumb. Suggestions are ordered by what they
cost in speed (or in what the job computes), cheapest first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.memory import Job, Model, estimate_memory
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob

GPU_COUNTS = (2, 4, 8, 16, 32, 64)


class Suggestion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    change: str  # what to do, in words
    spec_change: dict[str, Any]  # the same, as edits to the job spec
    saves_bytes: int
    peak_bytes: int  # the peak after this change alone
    fits: bool
    speed_cost: str


class Limits(BaseModel):
    """The largest value of each knob that still fits on one GPU (0: not even the smallest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    values: dict[str, int]


Candidate = tuple[str, dict[str, Any], str]


def suggest_changes(job: Job, model: Model, gpu: Gpu) -> tuple[Suggestion, ...]:
    """Single changes that lower the peak, cheapest first; each says whether it alone makes it fit."""
    base = estimate_memory(job, model, gpu)
    out = []
    for change, edits, cost in candidates(job, model, gpu):
        after = estimate_memory(apply_edits(job, edits), model, gpu, gpus=edits.get("gpus"))
        saved = base.peak_bytes - after.peak_bytes
        if saved > 0 or "gpus" in edits or "tensor_parallel" in edits:
            out.append(Suggestion(change=change, spec_change=edits, saves_bytes=saved,
                                  peak_bytes=after.peak_bytes, fits=after.fits, speed_cost=cost))
    return tuple(out)


def combined_plan(job: Job, model: Model, gpu: Gpu) -> tuple[Suggestion, ...]:
    """Apply single changes cumulatively, cheapest first, until the job fits (empty if never)."""
    current, steps = job, []
    for change, edits, cost in candidates(job, model, gpu):
        trial = apply_edits(current, edits)
        before = estimate_memory(current, model, gpu).peak_bytes
        after = estimate_memory(trial, model, gpu)
        if after.peak_bytes >= before:
            continue
        current = trial
        steps.append(Suggestion(change=change, spec_change=edits, saves_bytes=before - after.peak_bytes,
                                peak_bytes=after.peak_bytes, fits=after.fits, speed_cost=cost))
        if after.fits:
            return tuple(steps)
    return ()


def apply_edits(job: Job, edits: dict[str, Any]) -> Job:
    nested = {k: v for k, v in edits.items() if "." not in k}
    for key, value in edits.items():
        if "." in key:
            outer, inner = key.split(".", 1)
            nested[outer] = getattr(job, outer).model_copy(update={inner: value})
    return job.model_copy(update=nested)


def candidates(job: Job, model: Model, gpu: Gpu) -> list[Candidate]:
    match job:
        case FinetuneJob():
            return _finetune_candidates(job) + _more_gpus(job, model, gpu)
        case InferenceJob():
            return _inference_candidates(job) + _more_gpus(job, model, gpu)
        case ImageJob():
            return _image_candidates(job)
    raise AssertionError(job)


def _finetune_candidates(job: FinetuneJob) -> list[Candidate]:
    c: list[Candidate] = []
    if job.micro_batch > 1:
        c.append((f"micro_batch {job.micro_batch} → 1 with grad_accum {job.grad_accum} → "
                  f"{job.grad_accum * job.micro_batch} (same global batch)",
                  {"micro_batch": 1, "grad_accum": job.grad_accum * job.micro_batch},
                  "small: lower GPU utilization per step, same math"))
    if not job.chunked_cross_entropy:
        c.append(("chunked (fused) cross-entropy", {"chunked_cross_entropy": True}, "none to small"))
    if job.attention == "eager":
        c.append(("flash/SDPA attention instead of eager", {"attention": "sdpa"}, "none (usually faster)"))
    if not job.gradient_checkpointing:
        c.append(("gradient checkpointing", {"gradient_checkpointing": True},
                  "about +33% step time (one extra forward)"))
    if job.optimizer == "adamw":
        c.append(("8-bit AdamW (bitsandbytes)", {"optimizer": "adamw_8bit"}, "small; near-identical convergence"))
    if job.method == "full":
        c.append(("LoRA instead of full fine-tuning", {"method": "lora"}, "faster steps; trains fewer weights"))
    if job.method != "qlora":
        c.append(("QLoRA (4-bit NF4 base weights)", {"method": "qlora", "precision": "bf16_mixed"},
                  "about +30–40% step time (dequantization); some quality risk"))
    if job.seq_len > 512:
        c.append((f"seq_len {job.seq_len} → {job.seq_len // 2}", {"seq_len": job.seq_len // 2},
                  "changes the task: shorter examples"))
    if not job.optimizer_offload:
        c.append(("offload optimizer states to CPU", {"optimizer_offload": True},
                  "large: optimizer step over PCIe, often 1.5–3× slower"))
    return c


def _inference_candidates(job: InferenceJob) -> list[Candidate]:
    c: list[Candidate] = []
    if job.kv_cache_dtype in ("bf16", "fp16", "fp32"):
        c.append(("fp8 KV cache", {"kv_cache_dtype": "fp8"}, "none to small; slight quality risk"))
    if job.concurrency > 1:
        c.append((f"concurrency {job.concurrency} → {job.concurrency // 2}", {"concurrency": job.concurrency // 2},
                  "lower throughput per GPU"))
    for fmt, cost in (("fp8", "none on Hopper/Ada (native fp8); small quality risk"),
                      ("int4", "faster decode, slower prefill; quality risk")):
        if _weight_rank(job.weights) > _weight_rank(fmt):
            c.append((f"{fmt} weights", {"weights": fmt}, cost))
    if job.prompt_tokens > 512:
        c.append((f"prompt_tokens {job.prompt_tokens} → {job.prompt_tokens // 2}",
                  {"prompt_tokens": job.prompt_tokens // 2}, "changes the task: shorter context"))
    if job.engine == "vllm" and job.gpu_memory_utilization < 0.95:
        c.append(("gpu_memory_utilization → 0.95", {"gpu_memory_utilization": 0.95}, "none; less safety margin"))
    return c


def _weight_rank(fmt: str) -> int:
    return {"fp32": 5, "bf16": 4, "fp16": 4, "fp8": 3, "int8": 3, "int4": 1}[fmt]


def _image_candidates(job: ImageJob) -> list[Candidate]:
    c: list[Candidate] = []
    if job.batch > 1:
        c.append((f"batch {job.batch} → 1", {"batch": 1}, "lower images/s"))
    if not job.vae_tiling:
        c.append(("VAE tiling", {"vae_tiling": True}, "small; decode a few % slower"))
    if job.attention == "eager":
        c.append(("SDPA attention instead of eager", {"attention": "sdpa"}, "none (usually faster)"))
    if job.dtype == "fp32":
        c.append(("fp16 weights", {"dtype": "fp16"}, "about 2× faster; negligible quality change"))
    if not job.cpu_offload:
        c.append(("model CPU offload (one component on the GPU at a time)", {"cpu_offload": True},
                  "seconds per image: components move over PCIe"))
    if max(job.width, job.height) > 512:
        c.append((f"{job.width}×{job.height} → {job.width // 2}×{job.height // 2}",
                  {"width": job.width // 2, "height": job.height // 2}, "changes the task: smaller images"))
    return c


def _more_gpus(job: FinetuneJob | InferenceJob, model: Model, gpu: Gpu) -> list[Candidate]:
    """The fewest GPUs that fit: ZeRO-3 sharding for training, tensor parallel for serving."""
    for n in GPU_COUNTS:
        if isinstance(job, FinetuneJob):
            if n <= job.gpus:
                continue
            edits: dict[str, Any] = {"gpus": n, "sharding": "zero3" if job.sharding in ("none", "zero1", "zero2")
                                     else job.sharding}
            cost = f"{n} GPUs; all-gathers every step (needs a fast interconnect)"
        else:
            if n <= job.tensor_parallel or _heads(model) % n:
                continue
            edits = {"tensor_parallel": n}
            cost = f"{n} GPUs in one node; all-reduce per layer (NVLink strongly preferred)"
        if estimate_memory(apply_edits(job, edits), model, gpu, gpus=edits.get("gpus")).fits:
            return [(f"spread over {n} GPUs ({'ZeRO-3' if 'gpus' in edits else 'tensor parallel'})", edits, cost)]
    return []


def _heads(model: Model) -> int:
    return getattr(model, "num_attention_heads", 1)


def largest_fitting(job: Job, model: Model, gpu: Gpu, field: str, upper: int) -> int:
    """Largest value of an integer job field in [1, upper] that fits (memory is monotone in it)."""
    def fits(value: int) -> bool:
        return estimate_memory(_with_field(job, field, value), model, gpu).fits

    if not fits(1):
        return 0
    lo, hi = 1, 1
    while hi < upper and fits(min(hi * 2, upper)):
        lo = hi = min(hi * 2, upper)
    if hi >= upper:
        return upper
    hi = min(hi * 2, upper)
    while hi - lo > 1:  # invariant: fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _with_field(job: Job, field: str, value: int) -> Job:
    if field == "context_tokens" and isinstance(job, InferenceJob):
        return job.model_copy(update={"prompt_tokens": max(value - job.output_tokens, 1)})
    if field == "side_px" and isinstance(job, ImageJob):
        side = max(8, value // 8 * 8)  # the VAE needs multiples of 8
        return job.model_copy(update={"width": side, "height": side})
    return job.model_copy(update={field: value})


def limits(job: Job, model: Model, gpu: Gpu) -> Limits:
    """Inverse queries: the largest micro-batch / sequence / concurrency / context / batch that fits."""
    values = {name: largest_fitting(job, model, gpu, name, upper) for name, upper in _limit_fields(job, model)}
    if "side_px" in values:
        values["side_px"] = values["side_px"] // 8 * 8
    return Limits(values=values)


def _limit_fields(job: Job, model: Model) -> Iterator[tuple[str, int]]:
    max_pos = getattr(model, "max_position_embeddings", 1 << 20)
    match job:
        case FinetuneJob():
            yield "micro_batch", 4096
            yield "seq_len", max_pos if not job.allow_long_context else 1 << 21
        case InferenceJob():
            yield "concurrency", 1 << 20
            yield "context_tokens", max_pos if not job.allow_long_context else 1 << 21
        case ImageJob():
            yield "batch", 1024
            yield "side_px", getattr(model, "max_resolution_px", 4096)


def fit_over_gpu_counts(job: Job, model: Model, gpu: Gpu,
                        counts: tuple[int, ...] = (1, 2, 4, 8)) -> dict[int, MemoryBreakdown]:
    """For a sharded or tensor-parallel job: the per-GPU breakdown at each GPU count."""
    spread: Callable[[int], Job]
    if isinstance(job, FinetuneJob):
        def spread(n: int) -> Job:
            return job.model_copy(update={"gpus": n, "tensor_parallel": 1 if n % job.tensor_parallel else
                                          job.tensor_parallel})
    elif isinstance(job, InferenceJob):
        def spread(n: int) -> Job:
            return job.model_copy(update={"tensor_parallel": n})
    else:
        return {1: estimate_memory(job, model, gpu)}
    return {n: estimate_memory(spread(n), model, gpu) for n in counts if _heads(model) % n == 0}
