"""Bundled LLM presets: lookup, and exact parameter counts against the real transformers models."""

from __future__ import annotations

import pytest

from gpuscout.errors import UnknownNameError
from gpuscout.workload.presets import (
    find_llm_preset,
    llm_preset_config,
    llm_preset_ids,
    llm_presets,
    load_llm_preset,
)

from . import assert_matches_real_model

# (total, active) parameters as transformers builds the model (no MTP layers, no buffers).
# Published figures they agree with: Llama-3-8B 8,030,261,248; Llama-2-7B 6,738,415,616;
# Mistral-7B 7,241,732,096; Mixtral-8x7B 46.7B total / 12.9B active; GPT-2 124,439,808;
# Qwen3-30B-A3B 30.5B / 3.3B; DeepSeek-V3 671B / 37B (the Hub's 685B adds the 14B MTP module).
EXPECTED_PARAMS: dict[str, tuple[int, int]] = {
    "llama-2-7b": (6_738_415_616, 6_738_415_616),
    "llama-2-13b": (13_015_864_320, 13_015_864_320),
    "llama-3-8b": (8_030_261_248, 8_030_261_248),
    "llama-3.1-8b": (8_030_261_248, 8_030_261_248),
    "llama-3.1-70b": (70_553_706_496, 70_553_706_496),
    "llama-3.2-1b": (1_235_814_400, 1_235_814_400),
    "llama-3.2-3b": (3_212_749_824, 3_212_749_824),
    "mistral-7b-v0.1": (7_241_732_096, 7_241_732_096),
    "mistral-7b-v0.3": (7_248_023_552, 7_248_023_552),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen2.5-7b": (7_615_616_512, 7_615_616_512),
    "qwen2.5-14b": (14_770_033_664, 14_770_033_664),
    "qwen2.5-72b": (72_706_203_648, 72_706_203_648),
    "qwen3-0.6b": (596_049_920, 596_049_920),  # Qwen: 0.6B total, 0.44B non-embedding (tied)
    "qwen3-8b": (8_190_735_360, 8_190_735_360),
    "qwen3-32b": (32_762_123_264, 32_762_123_264),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704),
    "gemma-2-9b": (9_241_705_984, 9_241_705_984),
    "gemma-2-27b": (27_227_128_320, 27_227_128_320),
    "gemma-3-1b": (999_885_952, 999_885_952),
    "phi-3-mini-4k": (3_821_079_552, 3_821_079_552),
    "gpt2": (124_439_808, 124_439_808),
    "deepseek-v3": (671_026_404_352, 37_552_282_624),
    "falcon-7b": (6_921_720_704, 6_921_720_704),
}


def test_at_least_15_presets_with_unique_ids() -> None:
    ids = llm_preset_ids()
    assert len(ids) >= 15
    assert len(set(ids)) == len(ids)
    assert set(ids) == set(EXPECTED_PARAMS)


@pytest.mark.parametrize("preset_id", sorted(EXPECTED_PARAMS))
def test_param_counts(preset_id: str) -> None:
    shape = load_llm_preset(preset_id)
    assert (shape.params_total, shape.params_active) == EXPECTED_PARAMS[preset_id]
    assert shape.source == preset_id


@pytest.mark.parametrize("preset_id", sorted(EXPECTED_PARAMS))
def test_full_size_preset_matches_transformers(preset_id: str) -> None:
    assert_matches_real_model(load_llm_preset(preset_id), llm_preset_config(preset_id))


@pytest.mark.parametrize("preset", llm_presets(), ids=lambda p: p.id)
def test_index_rows_agree_with_the_configs(preset: object) -> None:
    from transformers import AutoConfig

    from gpuscout.workload.presets import LlmPreset

    assert isinstance(preset, LlmPreset)
    hf = AutoConfig.for_model(**llm_preset_config(preset.id))
    assert preset.max_position_embeddings == hf.max_position_embeddings
    assert load_llm_preset(preset.id).max_position_embeddings == preset.max_position_embeddings
    assert preset.source == f"https://huggingface.co/{preset.hub_id}/blob/main/config.json"
    assert preset.file == f"{preset.id}.json"


@pytest.mark.parametrize(
    ("name", "preset_id"),
    [
        ("llama-3-8b", "llama-3-8b"),
        ("LLAMA-3-8B", "llama-3-8b"),
        ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k"),
        ("openai-community/gpt2", "gpt2"),
        ("  deepseek-ai/DeepSeek-V3 ", "deepseek-v3"),
    ],
)
def test_aliases_and_hub_ids(name: str, preset_id: str) -> None:
    assert find_llm_preset(name).id == preset_id


def test_unknown_preset_suggests_close_ids() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'llama-3-8b'") as err:
        load_llm_preset("llama-3-7b")
    assert "To fix" in str(err.value)
    with pytest.raises(UnknownNameError):
        load_llm_preset("mistralai/Mistral-7B-Instruct-v0.2")  # differs from v0.1 and v0.3


def test_preset_config_is_a_fresh_copy() -> None:
    config = llm_preset_config("gpt2")
    config["n_layer"] = 1
    assert llm_preset_config("gpt2")["n_layer"] == 12


def test_moe_presets() -> None:
    mixtral, qwen, deepseek = (load_llm_preset(p) for p in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"))
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.moe_intermediate_size) == (8, 2, 14336)
    assert (qwen.num_experts, qwen.experts_per_token, qwen.moe_intermediate_size) == (128, 8, 768)
    assert (qwen.head_dim, qwen.intermediate_size) == (128, 6144)  # explicit head_dim, not 2048 / 32
    assert (deepseek.num_experts, deepseek.experts_per_token, deepseek.intermediate_size) == (256, 8, 18432)
    routed = {g.name: g for g in deepseek.linears if g.expert}
    assert routed["experts.down_proj"].count == 58 * 256  # 61 layers minus 3 dense
    assert routed["experts.down_proj"].active_count == 58 * 8


def test_loading_presets_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from gpuscout.workload.presets import load_llm_preset; load_llm_preset('deepseek-v3'); "
        "assert not {'torch', 'transformers'} & set(sys.modules), 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
