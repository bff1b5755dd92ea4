"""Peak memory per GPU of serving a language model: weights, KV cache, prefill working set, engine.

Two engines:
* vllm — paged KV cache inside a budget of gpu_memory_utilization × GPU memory
  (vllm/v1/worker/gpu_worker.py: available KV = total × utilization − weights − profiled peak
  activations − non-torch memory − CUDA graphs); the rest of the GPU is left unused ("engine
  reserve"). The profiled peak is the larger of a forward pass over max_num_batched_tokens and
  the sampler over max_num_seqs rows (docs/estimator.md §2.8, checked against vLLM's start-up
  logs in tests/estimator/test_vllm_memory.py).
* hf — plain transformers `generate`: the whole batch is prefilled at once and the KV cache holds
  every sequence's full context.
"""

from __future__ import annotations

from gpuscout.estimator import overhead
from gpuscout.estimator.activations import moe_layer_count, shared_expert_width
from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.estimator.params import (
    nonlinear_params,
    quantized_linear_params,
    quantized_output_channels,
    require_known_skip_modules,
    unquantized_linear_params,
)
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import DTYPE_BYTES, AttentionLayout, ModelShape

FP32 = 4


def estimate_inference_memory(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> MemoryBreakdown:
    """Per-GPU peak of serving `job` on `gpu` with tensor parallel `job.tensor_parallel`."""
    usable = usable_memory_bytes(gpu)
    terms = inference_terms(job, shape, usable, gpu)
    notes: tuple[str, ...] = ()
    if job.engine == "vllm":
        notes = (f"vLLM could hold {max_concurrency(job, shape, usable, gpu):,} sequences of "
                 f"{job.context_tokens:,} tokens at gpu_memory_utilization={job.gpu_memory_utilization}",)
    return MemoryBreakdown(
        job_kind="inference", gpu_sku=gpu.sku, gpus=job.tensor_parallel, usable_bytes=usable,
        terms=tuple(terms), peak_bytes=total_bytes(terms), notes=notes,
    )


def inference_terms(job: InferenceJob, shape: ModelShape, usable: int, gpu: Gpu | None = None) -> list[MemoryTerm]:
    terms = [*weight_terms(job, shape), kv_cache_term(job, shape), *working_set_terms(job, shape, gpu)]
    return terms + engine_terms(job, usable, total_bytes(terms))


def weight_terms(job: InferenceJob, shape: ModelShape) -> list[MemoryTerm]:
    tp = job.tensor_parallel
    ckpt = shape.checkpoint
    if ckpt is not None and (ckpt.quantization or job.weights in ("bf16", "fp16")):
        return [term("weights (from checkpoint headers)", "weights", ckpt.total_bytes / tp,
                     f"{ckpt.total_bytes:,} B read from {ckpt.files} safetensors headers / TP {tp}")]
    if job.weights in ("fp32", "bf16", "fp16"):
        b = DTYPE_BYTES[job.weights]
        return [term("weights", "weights", shape.params_total * b / tp,
                     f"{shape.params_total:,} params × {b:g} B / TP {tp}")]
    return quantized_weight_terms(job, shape)


def quantized_weight_terms(job: InferenceJob, shape: ModelShape) -> list[MemoryTerm]:
    """Linear layers quantized; embeddings, norms and LM head stay 16-bit (as vLLM/GPTQ/AWQ do), and so do
    the linears named in `unquantized_modules` (modules_to_not_convert; docs/estimator.md §2.14)."""
    tp = job.tensor_parallel
    require_known_skip_modules(shape, job.unquantized_modules)
    lin, rest = quantized_linear_params(shape, job.unquantized_modules), nonlinear_params(shape)
    b = DTYPE_BYTES[job.weights]
    terms = [term(f"weights ({job.weights} linears)", "weights", lin * b / tp, f"{lin:,} linear params × {b:g} B")]
    if job.weights == "int4":
        g = job.int4_group_size
        terms.append(term("quantization constants", "weights", lin * 2.5 / g / tp,
                          f"{lin:,} / group {g} × (2 B fp16 scale + 0.5 B 4-bit zero)"))
    elif job.weights == "int8":
        channels = quantized_output_channels(shape, job.unquantized_modules)
        terms.append(term("quantization constants", "weights", channels * 2 / tp,
                          f"{channels:,} output channels × 2 B per-channel scale"))
    if job.unquantized_modules:
        kept = unquantized_linear_params(shape, job.unquantized_modules)
        terms.append(term("16-bit linears (unquantized_modules)", "weights", kept * 2 / tp,
                          f"{kept:,} params of {', '.join(job.unquantized_modules)} × 2 B"))
    terms.append(term("16-bit leftovers (embeddings, norms, lm_head)", "weights", rest * 2 / tp,
                      f"{rest:,} non-linear params × 2 B"))
    return terms


def kv_values_per_gpu(layout: AttentionLayout, shape: ModelShape, tp: int) -> float:
    """KV heads are split across tensor-parallel ranks (replicated when n_kv < tp); MLA's latent is not."""
    if layout.kind == "mla":
        return layout.kv_values_per_token
    heads_per_gpu = max(shape.num_kv_heads / tp, 1.0)
    return layout.kv_values_per_token * heads_per_gpu / shape.num_kv_heads


def kv_bytes_per_sequence(shape: ModelShape, context: int, kv_bytes: float, tp: int, block: int) -> float:
    """Σ over layer groups of values/token × cached tokens (window-capped) × dtype, block-rounded."""
    total = 0.0
    for layout in shape.attention:
        tokens = min(context, layout.window) if layout.kind == "sliding" and layout.window else context
        tokens = -(-tokens // block) * block
        total += layout.count * kv_values_per_gpu(layout, shape, tp) * tokens * kv_bytes
    return total


def kv_cache_term(job: InferenceJob, shape: ModelShape) -> MemoryTerm:
    block = overhead.VLLM_BLOCK_TOKENS if job.engine == "vllm" else 1
    kb = DTYPE_BYTES[job.kv_cache_dtype]
    per_seq = kv_bytes_per_sequence(shape, job.context_tokens, kb, job.tensor_parallel, block)
    kinds = ", ".join(f"{lay.count}×{lay.kind}" + (f"(window {lay.window})" if lay.window else "")
                      for lay in shape.attention)
    return term("KV cache", "kv_cache", per_seq * job.concurrency,
                f"{job.concurrency} seqs × {job.context_tokens:,} tokens × layers [{kinds}] × values × {kb:g} B")


def working_set_terms(job: InferenceJob, shape: ModelShape, gpu: Gpu | None = None) -> list[MemoryTerm]:
    """The working set each engine sizes its KV cache around (docs/estimator.md §2.8)."""
    if job.engine == "vllm":
        return [vllm_profile_term(job, shape, gpu)]
    tokens = job.concurrency * job.prompt_tokens
    per_token = prefill_bytes_per_token(shape, job.tensor_parallel)
    return [
        term("prefill activations", "activations", tokens * per_token,
             f"{tokens:,} tokens (concurrency × prompt) × {per_token:,.0f} B/token (residual + largest layer "
             "transient)"),
        term("logits and sampler", "activations", job.concurrency * shape.vocab_size * FP32 * 2,
             f"{job.concurrency} seqs × V={shape.vocab_size:,} × 4 B × 2 (fp32 logits + probabilities)"),
    ]


def vllm_max_num_seqs(job: InferenceJob, gpu: Gpu | None) -> int:
    """max_num_seqs as vLLM V1 resolves it: the job's, else the default for the GPU's memory size
    (the larger default when the GPU is unknown: more memory profiled, the safe side)."""
    if job.max_num_seqs is not None:
        return job.max_num_seqs
    large = gpu is None or (gpu.memory_bytes >= overhead.VLLM_LARGE_GPU_BYTES and "a100" not in gpu.sku)
    return overhead.VLLM_MAX_NUM_SEQS_LARGE_GPU if large else overhead.VLLM_MAX_NUM_SEQS_DEFAULT


def vllm_profile_term(job: InferenceJob, shape: ModelShape, gpu: Gpu | None) -> MemoryTerm:
    """vLLM's profiled activation peak: one dummy forward pass over max_num_batched_tokens, then the
    sampler over min(max_num_seqs, max_num_batched_tokens) rows; the two peaks do not overlap, so the
    larger counts, plus the floor the logs show beyond both."""
    tokens = job.max_num_batched_tokens
    forward = tokens * prefill_bytes_per_token(shape, job.tensor_parallel, fused_norm=True)
    seqs = min(vllm_max_num_seqs(job, gpu), tokens)
    sampler = seqs * shape.vocab_size * overhead.VLLM_SAMPLER_BYTES_PER_LOGIT
    peak = max(forward, sampler) + overhead.VLLM_PROFILE_FLOOR_BYTES
    return term("profiled activation peak", "activations", peak,
                f"max(forward {tokens:,} batched tokens {gib(forward)}, sampler {seqs:,} seqs × "
                f"V={shape.vocab_size:,} × {overhead.VLLM_SAMPLER_BYTES_PER_LOGIT} B {gib(sampler)}) "
                f"+ {gib(overhead.VLLM_PROFILE_FLOOR_BYTES)} floor")


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def prefill_bytes_per_token(shape: ModelShape, tp: int, *, fused_norm: bool = False) -> float:
    """Only one layer's buffers are live at a time in inference (llm-analysis: max over buffers):
    the residual stream plus the larger of the attention and MLP transients.

    `fused_norm`: vLLM runs RMSNorm as one fused CUDA kernel (`fused_add_rms_norm`), which makes no
    fp32 copy of the hidden state; transformers' RMSNorm does. Without the copy the forward-bound
    V0 profile logs of vllm#10517 (20,000 and 29,000 tokens) are met within +9% and +4%; with it
    gpuscout read +24% and +19% (docs/estimator.md §2.8)."""
    ab = 2
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_kv_heads * shape.head_dim
    attention = ab * (q + 2 * kv + q) / tp
    moe_layers = moe_layer_count(shape)
    width = max(shape.intermediate_size if moe_layers < shape.num_layers else 0,
                shape.experts_per_token * shape.moe_intermediate_size + shared_expert_width(shape, moe_layers))
    mlp = ab * 3 * width / tp  # gate/up output (2f) and activation output (f)
    # Residual and hidden stream (2 × 16-bit) and the fp32 copy HF RMSNorm makes; traces of
    # Llama prefill match this within 1% (tests/measure/test_oracle.py).
    norm_copy = 0 if fused_norm else FP32
    return (2 * ab + norm_copy) * shape.hidden_size + max(attention, mlp)


def engine_terms(job: InferenceJob, usable: int, allocated: int) -> list[MemoryTerm]:
    terms = process_terms(job, allocated)
    if job.engine == "vllm":
        terms.append(reserve_term(job.gpu_memory_utilization, usable))
    return terms


def process_terms(job: InferenceJob, allocated: int) -> list[MemoryTerm]:
    """What one engine process holds beyond its tensors: CUDA context, NCCL, allocator or graphs."""
    terms = [term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES, overhead.CUDA_CONTEXT_SOURCE)]
    if job.tensor_parallel > 1:
        terms.append(term("NCCL buffers", "overhead", overhead.NCCL_BYTES, overhead.NCCL_SOURCE))
    if job.engine == "hf":
        terms.append(term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION,
                          overhead.ALLOCATOR_SOURCE))
    elif job.enforce_eager:
        terms.append(term("CUDA graphs", "overhead", 0, "enforce_eager: vLLM captures no CUDA graphs"))
    else:
        terms.append(term("CUDA graphs", "overhead", overhead.CUDA_GRAPHS_BYTES, overhead.CUDA_GRAPHS_SOURCE))
    return terms


def reserve_term(utilization: float, usable: int) -> MemoryTerm:
    """The part of the GPU vLLM leaves unused by design: (1 − gpu_memory_utilization) × usable."""
    return term("engine reserve", "overhead", usable * (1 - utilization),
                f"(1 − gpu_memory_utilization {utilization}) × {usable:,} B left unused by vLLM")


def kv_budget_bytes(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> int:
    """What vLLM hands the KV cache: usable × utilization − (weights + profiled peak + non-torch).

    CUDA graphs are captured after the KV cache is sized and come out of the (1 − utilization)
    margin: every V1 log with the split balances without them (vLLM 0.31 on an A100: 72.91 − 15.26
    − 1.44 = 56.21 GiB; llm-d-benchmark's H100 rows the same way), docs/estimator.md §2.8."""
    terms = inference_terms(job.model_copy(update={"concurrency": 1}), shape, usable_memory_bytes(gpu), gpu)
    outside = ("engine reserve", "CUDA graphs")
    held = sum(t.bytes for t in terms if t.category != "kv_cache" and t.name not in outside)
    return int(usable_memory_bytes(gpu) * job.gpu_memory_utilization - held)


def kv_capacity_tokens(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> int:
    """Tokens the KV budget holds, in whole vLLM blocks ("GPU KV cache size: N tokens")."""
    per_token = kv_bytes_per_sequence(shape, overhead.VLLM_BLOCK_TOKENS, DTYPE_BYTES[job.kv_cache_dtype],
                                      job.tensor_parallel, overhead.VLLM_BLOCK_TOKENS)
    blocks = max(kv_budget_bytes(job, shape, gpu), 0) // per_token
    return int(blocks * overhead.VLLM_BLOCK_TOKENS)


def max_concurrency(job: InferenceJob, shape: ModelShape, usable: int, gpu: Gpu | None = None) -> int:
    """Sequences of the job's full context that fit beside everything else (vLLM prints this)."""
    terms = inference_terms(job.model_copy(update={"concurrency": 1}), shape, usable, gpu)
    per_seq = next(t.bytes for t in terms if t.category == "kv_cache")
    spare = usable - total_bytes(terms) + per_seq
    return max(int(spare // per_seq), 0) if per_seq else 0
