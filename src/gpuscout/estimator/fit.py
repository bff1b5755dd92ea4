"""Fit verdicts, what to change when a job does not fit, and inverse queries.

Every suggestion is computed by re-running the estimator on the changed job, so the memory it
saves is the estimator's own number, not a rule of thumb. Suggestions are ordered by what they
cost in speed (or in what the job computes), cheapest first. Each is classed as keeping the task
(same data, model, batch and outputs, computed differently) or changing it; a plan that keeps the
task is preferred, and it is the only kind `pick` applies on its own (docs/estimator.md §2.11).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from pydantic import Field

from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.margin import FITS, Band, band_for, judge_fit
from gpuscout.estimator.memory import estimate_memory
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.colocated import ColocatedShape
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.model import Model

GPU_COUNTS = (2, 4, 8, 16, 32, 64)


class Suggestion(Frozen):
    change: str  # what to do, in words
    spec_change: dict[str, Any]  # the same, as edits to the job spec
    saves_bytes: int
    peak_bytes: int  # the peak after this change alone
    fits: bool
    speed_cost: str
    # True: the job computes the same thing (same data, model, batch, outputs), only differently, so
    # `pick` may apply it as part of a plan. False: it changes the task (shorter sequences, LoRA
    # instead of full, 4-bit weights, lower concurrency, smaller images …); only ever offered.
    keeps_task: bool
    # Job-time factors for what the speed model leaves out (expected, pessimistic end of the band);
    # 1.0 where the speed model already counts the cost (docs/estimator.md §2.11).
    slowdown: float = 1.0
    slowdown_high: float = 1.0


class Limits(Frozen):
    """The largest value of each knob that still fits on one GPU (0: nothing fits, even at 1)."""


    values: dict[str, int]
    # The same with the error band's headroom kept (docs/estimator.md §2.15): the size to plan on;
    # `values` is the unguarded one beside it. Empty when no band was given.
    guarded: dict[str, int] = Field(default_factory=dict)


class Candidate(NamedTuple):
    change: str  # in words
    edits: dict[str, Any]  # as job-spec edits
    speed_cost: str  # in words
    keeps_task: bool  # see Suggestion.keeps_task
    slowdown: tuple[float, float] = (1.0, 1.0)  # see Suggestion.slowdown: (expected, pessimistic)


# Costs the speed model does not capture, as job-time factors (expected, pessimistic). Each is an
# ASSUMPTION sized in docs/estimator.md §2.11; they widen the band rather than hide the cost.
SMALLER_MICRO_BATCH = (1.0, 1.15)  # smaller GEMMs reach a lower fraction of peak
CHUNKED_LOSS = (1.0, 1.05)  # the LM head and loss run in chunks
EIGHT_BIT_ADAM = (1.0, 1.05)  # block-wise (de)quantization of the states in the optimizer step
VLLM_SMALLER_CHUNKS = (1.0, 1.05)  # vLLM: prefill split into 2,048-token chunks
VLLM_EAGER = (1.0, 1.3)  # vLLM enforce_eager: launches are in the speed model (§3.6); 4.3× seen at 3B on H200
CPU_ADAM = (1.5, 3.0)  # the Adam update itself runs on the host CPU (only the PCIe traffic is modelled)
FP8_KV = (1.0, 1.1)  # KV (de)quantization in attention kernels
VAE_TILES = (1.0, 1.05)  # overlapping tiles are decoded twice at their seams
# Sequential offload: accelerate's per-module hooks and pageable host copies, beyond the PCIe
# volume the speed model counts (docs/video.md §4). ASSUMPTION.
SEQUENTIAL_OFFLOAD = (1.0, 2.0)
# Training settings (docs/estimator.md §2.14). The speed model counts their FLOPs and PCIe traffic; these
# widen the band for what it does not see: pointwise recompute (selective checkpointing) and copies the
# side stream fails to hide (activation offload). ASSUMPTIONS, sized in §2.14.
SELECTIVE_RECOMPUTE = (1.0, 1.1)
ACTIVATION_OFFLOAD = (1.0, 1.25)


def suggest_changes(job: Job, model: Model, gpu: Gpu) -> tuple[Suggestion, ...]:
    """Single changes that lower the peak, cheapest first; each says whether it alone makes it fit."""
    return _single(job, model, gpu, candidates(job, model, gpu))


def _single(job: Job, model: Model, gpu: Gpu, pool: Sequence[Candidate]) -> tuple[Suggestion, ...]:
    base = estimate_memory(job, model, gpu)
    out = []
    for c in pool:
        after = estimate_memory(apply_edits(job, c.edits), model, gpu, gpus=c.edits.get("gpus"))
        saved = base.peak_bytes - after.peak_bytes
        if saved > 0 or "gpus" in c.edits or "tensor_parallel" in c.edits:
            out.append(_suggestion(c, saved, after.peak_bytes, after.fits))
    return tuple(out)


def _suggestion(c: Candidate, saved: int, peak: int, fits: bool) -> Suggestion:
    return Suggestion(change=c.change, spec_change=c.edits, saves_bytes=saved, peak_bytes=peak, fits=fits,
                      speed_cost=c.speed_cost, keeps_task=c.keeps_task, slowdown=c.slowdown[0],
                      slowdown_high=c.slowdown[1])


def combined_plan(job: Job, model: Model, gpu: Gpu) -> tuple[Suggestion, ...]:
    """The cheapest sequence of changes that fits: one that keeps the task if there is one, else any."""
    return plan_keeping_task(job, model, gpu) or _plan(job, model, gpu, candidates(job, model, gpu))


def plan_keeping_task(job: Job, model: Model, gpu: Gpu, *, same_gpus: bool = False,
                      band: Band | None = None) -> tuple[Suggestion, ...]:
    """Only changes that keep the task; `same_gpus` also leaves the GPU count and parallelism alone
    (`pick` lays the job out on an instance's GPUs itself). Empty if they never make it fit. With
    `band`, the plan must leave the band's headroom (the verdict *fits*, not *tight*)."""
    keep = [c for c in candidates(job, model, gpu, more_gpus=not same_gpus) if c.keeps_task]
    return _plan(job, model, gpu, keep, band)


def _ok(b: MemoryBreakdown, band: Band | None, planned: Job) -> bool:
    """Fits; with a band, fits with the headroom of the band of the job as planned: a step that adds
    offload or sharding moves the job to that setup's (wider) band. A --margin override stays as given."""
    if band is None:
        return b.fits
    return judge_fit(b.peak_bytes, b.usable_bytes, band if band.override else band_for(planned)) == FITS


def task_changing_options(job: Job, model: Model, gpu: Gpu) -> tuple[Suggestion, ...]:
    """The single changes that would alter the task, with what each saves: offered, never applied."""
    pool = [c for c in candidates(job, model, gpu, more_gpus=False) if not c.keeps_task]
    return _single(job, model, gpu, pool)


def _plan(job: Job, model: Model, gpu: Gpu, pool: Sequence[Candidate],
          band: Band | None = None) -> tuple[Suggestion, ...]:
    """Apply changes cumulatively, cheapest first, until the job fits; then drop the dearest steps
    the fit does not need (a later step can make an earlier one unnecessary). Empty if never."""
    taken: list[Candidate] = []
    current, before = job, estimate_memory(job, model, gpu).peak_bytes
    for c in pool:
        after = estimate_memory(apply_edits(current, c.edits), model, gpu)
        if after.peak_bytes >= before:
            continue
        current, before = apply_edits(current, c.edits), after.peak_bytes
        taken.append(c)
        if _ok(after, band, current):
            return _steps(job, model, gpu, _prune(job, model, gpu, taken, band))
    return ()


def _prune(job: Job, model: Model, gpu: Gpu, taken: list[Candidate], band: Band | None = None) -> list[Candidate]:
    """Try leaving out each step but the last (which made it fit), dearest first."""
    kept = list(taken)
    for c in reversed(taken[:-1]):
        rest = [k for k in kept if k is not c]
        planned = _apply_all(job, rest)
        if _ok(estimate_memory(planned, model, gpu), band, planned):
            kept = rest
    return kept


def _apply_all(job: Job, steps: Sequence[Candidate]) -> Job:
    for c in steps:
        job = apply_edits(job, c.edits)
    return job


def _steps(job: Job, model: Model, gpu: Gpu, steps: Sequence[Candidate]) -> tuple[Suggestion, ...]:
    """Each step with the memory it saves after the ones before it, and whether the job then fits."""
    out, current = [], job
    before = estimate_memory(job, model, gpu).peak_bytes
    for c in steps:
        current = apply_edits(current, c.edits)
        after = estimate_memory(current, model, gpu)
        out.append(_suggestion(c, before - after.peak_bytes, after.peak_bytes, after.fits))
        before = after.peak_bytes
    return tuple(out)


def planned_job(job: Job, plan: Sequence[Suggestion]) -> Job:
    """The job with every step of a plan applied."""
    for s in plan:
        job = apply_edits(job, s.spec_change)
    return job


def plan_slowdown(plan: Sequence[Suggestion]) -> tuple[float, float]:
    """The plan's job-time factors for costs the speed model leaves out (expected, pessimistic)."""
    expected = high = 1.0
    for s in plan:
        expected, high = expected * s.slowdown, high * s.slowdown_high
    return expected, high


def apply_edits(job: Job, edits: dict[str, Any]) -> Job:
    nested = {k: v for k, v in edits.items() if "." not in k}
    for key, value in edits.items():
        if "." in key:
            outer, inner = key.split(".", 1)
            nested[outer] = getattr(job, outer).model_copy(update={inner: value})
    return job.model_copy(update=nested)


def candidates(job: Job, model: Model, gpu: Gpu, *, more_gpus: bool = True) -> list[Candidate]:
    """Every change that could lower the peak, cheapest in speed first; `more_gpus` adds the fewest
    GPUs that fit (ZeRO-3 / tensor parallel)."""
    match job:
        case FinetuneJob():
            return _finetune_candidates(job) + (_more_gpus(job, model, gpu) if more_gpus else [])
        case InferenceJob():
            return _inference_candidates(job) + (_more_gpus(job, model, gpu) if more_gpus else [])
        case ImageJob():
            return _image_candidates(job)
        case VideoJob():
            return _video_candidates(job)
    raise AssertionError(job)


def _finetune_candidates(job: FinetuneJob) -> list[Candidate]:
    c: list[Candidate] = []
    if not job.optimizer_in_backward and job.micro_batch == 1 and job.grad_accum == 1:
        # Offered only where no plan step can raise grad_accum (the micro-batch step needs micro_batch > 1).
        c.append(Candidate("optimizer step in the backward", {"optimizer_in_backward": True},
                           "none: same updates; each gradient freed at once", True))
    if job.micro_batch > 1:
        c.append(Candidate(f"micro_batch {job.micro_batch} → 1 with grad_accum {job.grad_accum} → "
                           f"{job.grad_accum * job.micro_batch} (same global batch)",
                           {"micro_batch": 1, "grad_accum": job.grad_accum * job.micro_batch},
                           "small: lower GPU utilization per step, same math", True, SMALLER_MICRO_BATCH))
    if job.loss_impl != "fused":
        # A framework's loss (or an explicit one) is replaced by the fused kernel; otherwise the old switch.
        edit: dict[str, object] = {"chunked_cross_entropy": True} if job.loss is None else {"loss": "fused"}
        c.append(Candidate("chunked (fused) cross-entropy", edit, "none to small", True, CHUNKED_LOSS))
    if job.attention == "eager":
        c.append(Candidate("flash/SDPA attention instead of eager", {"attention": "sdpa"}, "none (usually faster)",
                           True))
    c += _settings_candidates(job)
    if not job.gradient_checkpointing:
        c.append(Candidate("gradient checkpointing", {"gradient_checkpointing": True},
                           "about +33% step time (one extra forward)", True))
    if job.optimizer == "adamw":
        c.append(Candidate("8-bit AdamW (bitsandbytes)", {"optimizer": "adamw_8bit"},
                           "small; near-identical convergence", True, EIGHT_BIT_ADAM))
    if job.optimizer in ("adamw", "adamw_8bit"):
        c.append(Candidate("paged 8-bit AdamW (bitsandbytes)", {"optimizer": "paged_adamw_8bit"},
                           "small; states paged over PCIe when they do not fit", True, EIGHT_BIT_ADAM))
    if not job.activation_offload:
        c.append(Candidate("offload activations to CPU", {"activation_offload": True},
                           "PCIe copies, mostly hidden; up to +25%", True, ACTIVATION_OFFLOAD))
    if job.method == "qlora" and job.upcast_unquantized:
        # peft's prepare_model_for_kbit_training makes embeddings and lm_head fp32 (docs/estimator.md §2.3).
        c.append(Candidate("keep embeddings and lm_head 16-bit (skip peft's fp32 upcast, as unsloth does)",
                           {"upcast_unquantized": False}, "none; the frozen 16-bit weights stay as loaded", True))
    if job.method == "full":
        c.append(Candidate("LoRA instead of full fine-tuning", {"method": "lora"},
                           "changes the task: trains adapters, not the weights", False))
    if job.method != "qlora":
        c.append(Candidate("QLoRA (4-bit NF4 base weights)", {"method": "qlora", "precision": "bf16_mixed"},
                           "changes the task: 4-bit base weights; about +30–40% step time", False))
    if job.seq_len > 512:
        c.append(Candidate(f"seq_len {job.seq_len} → {job.seq_len // 2}", {"seq_len": job.seq_len // 2},
                           "changes the task: shorter examples", False))
    if not job.optimizer_offload:
        c.append(Candidate("offload optimizer states to CPU", {"optimizer_offload": True},
                           "large: optimizer step on the CPU, states over PCIe; often 1.5–3× slower", True, CPU_ADAM))
    return c


def _settings_candidates(job: FinetuneJob) -> list[Candidate]:
    """Selective checkpointing: cheaper than full (no matmul recompute), saves less."""
    if job.gradient_checkpointing:
        return []
    return [Candidate("selective activation checkpointing", {"gradient_checkpointing": True,
                                                              "checkpoint_policy": "selective"},
                      "small: pointwise ops recomputed", True, SELECTIVE_RECOMPUTE)]


def _inference_candidates(job: InferenceJob) -> list[Candidate]:
    c: list[Candidate] = []
    if job.kv_cache_dtype in ("bf16", "fp16", "fp32"):
        c.append(Candidate("fp8 KV cache", {"kv_cache_dtype": "fp8"}, "none to small; slight quality risk", True,
                           FP8_KV))
    if job.concurrency > 1:
        c.append(Candidate(f"concurrency {job.concurrency} → {job.concurrency // 2}",
                           {"concurrency": job.concurrency // 2}, "changes the task: fewer requests at once", False))
    for fmt, cost in (("fp8", "changes the task: fp8 weights (fast on Hopper/Ada); small quality risk"),
                      ("int4", "changes the task: int4 weights; faster decode, slower prefill; quality risk")):
        if _weight_rank(job.weights) > _weight_rank(fmt):
            c.append(Candidate(f"{fmt} weights", {"weights": fmt}, cost, False))
    if job.prompt_tokens > 512:
        c.append(Candidate(f"prompt_tokens {job.prompt_tokens} → {job.prompt_tokens // 2}",
                           {"prompt_tokens": job.prompt_tokens // 2}, "changes the task: shorter context", False))
    if job.engine == "vllm" and job.gpu_memory_utilization < 0.95:
        c.append(Candidate("gpu_memory_utilization → 0.95", {"gpu_memory_utilization": 0.95},
                           "none; less safety margin", True))
    return c + _vllm_setting_candidates(job)


def _vllm_setting_candidates(job: InferenceJob) -> list[Candidate]:
    """vLLM settings that shrink what it profiles or captures (docs/estimator.md §2.8)."""
    if job.engine != "vllm":
        return []
    c: list[Candidate] = []
    # Unset max_num_seqs is up to 1024 (vLLM V1 on large GPUs); the sampler is profiled at that many rows.
    seqs = job.max_num_seqs or 1024
    if seqs > job.concurrency:
        c.append(Candidate(f"max_num_seqs {seqs} → {job.concurrency}", {"max_num_seqs": job.concurrency},
                           "none: the job never runs more sequences at once", True))
    if job.max_num_batched_tokens > 2048:
        c.append(Candidate(f"max_num_batched_tokens {job.max_num_batched_tokens} → 2048",
                           {"max_num_batched_tokens": 2048}, "small: long prompts prefill in more chunks", True,
                           VLLM_SMALLER_CHUNKS))
    if not job.enforce_eager:
        c.append(Candidate("enforce_eager (no CUDA graphs)", {"enforce_eager": True},
                           "decode slower: kernels launched one by one", True, VLLM_EAGER))
    return c


def _weight_rank(fmt: str) -> int:
    return {"fp32": 5, "bf16": 4, "fp16": 4, "fp8": 3, "int8": 3, "int4": 1}[fmt]


def _image_candidates(job: ImageJob) -> list[Candidate]:
    c: list[Candidate] = []
    if job.batch > 1:
        c.append(Candidate(f"batch {job.batch} → 1", {"batch": 1}, "lower images/s (same images)", True))
    if job.batch > 1 and not job.vae_slicing and not job.vae_tiling:
        c.append(Candidate("VAE slicing (decode one image at a time)", {"vae_slicing": True}, "none to small", True))
    if not job.vae_tiling:
        c.append(Candidate("VAE tiling", {"vae_tiling": True}, "small; decode a few % slower", True, VAE_TILES))
    if job.attention == "eager":
        c.append(Candidate("SDPA attention instead of eager", {"attention": "sdpa"}, "none (usually faster)", True))
    if job.dtype == "fp32":
        c.append(Candidate("fp16 weights", {"dtype": "fp16"}, "about 2× faster; negligible quality change", True))
    c += _offload_candidates(job.offload, "image")
    if max(job.width, job.height) > 512:
        c.append(Candidate(f"{job.width}×{job.height} → {job.width // 2}×{job.height // 2}",
                           {"width": job.width // 2, "height": job.height // 2}, "changes the task: smaller images",
                           False))
    return c


def _offload_candidates(current: str, unit: str) -> list[Candidate]:
    """Model, then sequential CPU offload (diffusers): both keep the task, each slower than the last."""
    c: list[Candidate] = []
    if current == "none":
        c.append(Candidate("model CPU offload (one component on the GPU at a time)", {"offload": "model"},
                           f"seconds per {unit}: components move over PCIe", True))
    if current != "sequential":
        c.append(Candidate("sequential CPU offload (one module on the GPU at a time)", {"offload": "sequential"},
                           f"much slower: every weight crosses PCIe on every step, per {unit}", True,
                           SEQUENTIAL_OFFLOAD))
    return c


def _video_candidates(job: VideoJob) -> list[Candidate]:
    """Task-keeping changes first (batch, tiling, attention, dtype, offload), then task-changing ones."""
    c: list[Candidate] = []
    if job.batch > 1:
        c.append(Candidate(f"batch {job.batch} → 1", {"batch": 1}, "lower clips/s (same clips)", True))
    if not job.vae_tiling:
        c.append(Candidate("VAE tiling", {"vae_tiling": True}, "VAE decode slower (256 px tiles overlap)", True,
                           VAE_TILES))
    if job.attention == "eager":
        c.append(Candidate("SDPA attention instead of eager", {"attention": "sdpa"}, "none (usually faster)", True))
    if job.dtype == "fp32":
        c.append(Candidate("bf16 weights", {"dtype": "bf16"}, "about 2× faster; negligible quality change", True))
    c += _offload_candidates(job.offload, "clip")
    fewer = (job.frames - 1) // 8 * 4 + 1  # about half, kept on the 4k + 1 grid of the causal VAE
    if fewer < job.frames:
        c.append(Candidate(f"{job.frames} → {fewer} frames", {"frames": fewer}, "changes the task: a shorter clip",
                           False))
    if max(job.width, job.height) > 256:
        w, h = max(16, job.width // 32 * 16), max(16, job.height // 32 * 16)  # half, multiples of 16
        c.append(Candidate(f"{job.width}×{job.height} → {w}×{h}", {"width": w, "height": h},
                           "changes the task: a smaller video", False))
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
            how = "ZeRO-3" if "gpus" in edits else "tensor parallel"
            return [Candidate(f"spread over {n} GPUs ({how})", edits, cost, True)]
    return []


def _heads(model: Model) -> int:
    """Heads a tensor-parallel size must divide; co-served models share the group, so all of theirs."""
    shapes = (model, *model.co_served) if isinstance(model, ColocatedShape) else (model,)
    return math.gcd(*(getattr(s, "num_attention_heads", 1) for s in shapes))


def largest_fitting(job: Job, model: Model, gpu: Gpu, field: str, upper: int, band: Band | None = None) -> int:
    """Largest value of an integer job field in [1, upper] that fits (memory is monotone in it); with
    `band`, that fits with the band's headroom left (the verdict *fits*, not *tight*)."""
    def fits(value: int) -> bool:
        changed = _with_field(job, field, value)
        return _ok(estimate_memory(changed, model, gpu), band, changed)

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
    if field == "frames" and isinstance(job, VideoJob):
        return job.model_copy(update={"frames": (value - 1) // 4 * 4 + 1})  # the causal VAE's 4k + 1 grid
    if field == "side_px" and isinstance(job, ImageJob):
        side = max(8, value // 8 * 8)  # the VAE needs multiples of 8
        return job.model_copy(update={"width": side, "height": side})
    return job.model_copy(update={field: value})


def limits(job: Job, model: Model, gpu: Gpu, band: Band | None = None) -> Limits:
    """Inverse queries: the largest micro-batch / sequence / concurrency / context / batch that fits;
    with `band`, also the largest that fits with the band's headroom left."""
    values = _snap(job, {name: largest_fitting(job, model, gpu, name, upper)
                         for name, upper in _limit_fields(job, model)})
    guarded = {} if band is None else _snap(job, {name: largest_fitting(job, model, gpu, name, upper, band)
                                                   for name, upper in _limit_fields(job, model)})
    return Limits(values=values, guarded=guarded)


def _snap(job: Job, values: dict[str, int]) -> dict[str, int]:
    """Image sides to multiples of 8, video frames to the causal VAE's 4k + 1 grid."""
    if "side_px" in values:
        values["side_px"] = values["side_px"] // 8 * 8
    if "frames" in values and isinstance(job, VideoJob) and values["frames"]:
        values["frames"] = (values["frames"] - 1) // 4 * 4 + 1
    return values


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
        case VideoJob():
            yield "batch", 1024
            yield "frames", getattr(model, "max_frames", 1025)


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
