"""Serving memory: KV cache from the config, weight formats, vLLM's budget, monotonicity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.inference import estimate_inference_memory, kv_bytes_per_sequence, max_concurrency
from gpuscout.hardware.catalog import find_gpu, usable_memory_bytes
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import load_llm_preset

LLAMA = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100")


def job(**kw: object) -> InferenceJob:
    return InferenceJob.model_validate({"kind": "inference", "model": "llama-3-8b"} | kw)


def test_kv_bytes_per_token_from_the_config() -> None:
    # 2 (K and V) × 32 layers × 8 KV heads × 128 head_dim × 2 B = 131,072 B per token.
    assert kv_bytes_per_sequence(LLAMA, 1, 2.0, 1, 1) == 131_072


def test_sliding_window_layers_stop_growing_at_the_window() -> None:
    gemma = load_llm_preset("gemma-2-9b")
    short, long = (kv_bytes_per_sequence(gemma, n, 2.0, 1, 1) for n in (4096, 8192))
    full_layers = sum(a.count for a in gemma.attention if a.kind == "full")
    per_token_full = sum(a.count * a.kv_values_per_token for a in gemma.attention if a.kind == "full") * 2
    assert full_layers and long - short == per_token_full * 4096


def test_mla_caches_one_latent_per_layer() -> None:
    ds = load_llm_preset("deepseek-v3")
    assert kv_bytes_per_sequence(ds, 1, 2.0, 1, 1) == 61 * (512 + 64) * 2


def test_halving_bytes_per_weight_halves_the_weights_term() -> None:
    w32 = bytes_by_category(estimate_inference_memory(job(weights="fp32"), LLAMA, H100))["weights"]
    w16 = bytes_by_category(estimate_inference_memory(job(weights="bf16"), LLAMA, H100))["weights"]
    assert w32 == 2 * w16


def test_quantized_formats_keep_embeddings_16_bit() -> None:
    int4 = estimate_inference_memory(job(weights="int4", int4_group_size=128), LLAMA, H100)
    names = {t.name: t.bytes for t in int4.terms}
    assert names["16-bit leftovers (embeddings, norms, lm_head)"] > 2 * 128_256 * 4096 * 2 - 1


def test_vllm_budget_leaves_the_engine_reserve_unused() -> None:
    b = estimate_inference_memory(job(gpu_memory_utilization=0.8), LLAMA, H100)
    reserve = next(t.bytes for t in b.terms if t.name == "engine reserve")
    assert abs(reserve - 0.2 * usable_memory_bytes(H100)) <= 1


def test_max_concurrency_is_the_edge_of_fitting() -> None:
    n = max_concurrency(job(prompt_tokens=4000, output_tokens=1000), LLAMA, usable_memory_bytes(H100))
    assert n > 1
    assert estimate_inference_memory(job(prompt_tokens=4000, output_tokens=1000, concurrency=n), LLAMA, H100).fits
    assert not estimate_inference_memory(
        job(prompt_tokens=4000, output_tokens=1000, concurrency=n + 1), LLAMA, H100).fits


def test_tensor_parallel_splits_weights_and_kv() -> None:
    one = bytes_by_category(estimate_inference_memory(job(concurrency=8), LLAMA, H100))
    four = bytes_by_category(estimate_inference_memory(job(concurrency=8, tensor_parallel=4), LLAMA, H100))
    assert abs(four["weights"] * 4 - one["weights"]) <= 4
    assert abs(four["kv_cache"] * 4 - one["kv_cache"]) <= 4


@settings(max_examples=60, deadline=None)
@given(conc=st.integers(1, 512), prompt=st.integers(1, 6000), out=st.integers(1, 2000),
       engine=st.sampled_from(["vllm", "hf"]), kv=st.sampled_from(["bf16", "fp8"]))
def test_memory_never_shrinks_as_concurrency_or_context_grow(
    conc: int, prompt: int, out: int, engine: str, kv: str
) -> None:
    def peak(**kw: object) -> int:
        spec = {"concurrency": conc, "prompt_tokens": prompt, "output_tokens": out, "engine": engine,
                "kv_cache_dtype": kv} | kw
        return estimate_inference_memory(job(**spec), LLAMA, H100).peak_bytes

    base = peak()
    assert peak(concurrency=conc + 1) >= base
    assert peak(prompt_tokens=prompt + 1) >= base
    assert peak(output_tokens=out + 1) >= base


# --- vLLM settings and short-prompt latency (docs/estimator.md §3.6) ---

def _speed(gpu: str, tp: int = 1, **kw: object) -> dict[str, float]:
    from gpuscout.estimator.speed.serve import estimate_inference_speed
    j = job(requests=1, **kw)
    return estimate_inference_speed(j, LLAMA, find_gpu(gpu), gpus=tp, efficiency=None).metrics


def test_ttft_matches_a_measured_v1_server() -> None:
    # vLLM 0.31, Llama-3.1-8B-Instruct, A100 80GB, one request: first chunk at 182 ms for a
    # 2,065-token prompt (prefix-cache miss) and 42–47 ms when all but the last partial block hit.
    def ttft(hit: float) -> float:
        from gpuscout.estimator.speed.serve import estimate_inference_speed
        j = InferenceJob.model_validate({"kind": "inference", "model": "llama-3.1-8b", "prompt_tokens": 2065,
                                         "output_tokens": 64, "requests": 1, "prefix_hit_rate": hit})
        shape = load_llm_preset("llama-3.1-8b")
        return estimate_inference_speed(j, shape, find_gpu("a100"), gpus=1, efficiency=None).metrics["ttft_s"]
    assert ttft(0.0) == pytest.approx(0.182, rel=0.20)
    assert ttft(1 - 17 / 2065) == pytest.approx(0.045, rel=0.20)


def test_prefix_hits_cut_prefill_not_memory() -> None:
    cold = _speed("h100", prompt_tokens=4000, output_tokens=100)
    warm = _speed("h100", prompt_tokens=4000, output_tokens=100, prefix_hit_rate=0.75)
    assert warm["ttft_s"] < cold["ttft_s"]
    mem = [bytes_by_category(estimate_inference_memory(job(prompt_tokens=4000, prefix_hit_rate=h), LLAMA, H100))
           for h in (0.0, 0.75)]
    assert mem[0] == mem[1]


def test_decode_batch_is_capped_by_max_num_seqs() -> None:
    capped = _speed("h100", concurrency=64, max_num_seqs=8, prompt_tokens=128, output_tokens=128)
    free = _speed("h100", concurrency=8, prompt_tokens=128, output_tokens=128)
    assert capped["decode_step_s"] == free["decode_step_s"]


def test_enforce_eager_decode_matches_a_measured_slowdown() -> None:
    # vllm-omni#7960: a Qwen2.5-7B-shaped LLM on A800s, ~13 ms per token with CUDA graphs and
    # ~22-23 ms eager, one request.
    from gpuscout.estimator.speed.serve import estimate_inference_speed

    def tpot(eager: bool) -> float:
        j = InferenceJob.model_validate({"kind": "inference", "model": "qwen2.5-7b", "prompt_tokens": 200,
                                         "output_tokens": 256, "requests": 1, "enforce_eager": eager})
        shape = load_llm_preset("qwen2.5-7b")
        return estimate_inference_speed(j, shape, find_gpu("a800"), gpus=1, efficiency=None).metrics["tpot_s"]
    assert tpot(False) == pytest.approx(0.013, rel=0.20)
    assert tpot(True) == pytest.approx(0.0225, rel=0.20)


def test_vllm_settings_are_offered_when_serving_does_not_fit() -> None:
    from gpuscout.estimator.fit import suggest_changes
    # Qwen3-8B at 64 × 8,192 tokens does not fit an H100 (its KV cache alone is 72 GiB); each vLLM
    # setting is offered with what it gives back: the 1,024-row sampler profile, the graphs.
    tight = InferenceJob.model_validate({"kind": "inference", "model": "qwen3-8b", "concurrency": 64,
                                         "prompt_tokens": 7000, "output_tokens": 1192})
    shape = load_llm_preset("qwen3-8b")
    got = {s.change: s for s in suggest_changes(tight, shape, H100)}
    seqs = got["max_num_seqs 1024 → 64"]
    assert seqs.keeps_task and seqs.saves_bytes > 3 * 2**30
    assert got["enforce_eager (no CUDA graphs)"].saves_bytes == 2**30
