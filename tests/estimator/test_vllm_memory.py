"""gpuscout's vLLM terms against figures vLLM itself logged at start-up (docs/estimator.md §2.8).

Each row is one public start-up log: the model (a bundled preset), the GPU total vLLM printed, the
settings, and every figure it logged. Tolerances are stated per check; the KV capacity check is
one-sided: gpuscout may under-estimate the KV budget (the user rents a bit more than needed) but
must never over-estimate it by more than KV_OVER (a "fits" that OOMs or queues in production).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuscout.estimator import overhead
from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.inference import (
    estimate_inference_memory,
    kv_budget_bytes,
    kv_capacity_tokens,
    vllm_max_num_seqs,
    vllm_profile_term,
)
from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.units import GIB
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import load_llm_preset

ACT_UNDER = 0.15  # profiled activation peak: at most 15% below the log …
ACT_OVER = 0.30  # … and at most 30% above it (over is the safe side)
KV_OVER = 0.02  # KV budget: never more than 2% above the log
KV_UNDER = 0.40  # and not uselessly low: within 40% below it
WEIGHTS_TOL = 0.01


@dataclass(frozen=True)
class Logged:
    source: str
    model: str
    gpu: str
    total_gib: float  # "total_gpu_memory" as vLLM printed it
    utilization: float
    tp: int
    batched_tokens: int  # max_num_batched_tokens in force (V0 without chunked prefill: max_model_len)
    max_num_seqs: int
    weights_gib: float
    activation_gib: float
    kv_gib: float | None  # memory vLLM handed the KV cache
    kv_tokens: int | None  # "GPU KV cache size" (or blocks × 16)
    graphs_in_budget: bool  # whether the logged KV figure had CUDA graphs taken out first
    graphs_gib: float | None = None  # "CUDAGraph memory" / "Graph capturing … took"
    weights: str = "bf16"  # the job's weight format


ROWS = (
    # vLLM PR #10511 (Dec 2024, V0 worker): `vllm serve meta-llama/Meta-Llama-3-8B`, H100 80GB.
    # Logged: weights 14.96, non_torch 1.79, activation peak 1.26, available KV 53.29 GiB.
    # This row calibrated VLLM_PROFILE_FLOOR_BYTES, so its activation check is not independent.
    Logged("vllm#10511 TP1", "llama-3-8b", "h100", 79.22, 0.90, 1, 8192, 256, 14.96, 1.26, 53.29, None, False),
    # Same PR, `-tp 2`: weights 7.48, non_torch 3.58, activation peak 1.26 GiB (KV line cut off).
    Logged("vllm#10511 TP2", "llama-3-8b", "h100", 79.22, 0.90, 2, 8192, 256, 7.48, 1.26, None, None, False),
    # vllm#10517 (Dec 2024, V0): Llama-3.1-8B-Instruct on an RTX 3090 (23.58 GiB), max_model_len 20000:
    # peak_torch 17.06 GiB less weights 14.99 = activation 2.07; kv_cache_size 3.81 GiB; 1,952 blocks.
    Logged("vllm#10517 20k", "llama-3.1-8b", "rtx-3090", 23.58, 0.90, 1, 20000, 256, 14.99, 2.07, 3.81, 1952 * 16,
           False),
    # Same issue, max_model_len 29000: peak_torch 17.98 → activation 2.99; kv 2.89 GiB; 1,478 blocks
    # ("maximum number of tokens that can be stored in KV cache (23648)").
    Logged("vllm#10517 29k", "llama-3.1-8b", "rtx-3090", 23.58, 0.90, 1, 29000, 256, 14.99, 2.99, 2.89, 1478 * 16,
           False),
    # V1 engine, vLLM 0.31.0 (`vllm serve meta-llama/Llama-3.1-8B-Instruct`, all defaults) on an
    # A100 80GB, from public learning notes: "Free memory on device (78.84/79.25 GiB) … Desired GPU
    # memory utilization is (0.92, 72.91 GiB). Actual usage is 15.26 GiB for consumed memory
    # (weights + non-torch), 1.44 GiB for peak activation, and 0.23 GiB for CUDAGraph memory";
    # "Model loading took 15.0 GiB"; "Available KV cache memory: 56.21 GiB"; "GPU KV cache size:
    # 460,496 tokens". 72.91 − 15.26 − 1.44 = 56.21: the graphs were not taken out of that budget.
    # max_num_batched_tokens is not logged: gpuscout's default 8,192; max_num_seqs 256 (A100).
    Logged("vLLM 0.31 A100", "llama-3.1-8b", "a100", 79.25, 0.92, 1, 8192, 256, 15.0, 1.44, 56.21, 460_496,
           False, 0.23),
    # V1 engine (`vllm serve`, vllm/vllm-openai:latest, --block-size 128 --enable-prefix-caching,
    # max-model-len 16000) on an H100 (79.18 GiB), from llm-d/llm-d-benchmark
    # config_explorer/empirical-vllm-memory-results.md. Each row: "Model loading took", "Peak
    # activation memory", "Available KV cache memory"; e.g. Llama-3.1-8B 71.26 − 14.99 − 4.76 −
    # 0.13 (non-torch) = 51.38: graphs outside the budget. Defaults on an H100: 1,024 seqs, 8,192
    # batched tokens. The logged CUDA-graph figures are negative or small and are not checked.
    Logged("llm-d Llama-3.1-8B", "llama-3.1-8b", "h100", 79.18, 0.90, 1, 8192, 1024, 14.99, 4.76, 51.38, None,
           False),
    Logged("llm-d Qwen3-0.6B", "qwen3-0.6b", "h100", 79.18, 0.90, 1, 8192, 1024, 1.12, 5.56, 64.45, None,
           False, 0.10),
    Logged("llm-d Qwen3-32B TP1", "qwen3-32b", "h100", 79.18, 0.90, 1, 8192, 1024, 61.03, 5.64, 4.45, None,
           False),
    Logged("llm-d Qwen3-32B TP2", "qwen3-32b", "h100", 79.18, 0.90, 2, 8192, 1024, 30.59, 5.64, 34.49, None,
           False),
    Logged("llm-d Llama-3.3-70B FP8 TP2", "llama-3.1-70b", "h100", 79.18, 0.90, 2, 8192, 1024, 33.88, 4.84, 32.0,
           None, False, weights="fp8"),
)


def _gpu(row: Logged) -> Gpu:
    """The catalog GPU with the total vLLM saw, so the comparison is of the terms, not the catalog."""
    return find_gpu(row.gpu).model_copy(update={"memory_visible_bytes": int(row.total_gib * GIB)})


def _job(row: Logged, **kw: object) -> InferenceJob:
    return InferenceJob.model_validate({
        "kind": "inference", "model": row.model, "tensor_parallel": row.tp,
        "gpu_memory_utilization": row.utilization, "max_num_batched_tokens": row.batched_tokens,
        "max_num_seqs": row.max_num_seqs, "prompt_tokens": 1, "output_tokens": 1, "weights": row.weights} | kw)


def _budget_as_logged(row: Logged) -> float:
    """gpuscout's KV budget as that vLLM computed it: before 0.21 graphs sat outside the budget."""
    budget = kv_budget_bytes(_job(row), load_llm_preset(row.model), _gpu(row))
    # gpuscout sizes the budget as current vLLM does, graphs outside it; a log whose vLLM took the
    # graphs out first would be compared with the budget less the graph term.
    return budget - (overhead.CUDA_GRAPHS_BYTES if row.graphs_in_budget else 0)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.source)
def test_weights_match_the_log(row: Logged) -> None:
    b = estimate_inference_memory(_job(row), load_llm_preset(row.model), _gpu(row))
    assert bytes_by_category(b)["weights"] / GIB == pytest.approx(row.weights_gib, rel=WEIGHTS_TOL)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.source)
def test_profiled_activation_peak_within_tolerance(row: Logged) -> None:
    got = vllm_profile_term(_job(row), load_llm_preset(row.model), _gpu(row)).bytes / GIB
    assert row.activation_gib * (1 - ACT_UNDER) <= got <= row.activation_gib * (1 + ACT_OVER), got


@pytest.mark.parametrize("row", [r for r in ROWS if r.kv_gib is not None], ids=lambda r: r.source)
def test_kv_budget_never_over_the_log(row: Logged) -> None:
    assert row.kv_gib is not None
    got = _budget_as_logged(row) / GIB
    assert row.kv_gib * (1 - KV_UNDER) <= got <= row.kv_gib * (1 + KV_OVER), got


@pytest.mark.parametrize("row", [r for r in ROWS if r.kv_tokens is not None], ids=lambda r: r.source)
def test_kv_tokens_never_over_the_log(row: Logged) -> None:
    assert row.kv_tokens is not None
    shape, gpu = load_llm_preset(row.model), _gpu(row)
    tokens = kv_capacity_tokens(_job(row), shape, gpu)
    if row.graphs_in_budget:  # that vLLM took the graphs out of the budget first
        tokens_per_byte = row.kv_tokens / (row.kv_gib * GIB) if row.kv_gib else 0.0
        tokens -= int(overhead.CUDA_GRAPHS_BYTES * tokens_per_byte)
    assert row.kv_tokens * (1 - KV_UNDER) <= tokens <= row.kv_tokens * (1 + KV_OVER), tokens


@pytest.mark.parametrize("row", [r for r in ROWS if r.graphs_gib is not None], ids=lambda r: r.source)
def test_graph_term_covers_the_logged_graphs(row: Logged) -> None:
    assert row.graphs_gib is not None
    assert row.graphs_gib * GIB <= overhead.CUDA_GRAPHS_BYTES  # the safe side, never below


def test_kv_tokens_per_byte_match_the_log() -> None:
    # vllm#10517: 3.81 GiB held 1,952 blocks of 16 tokens; Llama-3.1-8B is 128 KiB per token.
    from gpuscout.estimator.inference import kv_bytes_per_sequence
    per_token = kv_bytes_per_sequence(load_llm_preset("llama-3.1-8b"), 1, 2.0, 1, 1)
    assert int(3.81 * GIB // (per_token * 16)) == pytest.approx(1952, abs=2)


def test_v1_default_max_num_seqs_follows_the_gpu() -> None:
    job = InferenceJob.model_validate({"kind": "inference", "model": "qwen3-8b"})
    assert vllm_max_num_seqs(job, find_gpu("h100")) == 1024
    assert vllm_max_num_seqs(job, find_gpu("a100")) == 256  # A100 excluded by name (vLLM PR #17885)
    assert vllm_max_num_seqs(job, find_gpu("l40s")) == 256
    assert vllm_max_num_seqs(job.model_copy(update={"max_num_seqs": 64}), find_gpu("h100")) == 64


def test_h100_profile_is_about_the_same_across_model_sizes() -> None:
    # At V1's H100 defaults the sampler (1024 rows × V) dominates the profiled peak, so it barely
    # moves with model size: the trait the public V1 logs show (docs/estimator.md §2.8).
    peaks = [vllm_profile_term(InferenceJob.model_validate({"kind": "inference", "model": m}),
                               load_llm_preset(m), find_gpu("h100")).bytes / GIB
             for m in ("qwen3-8b", "qwen3-32b", "qwen2.5-7b", "qwen2.5-14b")]
    assert max(peaks) / min(peaks) < 1.3
    assert 4.0 < min(peaks) < 6.0


def test_enforce_eager_frees_the_graph_memory() -> None:
    shape, gpu = load_llm_preset("llama-3.1-8b"), find_gpu("h100")
    job = InferenceJob.model_validate({"kind": "inference", "model": "llama-3.1-8b"})
    eager = job.model_copy(update={"enforce_eager": True})
    peak = estimate_inference_memory(job, shape, gpu).peak_bytes
    freed = peak - estimate_inference_memory(eager, shape, gpu).peak_bytes
    assert freed == overhead.CUDA_GRAPHS_BYTES
    # Graphs are captured after the KV cache is sized: eager mode frees memory, not KV budget.
    assert kv_budget_bytes(eager, shape, gpu) == kv_budget_bytes(job, shape, gpu)


def test_lower_max_num_seqs_frees_sampler_memory() -> None:
    shape, gpu = load_llm_preset("qwen3-8b"), find_gpu("h100")
    job = InferenceJob.model_validate({"kind": "inference", "model": "qwen3-8b"})
    small = job.model_copy(update={"max_num_seqs": 128})
    assert kv_budget_bytes(small, shape, gpu) - kv_budget_bytes(job, shape, gpu) > 2 * GIB


def test_prefix_hits_need_the_cache() -> None:
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        InferenceJob.model_validate({"kind": "inference", "model": "qwen3-8b", "prefix_hit_rate": 0.5,
                                     "enable_prefix_caching": False})
