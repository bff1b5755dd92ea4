"""Peak memory per GPU of serving a language model: weights, KV cache, prefill working set, engine.

Two engines:
* vllm — paged KV cache inside a budget of gpu_memory_utilization × GPU memory
  (vllm/v1/worker/gpu_worker.py: available KV = total × utilization − weights − profiled peak
  activations − non-torch memory); the rest of the GPU is left unused ("engine reserve").
* hf — plain transformers `generate`: the whole batch is prefilled at once and the KV cache holds
  every sequence's full context.
"""

from __future__ import annotations

from gpuscout.estimator import overhead
from gpuscout.estimator.activations import moe_layer_count, shared_expert_width
from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.estimator.params import linear_params, nonlinear_params
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import DTYPE_BYTES, AttentionLayout, ModelShape

FP32 = 4


def estimate_inference_memory(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> MemoryBreakdown:
    """Per-GPU peak of serving `job` on `gpu` with tensor parallel `job.tensor_parallel`."""
    usable = usable_memory_bytes(gpu)
    terms = inference_terms(job, shape, usable)
    notes: tuple[str, ...] = ()
    if job.engine == "vllm":
        notes = (f"vLLM could hold {max_concurrency(job, shape, usable):,} sequences of "
                 f"{job.context_tokens:,} tokens at gpu_memory_utilization={job.gpu_memory_utilization}",)
    return MemoryBreakdown(
        job_kind="inference", gpu_sku=gpu.sku, gpus=job.tensor_parallel, usable_bytes=usable,
        terms=tuple(terms), peak_bytes=total_bytes(terms), notes=notes,
    )


def inference_terms(job: InferenceJob, shape: ModelShape, usable: int) -> list[MemoryTerm]:
    terms = [*weight_terms(job, shape), kv_cache_term(job, shape), *working_set_terms(job, shape)]
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
    """Linear layers quantized; embeddings, norms and LM head stay 16-bit (as vLLM/GPTQ/AWQ do)."""
    tp = job.tensor_parallel
    lin, rest = linear_params(shape), nonlinear_params(shape)
    b = DTYPE_BYTES[job.weights]
    terms = [term(f"weights ({job.weights} linears)", "weights", lin * b / tp, f"{lin:,} linear params × {b:g} B")]
    if job.weights == "int4":
        g = job.int4_group_size
        terms.append(term("quantization constants", "weights", lin * 2.5 / g / tp,
                          f"{lin:,} / group {g} × (2 B fp16 scale + 0.5 B 4-bit zero)"))
    elif job.weights == "int8":
        channels = sum(grp.count * grp.out_features for grp in shape.linears)
        terms.append(term("quantization constants", "weights", channels * 2 / tp,
                          f"{channels:,} output channels × 2 B per-channel scale"))
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


def working_set_terms(job: InferenceJob, shape: ModelShape) -> list[MemoryTerm]:
    """Prefill working set: residual stream + the larger of attention/MLP transients, + logits."""
    tokens = job.max_num_batched_tokens if job.engine == "vllm" else job.concurrency * job.prompt_tokens
    per_token = prefill_bytes_per_token(shape, job.tensor_parallel)
    seqs = overhead.VLLM_MAX_NUM_SEQS if job.engine == "vllm" else job.concurrency
    where = "max_num_batched_tokens" if job.engine == "vllm" else "concurrency × prompt"
    return [
        term("prefill activations", "activations", tokens * per_token,
             f"{tokens:,} tokens ({where}) × {per_token:,.0f} B/token (residual + largest layer transient)"),
        term("logits and sampler", "activations", seqs * shape.vocab_size * FP32 * 2,
             f"{seqs} seqs × V={shape.vocab_size:,} × 4 B × 2 (fp32 logits + probabilities)"),
    ]


def prefill_bytes_per_token(shape: ModelShape, tp: int) -> float:
    """Only one layer's buffers are live at a time in inference (llm-analysis: max over buffers):
    the residual stream plus the larger of the attention and MLP transients."""
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
    return (2 * ab + FP32) * shape.hidden_size + max(attention, mlp)


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
    else:
        terms.append(term("CUDA graphs", "overhead", overhead.CUDA_GRAPHS_BYTES, overhead.CUDA_GRAPHS_SOURCE))
    return terms


def reserve_term(utilization: float, usable: int) -> MemoryTerm:
    """The part of the GPU vLLM leaves unused by design: (1 − gpu_memory_utilization) × usable."""
    return term("engine reserve", "overhead", usable * (1 - utilization),
                f"(1 − gpu_memory_utilization {utilization}) × {usable:,} B left unused by vLLM")


def max_concurrency(job: InferenceJob, shape: ModelShape, usable: int) -> int:
    """Sequences of the job's full context that fit beside everything else (vLLM prints this)."""
    terms = inference_terms(job.model_copy(update={"concurrency": 1}), shape, usable)
    per_seq = next(t.bytes for t in terms if t.category == "kv_cache")
    spare = usable - total_bytes(terms) + per_seq
    return max(int(spare // per_seq), 0) if per_seq else 0
