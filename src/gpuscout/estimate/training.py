"""Peak memory per GPU of a fine-tuning step: full, LoRA or QLoRA, any recipe, optimizer, sharding.

Peak = model states (weights, 16-bit weight copies, gradients, optimizer states, buffers)
     + max(backward-phase activations and logits, optimizer-step temporaries)
     + overheads (CUDA context, NCCL, allocator reserve).

Gradients are counted as fully present during backward. That is exact with gradient
accumulation ≥ 2 (gradients persist across micro-batches) and an upper bound by at most the
gradient bytes otherwise (they fill in as activations are freed).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout.estimate import activations as act
from gpuscout.estimate import overhead
from gpuscout.estimate.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.estimate.params import (
    factored_state_elements,
    largest_linear_params,
    layer_params,
    linear_params,
    lora_params,
    lora_targets,
    nonlinear_params,
)
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.shape import LinearGroup, ModelShape

# Bytes of a parameter (and of its gradient) under each precision recipe. Mixed recipes keep
# fp32 parameters and let autocast run matmuls in 16-bit (PyTorch AMP; ZeRO paper §3.1 counts the
# same 16 B/param of model state for mixed-precision Adam: 2 + 2 + 12, arranged differently).
PARAM_BYTES = {"fp32": 4, "bf16_mixed": 4, "fp16_mixed": 4, "bf16": 2}
# 16-bit activations unless the whole recipe is fp32.
ACT_BYTES = {"fp32": 4, "bf16_mixed": 2, "fp16_mixed": 2, "bf16": 2}
# bitsandbytes NF4 with double quantization: 4 bits + 8-bit absmax per 64 + fp32 per 256 absmaxes
# = 4.127 bits (QLoRA, arXiv 2305.14314 §3; reference/estimators.md §2.3).
NF4_BYTES = 0.5
NF4_CONSTANT_BYTES = (8 / 64 + 32 / (64 * 256)) / 8
# 8-bit Adam: two 1-byte states plus one fp32 absmax per 2048-value block each
# (Dettmers et al. 2021, arXiv 2110.02861 §2: block-wise quantization, B = 2048).
ADAM8_BYTES = 2 * (1 + 4 / 2048)
# Chunked / fused cross-entropy keeps logits for one chunk of tokens at a time.
CE_CHUNK_TOKENS = 1024


@dataclass(frozen=True)
class Layout:
    """How the job is spread: data-parallel ranks, tensor-parallel ranks, sharding of states."""

    gpus: int
    tp: int
    sharding: str

    @property
    def dp(self) -> int:
        return self.gpus // self.tp


def estimate_finetune_memory(
    job: FinetuneJob, shape: ModelShape, gpu: Gpu, *, gpus: int | None = None
) -> MemoryBreakdown:
    """Per-GPU peak of one training step of `job` on `gpu` (spread over `gpus`, default job.gpus)."""
    layout = Layout(gpus=gpus or job.gpus, tp=job.tensor_parallel, sharding=job.sharding)
    states = model_state_terms(job, shape, layout)
    backward = activation_terms(job, shape, layout)
    step = step_temporary_terms(job, shape, layout)
    allocated = total_bytes(states) + max(total_bytes(backward), total_bytes(step))
    fixed = overhead_terms(layout, allocated)
    peak = allocated + total_bytes(fixed)
    phase = "backward" if total_bytes(backward) >= total_bytes(step) else "optimizer step"
    return MemoryBreakdown(
        job_kind="finetune",
        gpu_sku=gpu.sku,
        gpus=layout.gpus,
        usable_bytes=usable_memory_bytes(gpu),
        terms=(*states, *backward, *step, *fixed),
        peak_bytes=peak,
        notes=(
            f"peak = model states + max(backward activations, optimizer-step temporaries) + overheads;"
            f" the {phase} phase is larger here",
        ),
    )


def trainable_params(job: FinetuneJob, shape: ModelShape) -> int:
    return shape.params_total if job.method == "full" else lora_params(shape, job.lora)


def model_state_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    terms = weight_terms(job, shape, layout) + gradient_and_optimizer_terms(job, shape, layout)
    if layout.sharding in ("zero3", "fsdp") and layout.dp > 1:
        gathered = 2 * layer_params(shape) * 2 / layout.tp
        terms.append(term("all-gather buffers", "temporaries", gathered,
                          "2 layers × layer params × 2 B (current + prefetched unit, 16-bit)"))
    if layout.sharding == "none" and layout.dp > 1:
        grads = next(t.bytes for t in terms if t.category == "gradients")
        terms.append(term("DDP gradient buckets", "gradients", grads,
                          "= gradient bytes (DDP copies grads into buckets unless gradient_as_bucket_view)"))
    return terms


def _shard(layout: Layout, what: str) -> int:
    """Divisor for a model-state term under ZeRO stage / FSDP (ZeRO paper §5, Table 1)."""
    stage = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}[layout.sharding]
    needed = {"optimizer": 1, "gradients": 2, "weights": 3}[what]
    return layout.dp if stage >= needed else 1


def weight_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    div = layout.tp * _shard(layout, "weights")
    p = shape.params_total
    if job.method == "full":
        b = PARAM_BYTES[job.precision]
        terms = [term("weights", "weights", p * b / div, f"{p:,} params × {b} B / {div}")]
        if ACT_BYTES[job.precision] < b:
            copies = linear_params(shape) + shape.vocab_size * shape.hidden_size
            terms.append(term("16-bit weight copies", "weights", copies * 2 / div,
                              f"{copies:,} matmul params × 2 B (autocast casts, kept for backward)"))
        return terms
    base = _base_weight_terms(job, shape, div)
    adapters = lora_params(shape, job.lora)
    ab = _adapter_bytes(job)
    base.append(term("LoRA adapters", "weights", adapters * ab / layout.tp,
                     f"{adapters:,} adapter params (rank {job.lora.rank} × (d_in + d_out)) × {ab} B"))
    return base


def _base_weight_terms(job: FinetuneJob, shape: ModelShape, div: int) -> list[MemoryTerm]:
    """Frozen base weights: 16-bit (fp32 for an fp32 recipe), or NF4 linears for QLoRA."""
    if job.method == "lora":
        b = 4 if job.precision == "fp32" else 2
        p = shape.params_total
        return [term("frozen base weights", "weights", p * b / div, f"{p:,} params × {b} B / {div}")]
    lin, rest = linear_params(shape), nonlinear_params(shape)
    return [
        term("frozen base weights (NF4 linears)", "weights", lin * NF4_BYTES / div,
             f"{lin:,} linear params × 0.5 B (bitsandbytes NF4)"),
        term("quantization constants", "weights", lin * NF4_CONSTANT_BYTES / div,
             f"{lin:,} × 0.127 bits/8 (double-quantized absmax, QLoRA §3)"),
        term("16-bit leftovers (embeddings, norms, lm_head)", "weights", rest * 2 / div,
             f"{rest:,} non-linear params × 2 B (bnb keeps them 16-bit)"),
    ]


def _adapter_bytes(job: FinetuneJob) -> int:
    """peft upcasts adapters to fp32 under mixed recipes (autocast_adapter_dtype=True)."""
    return 2 if job.precision == "bf16" else 4


def gradient_and_optimizer_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    n = trainable_params(job, shape)
    gb = PARAM_BYTES[job.precision] if job.method == "full" else _adapter_bytes(job)
    g_div = layout.tp * _shard(layout, "gradients")
    terms = [term("gradients", "gradients", n * gb / g_div, f"{n:,} trainable params × {gb} B / {g_div}")]
    if job.optimizer_offload:
        terms.append(term("optimizer states", "optimizer_states", 0, "offloaded to CPU memory"))
        return terms
    o_div = layout.tp * _shard(layout, "optimizer")
    state_bytes, formula = optimizer_state_bytes(job, shape, n)
    terms.append(term("optimizer states", "optimizer_states", state_bytes / o_div, f"{formula} / {o_div}"))
    return terms


def optimizer_state_bytes(job: FinetuneJob, shape: ModelShape, n: int) -> tuple[float, str]:
    """State bytes for `n` trainable params: Adam m, v; SGD momentum; Adafactor factored rows/cols."""
    sb = 2 if job.precision == "bf16" else 4
    match job.optimizer:
        case "adamw":
            return n * 2 * sb, f"{n:,} × 2 states × {sb} B (AdamW m, v)"
        case "adamw_8bit":
            return n * ADAM8_BYTES, f"{n:,} × 2.002 B (8-bit AdamW, block-wise absmax)"
        case "sgd":
            return n * sb, f"{n:,} × {sb} B (SGD momentum)"
        case "adafactor":
            groups = shape.linears if job.method == "full" else lora_targets(shape, job.lora)
            factored = factored_state_elements(groups) if job.method == "full" else _lora_factored(job, groups)
            rest = nonlinear_params(shape) if job.method == "full" else 0
            return (factored + rest) * 4, f"({factored:,} row+col stats + {rest:,} vector params) × 4 B"
    raise AssertionError(job.optimizer)


def _lora_factored(job: FinetuneJob, groups: tuple[LinearGroup, ...]) -> int:
    """Adafactor on adapters: A (r × d_in) and B (d_out × r) each keep rows + cols statistics."""
    r = job.lora.rank
    return sum(g.count * (r + g.in_features + g.out_features + r) for g in groups)


def activation_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """Activations kept for backward, and the logits/loss buffers, for one micro-batch."""
    ab = ACT_BYTES[job.precision]
    tokens = job.micro_batch * job.seq_len
    eager = job.attention == "eager"
    per_layer = act.layer_activation_bytes_per_token(shape, ab, job.seq_len, eager, layout.tp) * tokens
    core = "eager s² scores" if eager else "flash/SDPA"
    formula = f"Korthikanti-style per-tensor sum (GQA, gated MLP, {core})"
    if job.gradient_checkpointing:
        inputs = shape.num_layers * ab * shape.hidden_size * tokens
        terms = [
            term("checkpointed layer inputs", "activations", inputs,
                 f"L·b·s·h·{ab} B = {shape.num_layers}×{tokens:,}×{shape.hidden_size}×{ab}"),
            term("one layer recomputed", "activations", per_layer, f"1 layer: {formula}"),
        ]
    else:
        terms = [term("layer activations", "activations", per_layer * shape.num_layers,
                      f"{shape.num_layers} layers × {tokens:,} tokens × {per_layer / tokens:,.0f} B: {formula}")]
    final_norm = act.norm_bytes(shape, ab) * tokens
    terms.append(term("final norm", "activations", final_norm, "b·s·h·(act + fp32 upcast) B"))
    terms.append(logits_term(job, shape, layout, ab, tokens))
    if job.method == "qlora":
        big = largest_linear_params(shape) * 2
        terms.append(term("NF4 dequantization buffer", "temporaries", big, "largest linear × 2 B"))
    return terms


def logits_term(job: FinetuneJob, shape: ModelShape, layout: Layout, ab: int, tokens: int) -> MemoryTerm:
    per_token = act.logits_bytes_per_token(shape, ab, layout.tp)
    if job.chunked_cross_entropy:
        kept = min(tokens, CE_CHUNK_TOKENS)
        return term("logits and loss (chunked)", "activations", per_token * kept,
                    f"{kept} tokens per chunk × V={shape.vocab_size:,} × ({ab}+4+4) B")
    return term("logits and loss", "activations", per_token * tokens,
                f"b·s·V·({ab} logits + 4 fp32 upcast + 4 log-softmax) B, V={shape.vocab_size:,}")


def step_temporary_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """torch.optim's foreach kernels allocate intermediates the size of the parameters they update."""
    if job.optimizer_offload:
        return []
    n = trainable_params(job, shape) / (layout.tp * _shard(layout, "optimizer"))
    sb = 2 if job.precision == "bf16" else 4
    return [term("optimizer step temporaries", "temporaries", n * sb,
                 "trainable params × state bytes (foreach AdamW/SGD intermediates, one list at a time)")]


def overhead_terms(layout: Layout, allocated: int) -> list[MemoryTerm]:
    terms = [term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES,
                  overhead.CUDA_CONTEXT_SOURCE)]
    if layout.gpus > 1:
        terms.append(term("NCCL buffers", "overhead", overhead.NCCL_BYTES, overhead.NCCL_SOURCE))
    terms.append(term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION,
                      overhead.ALLOCATOR_SOURCE))
    return terms
