"""The simulator's step costs and engine limits from gpuscout's speed and memory models.

The speed model (estimator/speed/serve.py) times a prefill and a decode step as rooflines; the
simulator needs the same arithmetic as coefficients of whatever batch a step holds. Each
`StepCosts` field is one of the speed model's terms divided by the rate it runs at:

    weights_s            non-expert weight bytes / (HBM bandwidth × decode bandwidth efficiency)
    expert_weights_s     all expert weight bytes / (same); experts_touched_per_token = k / E
    kv_read_s_per_token  KV bytes of one cached token on one GPU / (same)
    compute_s_per_token  (2 · P_active + 2 · h · V) / TP / (dtype peak × prefill compute efficiency)
    attention_s_per_pair 4 · (a·d) · layers / TP / (same)
    comm_s_per_token     2 ring all-reduces of h · 2 B per layer / (link × link efficiency)
    overhead_s           enforce_eager: layers × VLLM_EAGER_S_PER_LAYER (no CUDA graphs), else 0
    request_overhead_s   VLLM_REQUEST_OVERHEAD_S (HTTP, tokenising, streaming: the first token only)

Which efficiency row: the memory side is decode's (decode steps are memory bound, and the decode
row's bandwidth, 0.6, is the measured one), the compute side and the link prefill's (prefill chunks
are compute bound). An explicit `efficiency` replaces both. `slow_end` multiplies each side by its
row's band_high (compute and the request overhead by prefill's, memory and the per-step overhead by
decode's, communication by the larger): the costs a verdict is judged at, so that an uncertain
verdict errs toward more GPUs.

A memory-bound prefill (an MoE's, which reads every expert) is therefore timed at the decode row's
bandwidth, 0.6 against the prefill row's 0.9: 1.5× the speed model's prefill, the slower side.
Left as the speed model leaves it, or simpler: the lm_head is charged to every new token (vLLM
computes logits only for a prompt's last position, so a prefill is slightly over-timed: 2·h·V per
prompt token against 2·P_active, 1.5% for Llama-3-70B); sliding-window layers are counted as full
attention in both the pairs and the KV read (over-times long contexts of windowed models).
"""

from __future__ import annotations

from gpuscout.errors import SpecError
from gpuscout.estimator import overhead
from gpuscout.estimator.calibration import active_serving_factors
from gpuscout.estimator.efficiency import Efficiency, calibrated, default_efficiency
from gpuscout.estimator.inference import kv_bytes_per_sequence, kv_capacity_tokens, vllm_max_num_seqs
from gpuscout.estimator.serving.model import EngineLimits, SimConfig, StepCosts
from gpuscout.estimator.speed.serve import (
    VLLM_EAGER_S_PER_LAYER,
    VLLM_REQUEST_OVERHEAD_S,
    attention_flops,
    linear_flops_per_token,
    lm_head_flops,
    serving_rates,
    tp_comm_bytes,
    weight_bytes_split,
)
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import DTYPE_BYTES, ModelShape


def simulable(job: InferenceJob) -> str | None:
    """Why the simulator cannot model this job's server, or None when it can.

    It models one vLLM process's scheduler: plain transformers `generate` runs static batches, and
    co-served models are several engines sharing the GPUs."""
    if job.engine != "vllm":
        return f"engine {job.engine!r} runs static batches, the simulator models vLLM's continuous batching"
    if job.co_served:
        return "co-served models run one engine each on shared GPUs; the simulator models one engine"
    return None


def step_costs(job: InferenceJob, shape: ModelShape, gpu: Gpu, *, efficiency: Efficiency | None = None,
               slow_end: bool = False) -> StepCosts:
    """One replica's step costs for `job` at its tensor_parallel on `gpu` (see the module text).

    Inside `efficiency.calibrated(calibration)` where the calibration holds step-cost factors for this GPU
    (fitted to `gpuscout load` results by `gpuscout calibrate`), the costs at the default factors times
    those: the factors were fitted over the defaults, so the bench-calibrated prefill and decode factors
    are not applied on top of them. An explicit `efficiency` is used as given.
    """
    factors = active_serving_factors(gpu.sku) if efficiency is None else None
    if factors is not None:
        with calibrated(None):
            return factors.apply(_step_costs(job, shape, gpu, efficiency=None, slow_end=slow_end))
    return _step_costs(job, shape, gpu, efficiency=efficiency, slow_end=slow_end)


def _step_costs(job: InferenceJob, shape: ModelShape, gpu: Gpu, *, efficiency: Efficiency | None,
                slow_end: bool) -> StepCosts:
    tp = job.tensor_parallel
    rates = serving_rates(job, gpu)
    pre = efficiency or default_efficiency(gpu, "prefill")
    dec = efficiency or default_efficiency(gpu, "decode")
    compute_x, memory_x = (pre.band_high, dec.band_high) if slow_end else (1.0, 1.0)
    comm_x = max(compute_x, memory_x)
    flops_per_s = rates.flops_per_s * pre.compute
    bytes_per_s = rates.memory_bytes_per_s * dec.bandwidth
    dense, expert = weight_bytes_split(job, shape)
    kv_token = kv_bytes_per_sequence(shape, 1, DTYPE_BYTES[job.kv_cache_dtype], tp, 1)
    pair = attention_flops(shape, 1, 1.0, causal=False)
    eager = shape.num_layers * VLLM_EAGER_S_PER_LAYER if job.enforce_eager else 0.0
    comm = tp_comm_bytes(job, shape, 1) / (rates.link_bytes_per_s * pre.link) if tp > 1 else 0.0
    touched = shape.experts_per_token / shape.num_experts if expert and shape.num_experts else 0.0
    band = f"; slow end: compute ×{compute_x:g}, memory ×{memory_x:g}" if slow_end else ""
    return StepCosts(
        overhead_s=eager * memory_x,
        weights_s=dense / bytes_per_s * memory_x,
        expert_weights_s=(expert / bytes_per_s * memory_x) if touched else 0.0,
        experts_touched_per_token=touched,
        kv_read_s_per_token=kv_token / bytes_per_s * memory_x,
        compute_s_per_token=(linear_flops_per_token(shape) + lm_head_flops(shape)) / tp / flops_per_s * compute_x,
        attention_s_per_pair=pair / tp / flops_per_s * compute_x,
        comm_s_per_token=comm * comm_x,
        request_overhead_s=VLLM_REQUEST_OVERHEAD_S * compute_x,
        source=(f"estimate: {gpu.sku} × {tp} (speed model: compute {pre.compute:g}, bandwidth {dec.bandwidth:g}, "
                f"link {pre.link:g}{band})")[:500],
    )


def engine_limits(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> EngineLimits:
    """vLLM's scheduler limits and the KV blocks the memory estimate leaves for the job on `gpu`."""
    tokens = kv_capacity_tokens(job, shape, gpu)
    blocks = tokens // overhead.VLLM_BLOCK_TOKENS
    if blocks < 1:
        raise SpecError(f"{job.tensor_parallel} × {gpu.name} leaves no room for the KV cache.",
                        "vLLM sizes its KV cache from what is left of gpu_memory_utilization × memory after "
                        "weights and the profiled activation peak; here nothing is left.",
                        "Use more GPUs per replica (tensor_parallel), a larger GPU, or smaller weights.")
    return EngineLimits(
        max_num_seqs=vllm_max_num_seqs(job, gpu), max_num_batched_tokens=job.max_num_batched_tokens,
        kv_blocks=blocks, block_tokens=overhead.VLLM_BLOCK_TOKENS,
        prefix_hit_rate=job.prefix_hit_rate if job.enable_prefix_caching else 0.0)


def sim_config(job: InferenceJob, shape: ModelShape, gpu: Gpu, *, efficiency: Efficiency | None = None,
               slow_end: bool = False) -> SimConfig:
    """One replica of `job` (at its tensor_parallel) on `gpu`, ready to simulate."""
    why = simulable(job)
    if why is not None:
        raise SpecError("This serving job cannot be simulated.", why[:1].upper() + why[1:] + ".",
                        'Serve one model with engine = "vllm" to have its load simulated.')
    return SimConfig(costs=step_costs(job, shape, gpu, efficiency=efficiency, slow_end=slow_end),
                     limits=engine_limits(job, shape, gpu), tensor_parallel=job.tensor_parallel)
