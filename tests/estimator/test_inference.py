"""Serving memory: KV cache from the config, weight formats, vLLM's budget, monotonicity."""

from __future__ import annotations

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
