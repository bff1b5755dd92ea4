"""Trace mode on a tiny Llama: byte counts against first-principles oracles.

Tolerance: parameters, gradients and optimizer states are compared to bytes-per-parameter
formulas within 1% (relative). The only expected deviation is AdamW's per-tensor `step`
scalar (4 bytes per parameter tensor, ~0.01% here). Activation tests compare two traces.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gpuscout.errors import GpuscoutError, MissingDependencyError, SpecError
from gpuscout.trace.llm import CATEGORIES, TraceResult, trace_finetune_step, trace_inference_step

pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
}
HIDDEN, FFN, LAYERS, VOCAB, KV_DIM = 64, 128, 2, 1000, 32  # KV_DIM = kv heads × head dim = 2 × 16
# Llama, untied embeddings: per layer q,o (h·h), k,v (h·kv), gate/up/down (3·h·f), two RMSNorms (2·h);
# plus embedding, lm_head (2·V·h) and the final norm (h).
TINY_PARAMS = LAYERS * (2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV_DIM + 3 * HIDDEN * FFN + 2 * HIDDEN) + (
    2 * VOCAB * HIDDEN + HIDDEN
)
REL_TOL = 0.01


def _finetune(**overrides: object) -> TraceResult:
    kwargs: dict[str, object] = {
        "micro_batch": 2,
        "seq_len": 64,
        "precision": "bf16_mixed",
        "optimizer": "adamw",
        "method": "full",
    }
    kwargs.update(overrides)
    return trace_finetune_step(TINY_LLAMA, **kwargs)  # type: ignore[arg-type]


def test_param_count_oracle_matches_transformers() -> None:
    import torch
    import transformers

    auto: Any = transformers  # typed in some releases, untyped in others
    config = auto.AutoConfig.for_model(**TINY_LLAMA)
    with torch.device("meta"):
        model = auto.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == TINY_PARAMS


def test_full_bf16_mixed_adamw_bytes_per_param() -> None:
    result = _finetune()
    peak = result.peak_bytes
    assert set(peak) == set(CATEGORIES)
    assert peak["parameters"] == pytest.approx(4 * TINY_PARAMS, rel=REL_TOL)  # fp32 master weights
    assert peak["gradients"] == pytest.approx(4 * TINY_PARAMS, rel=REL_TOL)  # fp32 gradients
    assert peak["optimizer_states"] == pytest.approx(8 * TINY_PARAMS, rel=REL_TOL)  # fp32 m and v
    assert peak["activations"] > 0
    assert result.kind == "finetune"
    assert result.device == "cpu (fake)"
    assert result.wall_s > 0
    # The overall peak has the resident states plus something in flight, and no more than all maxima.
    assert 16 * TINY_PARAMS < result.peak_total_bytes <= sum(peak.values())
    assert any("not traced" in note for note in result.notes)


def test_pure_bf16_halves_weights_grads_and_states() -> None:
    peak = _finetune(precision="bf16").peak_bytes
    assert peak["parameters"] == pytest.approx(2 * TINY_PARAMS, rel=REL_TOL)
    assert peak["gradients"] == pytest.approx(2 * TINY_PARAMS, rel=REL_TOL)
    assert peak["optimizer_states"] == pytest.approx(4 * TINY_PARAMS, rel=REL_TOL)


def test_fp16_mixed_and_sgd_with_momentum() -> None:
    result = _finetune(precision="fp16_mixed", optimizer="sgd")
    assert result.peak_bytes["parameters"] == pytest.approx(4 * TINY_PARAMS, rel=REL_TOL)
    # SGD with momentum keeps one fp32 buffer per parameter.
    assert result.peak_bytes["optimizer_states"] == pytest.approx(4 * TINY_PARAMS, rel=REL_TOL)
    assert any("GradScaler" in note for note in result.notes)


def test_adafactor_states_are_factored() -> None:
    peak = _finetune(optimizer="adafactor").peak_bytes
    assert 0 < peak["optimizer_states"] < 0.5 * 4 * TINY_PARAMS


def test_lora_gradients_and_states_only_for_adapters() -> None:
    rank = 4
    # LoRA adds r·(in + out) per targeted linear: q,o (64→64), k,v (64→32), gate,up (64→128), down (128→64).
    per_layer = rank * (2 * (64 + 64) + 2 * (64 + 32) + 3 * (64 + 128))
    adapters = LAYERS * per_layer
    peak = _finetune(method="lora", lora_rank=rank, lora_alpha=8).peak_bytes
    assert peak["gradients"] == pytest.approx(4 * adapters, rel=REL_TOL)
    assert peak["optimizer_states"] == pytest.approx(8 * adapters, rel=REL_TOL)
    assert peak["gradients"] < 0.1 * 4 * TINY_PARAMS
    # bf16_mixed LoRA: frozen base in bf16, adapters upcast to fp32 by peft.
    assert peak["parameters"] == pytest.approx(2 * TINY_PARAMS + 4 * adapters, rel=REL_TOL)


def test_checkpointing_reduces_activations() -> None:
    plain = _finetune(seq_len=512).peak_bytes["activations"]
    checkpointed = _finetune(seq_len=512, gradient_checkpointing=True).peak_bytes["activations"]
    assert checkpointed < 0.85 * plain


def test_eager_attention_holds_more_activations_than_sdpa() -> None:
    sdpa = _finetune(seq_len=512).peak_bytes["activations"]
    eager = _finetune(seq_len=512, attention="eager").peak_bytes["activations"]
    assert eager > sdpa


def test_num_layers_slices_depth() -> None:
    one_layer = _finetune(num_layers=1).peak_bytes["parameters"]
    per_layer = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV_DIM + 3 * HIDDEN * FFN + 2 * HIDDEN
    assert one_layer == pytest.approx(4 * (TINY_PARAMS - per_layer), rel=REL_TOL)


def test_inference_peak_grows_with_prompt() -> None:
    short = trace_inference_step(TINY_LLAMA, batch=2, prompt_tokens=64, weight_dtype="bf16")
    long = trace_inference_step(TINY_LLAMA, batch=2, prompt_tokens=512, weight_dtype="bf16")
    assert long.peak_total_bytes > short.peak_total_bytes
    assert short.kind == "inference"
    assert short.peak_bytes["parameters"] == pytest.approx(2 * TINY_PARAMS, rel=REL_TOL)
    assert short.peak_bytes["gradients"] == 0
    # K and V, bf16, for 64 prompt tokens + 1 decoded token, for each layer and sequence.
    cache_bytes = 2 * LAYERS * 2 * 65 * KV_DIM * 2
    assert any(f"holds {cache_bytes} bytes" in note for note in short.notes)
    assert short.peak_bytes["activations"] >= cache_bytes


@pytest.mark.parametrize(("method", "optimizer"), [("qlora", "adamw"), ("full", "adamw_8bit")])
def test_bitsandbytes_jobs_are_refused_with_a_fix(method: str, optimizer: str) -> None:
    with pytest.raises(GpuscoutError) as info:
        _finetune(method=method, optimizer=optimizer)
    assert "QLoRA/8-bit" in info.value.what
    assert "drop --trace" in info.value.fix


def test_missing_peft_is_a_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # makes `import peft` raise ImportError
    with pytest.raises(MissingDependencyError) as info:
        _finetune(method="lora")
    assert "gpuscout[bench]" in info.value.fix


def test_mixture_of_experts_traces_in_pure_bf16() -> None:
    moe = {**TINY_LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
    peak = trace_finetune_step(
        moe, micro_batch=1, seq_len=32, precision="bf16", optimizer="adamw", method="full"
    ).peak_bytes
    assert peak["optimizer_states"] == pytest.approx(2 * peak["parameters"], rel=REL_TOL)


def test_ops_fake_tensors_cannot_run_become_user_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscout.trace import llm as trace

    def fail(model: object) -> None:
        raise RuntimeError("aten._local_scalar_dense.default: data-dependent")

    monkeypatch.setattr(trace, "materialize_fake", fail)
    with pytest.raises(GpuscoutError) as info:
        trace_inference_step(TINY_LLAMA, batch=1, prompt_tokens=8, weight_dtype="fp32")
    assert "data-dependent" in info.value.why
    assert isinstance(info.value.__cause__, RuntimeError)


def test_config_without_model_type_is_a_spec_error() -> None:
    config = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    with pytest.raises(SpecError):
        trace_inference_step(config, batch=1, prompt_tokens=8, weight_dtype="fp32")


def test_nonpositive_sizes_are_spec_errors() -> None:
    with pytest.raises(SpecError):
        _finetune(seq_len=0)


def test_result_is_frozen() -> None:
    result = trace_inference_step(TINY_LLAMA, batch=1, prompt_tokens=8, weight_dtype="fp32")
    with pytest.raises(ValueError):
        result.wall_s = 0.0  # type: ignore[misc]


def test_importing_trace_does_not_import_torch() -> None:
    code = "import sys, gpuscout.trace.llm; print(sorted({'torch', 'transformers', 'peft'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
