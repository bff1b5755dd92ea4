"""gpuscout's speed model against published measurements, with its default efficiency factors.

Run: .venv/bin/python benchmarks/speed_vs_published.py
Prints: case, source (file + line), published, gpuscout, error % (gpuscout vs published).

Every published figure is a measurement quoted, with its public source, in docs/estimator.md; the
line number there is looked up at run time from the quoted text. Setups differ from the published
runs where gpuscout cannot express them (noted per case); read the error column with those notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gpuscout.estimator.inference import weight_terms
from gpuscout.estimator.speed.estimate import default_efficiency, estimate_speed
from gpuscout.hardware.catalog import find_gpu, peak_flops_per_s
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, InferenceJob
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape

DOCS = Path(__file__).resolve().parents[1] / "docs"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    published: float
    estimated: float
    unit: str
    note: str


def cite(file: str, needle: str, extra: str = "") -> str:
    """'docs/file:line' of the first line holding `needle` in the docs (line '?' if absent)."""
    path = DOCS / file
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    line = next((str(i) for i, text in enumerate(lines, 1) if needle in text), "?")
    return f"docs/{file}:{line}" + (f" ({extra})" if extra else "")


def llama_training_cases() -> list[Case]:
    """LLaMA paper GPU-hours (Table 15), as quoted in llm-analysis examples/llama/README.md, the
    file docs/estimator.md §4 cites: 82,432 (7B) and 135,168 (13B) A100-80GB hours for 1.0 T tokens
    (LLaMA paper Table 2). Llama 2 7B/13B presets have the same layer shapes as LLaMA 7B/13B."""
    cases = []
    for preset, hours in (("llama-2-7b", 82_432.0), ("llama-2-13b", 135_168.0)):
        gpus = 8  # one NVLink node; the paper used 2,048 GPUs (inter-node links are not modelled)
        job = FinetuneJob(kind="finetune", model=preset, method="full", precision="bf16_mixed", micro_batch=1,
                          seq_len=2048, grad_accum=2**22 // (2048 * gpus), gpus=gpus, dataset_tokens=10**12)
        est = estimate_speed(job, load_llm_preset(preset), find_gpu("a100-sxm4-80gb"))
        low, high = est.job_low_s * gpus / 3600, est.job_high_s * gpus / 3600
        cases.append(Case(
            f"{preset.replace('llama-2-', 'LLaMA-').upper().replace('LLAMA', 'LLaMA')} pre-training, 1.0T tokens, "
            "A100-80GB", cite(
                "estimator.md", "82,432", "numbers: llm-analysis examples/llama/README.md"),
            hours, est.job_s * gpus / 3600, "GPU-hours",
            f"MFU {est.metrics['mfu']:.1%}, band {low:,.0f}–{high:,.0f}",
        ))
    return cases


def llama65b_case() -> Case:
    """~380 tokens/s/GPU for LLaMA-65B on 2,048 A100-80GB (LLaMA paper, quoted in the same README)."""
    config = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016, "num_hidden_layers": 80,
              "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 32000,
              "max_position_embeddings": 2048, "tie_word_embeddings": False}
    shape = shape_from_hf_config(config, name="LLaMA-65B", source="LLaMA paper Table 2 dims; HF llama-65b ffn")
    job = FinetuneJob(kind="finetune", model="llama-65b", method="full", micro_batch=1, seq_len=2048,
                      grad_accum=256, gpus=8, sharding="zero1", dataset_tokens=10**12)
    est = estimate_speed(job, shape, find_gpu("a100-sxm4-80gb"))
    return Case("LLaMA-65B training throughput, A100-80GB", cite(
        "estimator.md", "380 tokens/s/GPU", "llm-analysis examples/llama/README.md"),
        380.0, est.metrics["tokens_per_s"] / est.gpus, "tokens/s/GPU",
        f"MFU {est.metrics['mfu']:.1%}; one 8-GPU ZeRO-1 node stands in for the 2,048-GPU run")


def llm_viewer_ttft_cases() -> list[Case]:
    """TensorRT-LLM on A100, LLaMA-7B, first-token latency 16.1 ms @128 and 120.5 ms @2048 tokens
    (LLM-Viewer#4, docs/estimator.md §4). The A100 variant is not stated; the 80 GB SXM4 is assumed."""
    shape, gpu = load_llm_preset("llama-2-7b"), find_gpu("a100-sxm4-80gb")
    cases = []
    for prompt, published_ms in ((128, 16.1), (2048, 120.5)):
        job = InferenceJob(kind="inference", model="llama-2-7b", weights="fp16", kv_cache_dtype="fp16",
                           prompt_tokens=prompt, output_tokens=2, concurrency=1, requests=1)
        est = estimate_speed(job, shape, gpu)
        cases.append(Case(f"LLaMA-7B TTFT @{prompt} tokens, A100, TensorRT-LLM", cite(
            "estimator.md", "hahnyuan/LLM-Viewer#4 |"), published_ms,
            est.metrics["ttft_s"] * 1e3, "ms", f"bound {est.phases[0].bound}"))
    return cases


def qwen35_27b_shape() -> ModelShape:
    """Qwen3.5-27B approximated as a dense Qwen3 model of its published dims (hidden 5120, 64 layers,
    FFN 17408, 24 heads / 4 KV heads of 256; vocab 248,320). The real model is hybrid (3 of 4 layers
    Gated DeltaNet), which gpuscout's config reader does not know. The stand-in has 24.4 B parameters,
    ~10% fewer than the real 27 B, so it reads ~10% fewer weight bytes per token at batch 1."""
    config = {"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
              "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 248320,
              "max_position_embeddings": 262144, "tie_word_embeddings": False}
    return shape_from_hf_config(config, name="Qwen3.5-27B (dense stand-in)", source="llmfit PR #137 case")


def llmfit_decode_case() -> Case:
    """~40 tok/s measured for Qwen3.5-27B Q4_K_M on an RTX 4090 (llmfit PR #137, docs/estimator.md §4)."""
    shape = qwen35_27b_shape()
    job = InferenceJob(kind="inference", model="qwen3.5-27b", weights="int4", kv_cache_dtype="fp16",
                       prompt_tokens=512, output_tokens=128, concurrency=1, requests=1)
    est = estimate_speed(job, shape, find_gpu("rtx-4090"))
    weights = sum(t.bytes for t in weight_terms(job, shape))
    return Case("Qwen3.5-27B Q4_K_M decode, RTX 4090, batch 1", cite("estimator.md", "39.9 vs about 40 tok/s"),
                40.0, 1 / est.metrics["tpot_s"], "tok/s",
                f"{shape.params_total / 1e9:.1f} B params, int4 weights {weights / 1e9:.1f} GB "
                "(Q4_K_M is ~4.5–6.6 bits per weight, so real bytes are higher)")


def rtx5090_gemm_cases() -> list[Case]:
    """mmapeak: ~370 TFLOPS BF16 with FP32 accumulate on an RTX 5090 (docs/gpus.md §2)."""
    gpu = find_gpu("rtx-5090")
    job = InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=8192, output_tokens=2, requests=1)
    est = estimate_speed(job, load_llm_preset("llama-3-8b"), gpu)
    prefill = est.phases[0]
    source = cite("estimator.md", "mmapeak")
    return [
        Case("RTX 5090 BF16 dense peak (catalog)", source, 370.0, peak_flops_per_s(gpu, "bf16") / 1e12, "TFLOPS",
             "whitepaper FP32-accumulate figure vs microbenchmark"),
        Case("RTX 5090 sustained BF16 GEMM (8k-token prefill)", source, 370.0, prefill.flops / prefill.seconds / 1e12,
             "TFLOPS", f"catalog peak × default prefill compute {default_efficiency(gpu, 'prefill').compute:g}; "
             "mmapeak is a peak probe, this is gpuscout's sustained rate"),
    ]


def error_pct(case: Case) -> float:
    return (case.estimated - case.published) / case.published * 100


def main() -> None:
    cases = [*llama_training_cases(), llama65b_case(), *llm_viewer_ttft_cases(), llmfit_decode_case(),
             *rtx5090_gemm_cases()]
    header = f"{'case':<52} {'source':<44} {'published':>12} {'gpuscout':>12} {'error %':>8}  unit"
    print(header)
    print("-" * len(header))
    for case in cases:
        print(f"{case.name:<52} {case.source[:44]:<44} {case.published:>12,.1f} {case.estimated:>12,.1f} "
              f"{error_pct(case):>+8.1f}  {case.unit}")
    print()
    for case in cases:
        print(f"- {case.name}: {case.note}. Source: {case.source}")
    errors = [abs(error_pct(c)) for c in cases]
    print(f"\nmedian |error| {sorted(errors)[len(errors) // 2]:.1f}%, "
          f"geometric-mean ratio {math.exp(sum(math.log(c.estimated / c.published) for c in cases) / len(cases)):.2f}")


if __name__ == "__main__":
    main()
