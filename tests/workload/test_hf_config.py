"""Shapes from config.json, checked against real transformers models built on the meta device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.workload.hf_config import (
    check_param_sum,
    load_hf_config,
    shape_from_hf_config,
    supported_model_types,
)
from gpuscout.workload.shape import ModelShape

from . import assert_matches_real_model

_TOKENS = {"vocab_size": 512, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_DECODER = {
    **_TOKENS,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
_DEEPSEEK = {
    **_DECODER,
    "model_type": "deepseek_v3",
    "num_hidden_layers": 5,
    "num_key_value_heads": 4,
    "moe_intermediate_size": 24,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 2,
    "n_group": 2,
    "topk_group": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 12,
}
_FALCON = {**_TOKENS, "model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 8}
_GPT2 = {**_TOKENS, "model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 128}

# Small configs of every supported family, with the variants that change the layout.
SMALL_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {**_DECODER, "model_type": "llama"},
    "llama-bias-head_dim-tied": {
        **_DECODER,
        "model_type": "llama",
        "attention_bias": True,
        "mlp_bias": True,
        "head_dim": 24,
        "tie_word_embeddings": True,
    },
    "llama-mha": {**_DECODER, "model_type": "llama", "num_key_value_heads": None},
    "mistral-default-window": {**_DECODER, "model_type": "mistral"},
    "mistral-no-window": {**_DECODER, "model_type": "mistral", "sliding_window": None},
    "mixtral": {**_DECODER, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": {**_DECODER, "model_type": "qwen2"},
    "qwen2-sliding": {
        **_DECODER,
        "model_type": "qwen2",
        "use_sliding_window": True,
        "sliding_window": 32,
        "max_window_layers": 1,
    },
    "qwen2-layer_types": {
        **_DECODER,
        "model_type": "qwen2",
        "use_sliding_window": True,
        "sliding_window": 32,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
    },
    "qwen3": {**_DECODER, "model_type": "qwen3", "head_dim": 32},
    "qwen3-default-head_dim": {**_DECODER, "model_type": "qwen3", "tie_word_embeddings": True},
    "qwen3_moe": {
        **_DECODER,
        "model_type": "qwen3_moe",
        "head_dim": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 24,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    },
    "gemma2": {**_DECODER, "model_type": "gemma2", "head_dim": 32, "sliding_window": 16},
    "gemma3_text": {**_DECODER, "model_type": "gemma3_text", "num_hidden_layers": 7, "sliding_window": 16},
    "gemma3_text-pattern": {
        **_DECODER,
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "sliding_window_pattern": 3,
    },
    "phi3": {**_DECODER, "model_type": "phi3", "sliding_window": 31},
    "gpt2": _GPT2,
    "gpt2-n_inner": {**_GPT2, "n_inner": 80},
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v3-no-q-lora": {**_DEEPSEEK, "q_lora_rank": None, "attention_bias": True},
    "falcon-multi-query": _FALCON,
    "falcon-new-arch": {**_FALCON, "new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    "falcon-sequential": {**_FALCON, "multi_query": False, "parallel_attn": False, "alibi": True},
}


def _shape(key: str) -> ModelShape:
    return shape_from_hf_config(SMALL_CONFIGS[key], name=key, source="test")


def test_every_supported_family_has_a_small_config() -> None:
    covered = {config["model_type"] for config in SMALL_CONFIGS.values()}
    assert covered == set(supported_model_types())


@pytest.mark.parametrize("key", sorted(SMALL_CONFIGS))
def test_params_and_linear_groups_match_transformers(key: str) -> None:
    assert_matches_real_model(_shape(key), SMALL_CONFIGS[key])


def _transformers_layer_kinds(config: dict[str, Any]) -> tuple[int, int, int | None]:
    """(full layers, sliding layers, window) as transformers' config resolves them."""
    from transformers import AutoConfig

    hf = AutoConfig.for_model(**config)
    window = getattr(hf, "sliding_window", None)
    types = getattr(hf, "layer_types", None) or ["sliding_attention"] * hf.num_hidden_layers
    sliding = types.count("sliding_attention") if window else 0
    return hf.num_hidden_layers - sliding, sliding, window if sliding else None


@pytest.mark.parametrize("key", sorted(k for k in SMALL_CONFIGS if not k.startswith(("deepseek", "gpt2", "falcon"))))
def test_sliding_layers_match_transformers_config(key: str) -> None:
    shape = _shape(key)
    full = sum(a.count for a in shape.attention if a.kind == "full")
    sliding = [a for a in shape.attention if a.kind == "sliding"]
    window = sliding[0].window if sliding else None
    assert (full, sum(a.count for a in sliding), window) == _transformers_layer_kinds(SMALL_CONFIGS[key])


def test_moe_active_counts_and_router() -> None:
    shape = _shape("qwen3_moe")  # layers 1 and 3 would be MoE; 3 is mlp_only -> one MoE layer
    experts = {g.name: g for g in shape.linears if g.expert}
    assert set(experts) == {"experts.gate_up_proj", "experts.down_proj"}
    assert (experts["experts.down_proj"].count, experts["experts.down_proj"].active_count) == (8, 2)
    assert shape.other_params == 8 * 64  # one router (E, h)
    expert_params = sum(g.params_each for g in experts.values())
    assert shape.params_total - shape.params_active == (8 - 2) * expert_params


def _kv_bytes_per_token(shape: ModelShape, bytes_per_value: int, context: int) -> int:
    """KV bytes added per token at `context` tokens: sliding layers stop growing past their window."""
    return sum(
        a.count * a.kv_values_per_token * bytes_per_value
        for a in shape.attention
        if a.window is None or context <= a.window
    )


def _preset_shape(file: str) -> ModelShape:
    presets = Path(__file__).parents[2] / "src/gpuscout/workload/llm_presets"
    return shape_from_hf_config(load_hf_config(presets / file), name=file, source=file)


def test_kv_bytes_llama3_8b() -> None:
    # 2 (K, V) · 32 layers · 8 kv heads · 128 head_dim · 2 bytes
    assert _kv_bytes_per_token(_preset_shape("llama-3-8b.json"), 2, 8192) == 2 * 32 * 8 * 128 * 2 == 131072


def test_kv_bytes_gemma2_sliding_layers() -> None:
    shape = _preset_shape("gemma-2-9b.json")
    per_layer = 2 * 8 * 256  # K and V, 8 kv heads, head_dim 256 (explicit; h / heads would be 224)
    assert {(a.kind, a.count, a.kv_values_per_token, a.window) for a in shape.attention} == {
        ("full", 21, per_layer, None),
        ("sliding", 21, per_layer, 4096),
    }
    assert _kv_bytes_per_token(shape, 2, 4096) == 42 * per_layer * 2
    assert _kv_bytes_per_token(shape, 2, 8192) == 21 * per_layer * 2  # sliding layers are full


def test_kv_bytes_deepseek_v3_mla() -> None:
    shape = _preset_shape("deepseek-v3.json")
    assert shape.attention[0].kind == "mla"
    assert _kv_bytes_per_token(shape, 2, 4096) == 61 * (512 + 64) * 2


@pytest.mark.parametrize("key", ["llama", "qwen3", "llama-bias-head_dim-tied"])
def test_kv_values_match_a_real_cache(key: str) -> None:
    """Run a tiny real model on CPU and measure its KV cache tensors."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**SMALL_CONFIGS[key])).eval()
    tokens = 5
    with torch.no_grad():
        cache = model(torch.arange(3, 3 + tokens)[None], use_cache=True).past_key_values
    values = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    assert values == tokens * sum(a.count * a.kv_values_per_token for a in _shape(key).attention)


def test_layer_norms_and_embeddings_of_gpt2() -> None:
    shape = _shape("gpt2")
    assert shape.embedding_params == (512 + 128) * 64  # wte + wpe
    assert shape.lm_head_params == 0 and shape.tie_word_embeddings
    assert shape.norm_params == (2 * 3 + 1) * 2 * 64
    assert not shape.gated_mlp


def test_param_sum_is_checked() -> None:
    shape = _shape("llama")
    check_param_sum(shape)
    with pytest.raises(RuntimeError, match="params_total"):
        check_param_sum(shape.model_copy(update={"params_total": shape.params_total + 1}))


def test_load_from_directory_and_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIGS["llama"]))
    assert load_hf_config(tmp_path) == load_hf_config(tmp_path / "config.json") == SMALL_CONFIGS["llama"]


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 64,\n}\n')
    with pytest.raises(SpecError, match="line 4") as err:
        load_hf_config(path)
    assert "To fix" in str(err.value)


def test_missing_file_and_non_object(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="No model config"):
        load_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="not an object"):
        load_hf_config(tmp_path)


def test_unknown_model_type_suggests_a_family() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'llama'") as err:
        shape_from_hf_config({**_DECODER, "model_type": "lama"}, name="x", source="x")
    assert "qwen3_moe" in str(err.value)


def test_missing_model_type_and_bad_fields() -> None:
    with pytest.raises(SpecError, match="model_type"):
        shape_from_hf_config(dict(_DECODER), name="x", source="x")
    broken = {k: v for k, v in _DECODER.items() if k != "hidden_size"}
    with pytest.raises(SpecError, match="hidden_size"):
        shape_from_hf_config({**broken, "model_type": "llama"}, name="x", source="x")
    with pytest.raises(SpecError, match="num_hidden_layers"):
        shape_from_hf_config({**_DECODER, "model_type": "llama", "num_hidden_layers": "4"}, name="x", source="x")
    with pytest.raises(SpecError, match="layer_types"):
        shape_from_hf_config({**_DECODER, "model_type": "qwen2", "layer_types": ["full"]}, name="x", source="x")
