"""Time of serving a language model: prefill (TTFT), decode steps (TPOT), whole request count.

Per GPU of a tensor-parallel group of t (docs/estimator.md §3):

    prefill   FLOPs = 2 · P_active · prompt + attention 4 · prompt · prompt/2 · (a·d) per layer + 2·h·V
              bytes = weights read (+ the prompt's KV written)
    decode    FLOPs = batch · (2 · P_active + 4 · context · (a·d) per layer + 2·h·V)
    step      bytes = weights read + batch × KV bytes of one sequence at the mean context
              time  = max(bytes / bandwidth, FLOPs / compute)     (llm-analysis, LLM-Viewer, llmfit)
    TP        2 all-reduces per layer of b·s·h·2 bytes × 2(t−1)/t, on the critical path

MoE: FLOPs use the routed (active) experts. Weight bytes count every non-expert weight plus the
experts the step's tokens touch: with B tokens each picking k of E experts uniformly, a layer
touches E · (1 − (1 − k/E)^B) experts — k at batch 1, all of them (the resident bytes) at large B
(llmfit#474: total params for a sparse MoE gave a 2.2× underestimate; the uniform-routing
expectation is gpuscout's derivation).

vLLM (continuous batching) keeps `concurrency` sequences in the decode batch; each sequence's
lifetime also contains the prefills of the sequences that replace the others, so

    TTFT = prefill, TPOT = decode step + (C − 1) × prefill / (output − 1), e2e = TTFT + (output − 1) × TPOT
    job  = requests × (prefill + (output − 1) × decode step / C)  (= requests × e2e / C)

`engine = "hf"` runs static batches of C: the batch's prompts are prefilled together, then decoded.
"""

from __future__ import annotations

import math

from gpuscout.estimator.efficiency import Efficiency, default_efficiency
from gpuscout.estimator.inference import kv_bytes_per_sequence, vllm_max_num_seqs, weight_terms
from gpuscout.estimator.speed.roofline import (
    PhaseTime,
    Rates,
    SpeedEstimate,
    banded,
    dominant,
    gib,
    link_bytes_per_s,
    phase,
    ring_all_reduce_bytes,
    tflop,
)
from gpuscout.hardware.catalog import Gpu, peak_flops_per_s
from gpuscout.results.schema import E2E_S, TPOT_S, TTFT_S
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import DTYPE_BYTES, ModelShape

ACT_BYTES = 2  # 16-bit activations in every served format (TP all-reduce payloads)
# gpu_poor's decode heuristic reads weights ×2 for plain transformers vs ×1 for vLLM
# (docs/estimator.md §3): HF generate without CUDA graphs or fused kernels.
HF_DECODE_SLOWDOWN = 2.0
# What a vLLM server adds to a request's first token beyond the GPU work: HTTP, tokenizing,
# scheduling, input preparation, sampling and streaming. Measured on vLLM 0.31 (V1), Llama-3.1-8B
# on an A100 80GB: first streamed chunk at 42–47 ms when the 2,065-token prompt was a prefix-cache
# hit (only the last partial block computed, ~9 ms of GPU work here) and 182 ms on a miss (public
# learning notes indexed by gpuscout's source search; docs/estimator.md §3.6). That leaves about
# 35 ms of host time. The older engine measured more: about 100 ms flat for Llama-3-8B prompts
# under 400 tokens on V100 (vllm#7635). It overlaps other requests' GPU work, so only TTFT pays it.
VLLM_REQUEST_OVERHEAD_S = 0.035
# enforce_eager: without CUDA graphs every decode step launches each layer's kernels from the
# host. Measured: a Qwen2.5-7B-shaped LLM (the Qwen2.5-Omni-7B thinker, 28 layers) on A800s decoded
# at ~22–23 ms per token eager against ~13 ms with graphs (vllm-project/vllm-omni#7960), about
# 0.35 ms per layer; the same thread reports 4.3× at 3B on an H200. gpuscout adds 0.4 ms per layer
# to each eager decode step (between the two, the side that does not under-state time).
VLLM_EAGER_S_PER_LAYER = 0.4e-3


def compute_dtype(weights: str, gpu: Gpu) -> str:
    """FP8 weights run FP8 GEMMs where the GPU has them; int8/int4 are weight-only (16-bit math).

    The 16-bit math of weight-only formats is bf16, or fp16 on GPUs without bf16 (V100, T4), where
    the quantized kernels run fp16 activations (vLLM refuses bf16 below compute capability 8.0).
    bf16 weights stay bf16: on those GPUs the speed model then says there is no rate, and why.
    """
    if weights == "fp8" and gpu.fp8_flops_per_s is not None:
        return "fp8"
    if weights in ("fp32", "fp16", "bf16"):
        return weights
    return "bf16" if gpu.bf16_flops_per_s is not None or gpu.fp16_flops_per_s is None else "fp16"


def estimate_inference_speed(
    job: InferenceJob, shape: ModelShape, gpu: Gpu, *, gpus: int | None, efficiency: Efficiency | None
) -> SpeedEstimate:
    tp = gpus or job.tensor_parallel
    job = job.model_copy(update={"tensor_parallel": tp})
    pre_eff = efficiency or default_efficiency(gpu, "prefill")
    dec_eff = efficiency or default_efficiency(gpu, "decode")
    if job.engine == "hf" and efficiency is None:
        dec_eff = dec_eff.model_copy(update={"bandwidth": dec_eff.bandwidth / HF_DECODE_SLOWDOWN})
    dtype = compute_dtype(job.weights, gpu)
    rates = serving_rates(job, gpu)
    concurrency = min(job.concurrency, job.requests)
    if job.engine == "vllm":  # the scheduler runs at most max_num_seqs sequences per step
        concurrency = min(concurrency, vllm_max_num_seqs(job, gpu))
    prefill_seqs = concurrency if job.engine == "hf" else 1
    prefill = prefill_phase(job, shape, prefill_seqs, rates, pre_eff)
    decode = decode_phase(job, shape, concurrency, rates, dec_eff)
    return _summarise(job, gpu, tp, concurrency, prefill, decode, (pre_eff, dec_eff), dtype)


def serving_rates(job: InferenceJob, gpu: Gpu) -> Rates:
    """The peaks a serving step of `job` (at its tensor_parallel) runs against on `gpu`."""
    return Rates(flops_per_s=peak_flops_per_s(gpu, compute_dtype(job.weights, gpu)),
                 memory_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                 link_bytes_per_s=link_bytes_per_s(gpu, job.tensor_parallel))


def weight_bytes_split(job: InferenceJob, shape: ModelShape) -> tuple[float, float]:
    """(non-expert, all-expert) weight bytes one GPU holds; all-expert is 0 for a dense model.

    The expert share of the measured (or estimated) total is the experts' share of the parameter
    bytes: expert linears at the weight format's width, the rest at most 16-bit."""
    total = sum(t.bytes for t in weight_terms(job, shape))
    expert_params = sum(g.count * g.params_each for g in shape.linears if g.expert)
    if not expert_params or not shape.num_experts:
        return total, 0.0
    lin_b = DTYPE_BYTES.get(job.weights, 2.0)
    estimate = expert_params * lin_b + (shape.params_total - expert_params) * min(lin_b, 2.0)
    expert = total * expert_params * lin_b / estimate
    return total - expert, expert


def weight_bytes_read(job: InferenceJob, shape: ModelShape, tokens: int) -> tuple[float, str]:
    """Weight bytes one GPU reads in a forward over `tokens` tokens, and how they were counted."""
    dense, expert = weight_bytes_split(job, shape)
    total = dense + expert
    if not expert:
        return total, f"all weights {gib(total)}"
    k, e = shape.experts_per_token, shape.num_experts
    touched = 1.0 - (1.0 - k / e) ** tokens
    return (total - expert + expert * touched,
            f"non-expert {gib(total - expert)} + experts {gib(expert)} × touched {touched:.3f} "
            f"(1 − (1 − {k}/{e})^{tokens})")


def linear_flops_per_token(shape: ModelShape) -> float:
    """2 · active linear parameters: the matmul FLOPs of one token (the lm_head is `lm_head_flops`)."""
    return 2.0 * sum(g.active_count * g.params_each for g in shape.linears)


def lm_head_flops(shape: ModelShape) -> float:
    """2 · h · V: the logits of one sampled position."""
    return 2.0 * shape.hidden_size * shape.vocab_size


def attention_flops(shape: ModelShape, queries: int, keys_of: float, causal: bool) -> float:
    """4 · queries · keys · (a·d) per layer; causal prefill sees keys/2 on average, windows cap keys."""
    width = shape.num_attention_heads * shape.head_dim
    total = 0.0
    for layout in shape.attention:
        keys = keys_of / 2 if causal else keys_of
        if layout.kind == "sliding" and layout.window:
            keys = min(keys, float(layout.window))
        total += layout.count * 4.0 * queries * keys * width
    return total


def tp_comm_bytes(job: InferenceJob, shape: ModelShape, tokens: int) -> float:
    """Bytes each GPU sends for `tokens` new tokens: 2 ring all-reduces of the hidden state per layer."""
    payload = tokens * shape.hidden_size * ACT_BYTES
    return shape.num_layers * 2 * ring_all_reduce_bytes(payload, job.tensor_parallel)


def computed_prompt_tokens(job: InferenceJob) -> int:
    """Prompt tokens prefill computes: the prefix-cache hits are read from cached KV blocks."""
    if job.engine != "vllm" or not job.enable_prefix_caching:
        return job.prompt_tokens
    return max(math.ceil(job.prompt_tokens * (1.0 - job.prefix_hit_rate)), 1)


def prefill_phase(job: InferenceJob, shape: ModelShape, seqs: int, rates: Rates, eff: Efficiency) -> PhaseTime:
    tp, prompt = job.tensor_parallel, computed_prompt_tokens(job)
    tokens = seqs * prompt
    # New queries attend to the whole prompt, cached prefix included: keys = the full prompt.
    attention = attention_flops(shape, prompt, job.prompt_tokens, causal=True)
    flops = (tokens * linear_flops_per_token(shape) + seqs * attention
             + seqs * lm_head_flops(shape)) / tp
    weights, how = weight_bytes_read(job, shape, tokens)
    kv = seqs * kv_bytes_per_sequence(shape, prompt, DTYPE_BYTES[job.kv_cache_dtype], tp, 1)
    return phase(
        "prefill", flops=flops, bytes_moved=weights + kv, comm_bytes=tp_comm_bytes(job, shape, tokens), rates=rates,
        efficiency=eff,
        formula=(f"{seqs} × {prompt} prompt tokens computed"
                 + (f" ({job.prompt_tokens} less prefix-cache hits {job.prefix_hit_rate:.0%})"
                    if prompt != job.prompt_tokens else "")
                 + f": (2·P_active·tokens + 4·s·(s/2)·(a·d)·layers + 2·h·V) / TP {tp} "
                 f"= {tflop(flops)}; bytes = {how} + KV written {gib(kv)}"
                 + (f"; TP: 2 all-reduces/layer × 2(t−1)/t × tokens·h·2 B, t = {tp}" if tp > 1 else "")),
    )


def decode_phase(job: InferenceJob, shape: ModelShape, batch: int, rates: Rates, eff: Efficiency) -> PhaseTime:
    tp = job.tensor_parallel
    context = job.prompt_tokens + job.output_tokens / 2  # mean context over the generated tokens
    flops = batch * (linear_flops_per_token(shape) + attention_flops(shape, 1, context, causal=False)
                     + lm_head_flops(shape)) / tp
    weights, how = weight_bytes_read(job, shape, batch)
    kv_one = kv_bytes_per_sequence(shape, math.ceil(context), DTYPE_BYTES[job.kv_cache_dtype], tp, 1)
    step = phase(
        "decode step", flops=flops, bytes_moved=weights + batch * kv_one, comm_bytes=tp_comm_bytes(job, shape, batch),
        rates=rates, efficiency=eff,
        formula=(f"batch {batch} at mean context {context:,.0f}: FLOPs = batch × (2·P_active + 4·ctx·(a·d)·layers "
                 f"+ 2·h·V) / TP {tp} = {tflop(flops)}; bytes = {how} + {batch} × KV {gib(kv_one)}"),
    )
    return with_eager_launches(job, shape, step)


def with_eager_launches(job: InferenceJob, shape: ModelShape, step: PhaseTime) -> PhaseTime:
    """Add the per-layer host launch time of a decode step run without CUDA graphs."""
    if job.engine != "vllm" or not job.enforce_eager:
        return step
    extra = shape.num_layers * VLLM_EAGER_S_PER_LAYER
    return step.model_copy(update={
        "seconds": step.seconds + extra,
        "formula": step.formula + f"; enforce_eager: + {shape.num_layers} layers × "
                                  f"{VLLM_EAGER_S_PER_LAYER * 1000:.1f} ms kernel launches (vllm-omni#7960)"})


def _summarise(
    job: InferenceJob, gpu: Gpu, tp: int, concurrency: int, prefill: PhaseTime, decode: PhaseTime,
    effs: tuple[Efficiency, Efficiency], dtype: str,
) -> SpeedEstimate:
    pre_eff, dec_eff = effs
    out = job.output_tokens
    if job.engine == "hf":
        batches = math.ceil(job.requests / concurrency)
        ttft, tpot = prefill.seconds, decode.seconds
        job_work = batches * (prefill.seconds + (out - 1) * decode.seconds)
        weights = [(prefill, float(batches)), (decode, float(batches * (out - 1)))]
    else:
        ttft = prefill.seconds + VLLM_REQUEST_OVERHEAD_S
        tpot = decode.seconds + (concurrency - 1) * prefill.seconds / (out - 1) if out > 1 else 0.0
        job_work = job.requests * (prefill.seconds + (out - 1) * decode.seconds / concurrency)
        weights = [(prefill, float(job.requests)), (decode, job.requests * (out - 1) / concurrency)]
    e2e = ttft + (out - 1) * tpot
    prefill_dominates = prefill.seconds * weights[0][1] >= decode.seconds * weights[1][1]
    eff = pre_eff if prefill_dominates else dec_eff
    job_s, low, high = banded(job_work, eff)
    notes = (
        f"compute dtype {dtype} (weights {job.weights}); decode batch = concurrency {concurrency}",
        f"TTFT excludes queueing, includes {VLLM_REQUEST_OVERHEAD_S * 1000:.0f} ms server overhead (§3.6); "
        "prefills of replacing sequences are charged to TPOT (continuous batching)"
        if job.engine == "vllm" else "hf: static batches; decode bandwidth halved (gpu_poor ×2 heuristic)",
        f"prefill ran at compute {pre_eff.compute:g} / bandwidth {pre_eff.bandwidth:g}; decode at compute "
        f"{dec_eff.compute:g} / bandwidth {dec_eff.bandwidth:g}; band and `efficiency` are the "
        f"{'prefill' if prefill_dominates else 'decode'} row's (it dominates job time)",
        "TP all-reduce message latency is not modelled (bandwidth term only)" if tp > 1 else "single GPU",
    )
    return SpeedEstimate(
        job_kind="inference", gpu_sku=gpu.sku, gpus=tp, job_s=job_s, job_low_s=low, job_high_s=high,
        bound=dominant(weights),
        metrics={
            TTFT_S: ttft, TPOT_S: tpot, E2E_S: e2e, "decode_step_s": decode.seconds,
            "output_tokens_per_s": job.requests * out / job_work, "requests_per_s": job.requests / job_work,
        },
        units={"requests": float(job.requests), "output_tokens": float(job.requests * out)},
        phases=(prefill, decode), efficiency=eff, notes=notes,
    )
