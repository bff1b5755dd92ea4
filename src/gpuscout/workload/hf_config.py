"""Model shapes from a Hugging Face `config.json`, without importing torch or transformers.

`load_hf_config` reads the file; `shape_from_hf_config` dispatches on `model_type` to the family
builders in `workload.hf_families` and adds the parameter totals. The counts are exact: the tests
compare them with `transformers` models built on the meta device.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.userfile import read_user_json, shown
from gpuscout.workload import hf_families as fam
from gpuscout.workload.shape import ModelShape

_BUILDERS: dict[str, Callable[[fam.ConfigFields], fam.ShapeParts]] = {
    "llama": fam.build_llama,
    "mistral": fam.build_mistral,
    "mixtral": fam.build_mixtral,
    "qwen2": fam.build_qwen2,
    "qwen3": fam.build_qwen3,
    "qwen3_moe": fam.build_qwen3_moe,
    "gemma2": partial(fam.build_gemma, gemma3=False),
    "gemma3_text": partial(fam.build_gemma, gemma3=True),
    "phi3": fam.build_phi3,
    "gpt2": fam.build_gpt2,
    "deepseek_v3": fam.build_deepseek_v3,
    "falcon": fam.build_falcon,
}

# Old Falcon checkpoints name their type after the dataset; transformers maps them to falcon.
_MODEL_TYPE_ALIASES = {"RefinedWeb": "falcon", "RefinedWebModel": "falcon"}

# A quadrillion parameters: 500 times the largest model announced (~2e12). More comes from a wrong
# field, and would only carry absurd numbers into every estimate (docs/design.md §4.10).
MAX_PARAMS = 10**15
_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout")
_CONFIG_FIX = ("Use the model's config.json from the Hugging Face Hub (a trailing comma or a missing quote "
               "is the usual cause of a syntax error).")


def supported_model_types() -> tuple[str, ...]:
    return tuple(sorted(_BUILDERS))


def load_hf_config(path: Path) -> dict[str, Any]:
    """Read a `config.json` file, or the one inside a model directory."""
    file = path / "config.json" if path.is_dir() else path
    if not os.path.lexists(file):
        raise SpecError(
            f"No model config at {file}.",
            "A Hugging Face model is described by the config.json in its directory.",
            "Pass the path of a config.json file or of a model directory that contains one.",
        )
    # Regular files only, at most 16 MiB, nesting, NaN and lone surrogates checked (gpuscout.userfile).
    config = read_user_json(file, "model config", _CONFIG_FIX)
    if not isinstance(config, dict):
        raise SpecError(
            f"{file} holds a JSON {type(config).__name__}, not an object.",
            "config.json must be a single JSON object of model fields.",
            "Use the model's config.json from the Hugging Face Hub.",
        )
    return config


def shape_from_hf_config(config: dict[str, Any], *, name: str, source: str) -> ModelShape:
    """The `ModelShape` of a decoder-only model described by a Hugging Face config dict."""
    model_type = _model_type(config)
    parts = _BUILDERS[model_type](fam.ConfigFields(config, model_type))
    shape = assemble_shape(parts, name=name, family=model_type, source=source)
    return shape.model_copy(update=_training_traits(config, model_type))


def _training_traits(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    """Activation-relevant settings, with transformers' per-family defaults where keys are absent."""
    gemma = model_type in ("gemma2", "gemma3_text")
    default_dropout = 0.1 if model_type == "gpt2" else 0.0  # GPT2Config defaults all three to 0.1
    dropouts = [_probability(config, k, default_dropout if k in ("attn_pdrop", "resid_pdrop", "embd_pdrop") else 0.0)
                for k in _DROPOUT_KEYS]
    act_key = next((k for k in ("hidden_activation", "hidden_act", "activation_function") if config.get(k)), None)
    act = config[act_key] if act_key else ("gelu_new" if model_type == "gpt2" else "silu")
    if not isinstance(act, str) or len(act) > 64:
        raise _bad_field(str(act_key), act, "the activation's name, e.g. \"silu\" or \"gelu_pytorch_tanh\"")
    # Gemma2Config defaults attn_logit_softcapping to 50.0.
    softcap = config.get("attn_logit_softcapping", 50.0 if model_type == "gemma2" else None)
    if softcap is not None and not (isinstance(softcap, int | float) and math.isfinite(softcap) and softcap >= 0):
        raise _bad_field("attn_logit_softcapping", softcap, "null or a non-negative number")
    return {
        "hidden_act": act,
        "dropout": max(dropouts),
        "norms_per_layer": 4 if gemma else 2,
        "attn_logit_softcapping": bool(softcap),
    }


def _probability(config: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability: a number in [0, 1] (null means the family default); anything else is named."""
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise _bad_field(key, value, "a probability from 0 to 1")  # NaN fails the range test too
    return float(value)


def _bad_field(key: str, value: object, want: str) -> SpecError:
    return SpecError(
        f"config.json field '{key}' is invalid (got {shown(value)}).",
        f"gpuscout reads '{key}' as {want}.",
        "Copy the field from the model's config.json on the Hugging Face Hub.",
    )


def _model_type(config: dict[str, Any]) -> str:
    raw = config.get("model_type")
    if not isinstance(raw, str) or not raw:
        raise SpecError(
            "config.json has no 'model_type'.",
            "gpuscout picks the architecture's parameter layout by model_type.",
            f"Add the model's model_type (one of: {', '.join(supported_model_types())}).",
        )
    model_type = _MODEL_TYPE_ALIASES.get(raw, raw)
    if model_type not in _BUILDERS:
        close = difflib.get_close_matches(model_type, supported_model_types(), n=3, cutoff=0.5)
        hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UnknownNameError(
            f"Unsupported model_type {shown(raw)}.",
            f"gpuscout knows the parameter layout of: {', '.join(supported_model_types())}.",
            f"{hint}Use a config of a supported family, or a safetensors checkpoint for exact weight bytes.",
        )
    return model_type


def assemble_shape(parts: fam.ShapeParts, *, name: str, family: str, source: str) -> ModelShape:
    """Add lm_head and the totals to a builder's parts, and check that they add up."""
    lm_head = 0 if parts.tie_word_embeddings else parts.vocab_size * parts.hidden_size
    rest = parts.embedding_params + lm_head + parts.norm_params + parts.other_params
    shape = ModelShape(
        name=name,
        family=family,
        source=source,
        num_layers=parts.num_layers,
        hidden_size=parts.hidden_size,
        vocab_size=parts.vocab_size,
        num_attention_heads=parts.num_attention_heads,
        num_kv_heads=parts.num_kv_heads,
        head_dim=parts.head_dim,
        intermediate_size=parts.intermediate_size,
        max_position_embeddings=parts.max_position_embeddings,
        tie_word_embeddings=parts.tie_word_embeddings,
        gated_mlp=parts.gated_mlp,
        num_experts=parts.num_experts,
        experts_per_token=parts.experts_per_token,
        moe_intermediate_size=parts.moe_intermediate_size,
        linears=tuple(g for g in parts.linears if g.count > 0),
        embedding_params=parts.embedding_params,
        lm_head_params=lm_head,
        norm_params=parts.norm_params,
        other_params=parts.other_params,
        attention=tuple(parts.attention),
        params_total=sum(g.count * g.params_each for g in parts.linears) + rest,
        # Active per token: routed experts at top-k; embeddings, lm_head, norms, routers in full.
        params_active=sum(g.active_count * g.params_each for g in parts.linears) + rest,
    )
    check_param_sum(shape)
    if shape.params_total > MAX_PARAMS:
        raise SpecError(
            f"The config describes a model of {shape.params_total:.3g} parameters, more than {MAX_PARAMS:.0e}.",
            "The largest models today have about 2e12 parameters; a count this size comes from a wrong field.",
            "Check num_hidden_layers, hidden_size, intermediate_size, vocab_size and the expert counts.",
        )
    return shape


def check_param_sum(shape: ModelShape) -> None:
    """The shape's invariants; a violation is a bug in a builder, not a user error."""
    rest = shape.embedding_params + shape.lm_head_params + shape.norm_params + shape.other_params
    total = sum(g.count * g.params_each for g in shape.linears) + rest
    names = [g.name for g in shape.linears]
    problems = [
        f"params_total {shape.params_total} != parts sum {total}" if total != shape.params_total else "",
        "params_active > params_total" if shape.params_active > shape.params_total else "",
        "active_count > count" if any(g.active_count > g.count for g in shape.linears) else "",
        "duplicate linear group names" if len(set(names)) != len(names) else "",
        "attention layouts do not cover every layer"
        if sum(a.count for a in shape.attention) != shape.num_layers
        else "",
    ]
    if any(problems):
        raise RuntimeError(f"inconsistent ModelShape for {shape.name}: {'; '.join(p for p in problems if p)}")


def config_with_depth(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """The same model with only its first `num_layers` decoder layers (depth slicing)."""
    sliced = dict(config)
    sliced["n_layer" if config.get("model_type") == "gpt2" else "num_hidden_layers"] = num_layers
    if isinstance(config.get("layer_types"), list):
        sliced["layer_types"] = config["layer_types"][:num_layers]
    return sliced


def config_depth(config: dict[str, Any]) -> int:
    """The number of decoder layers a config.json dict declares."""
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= fam.MAX_LAYERS:
            return value
    raise SpecError("The model config has no layer count.", "num_hidden_layers (or n_layer) is missing.",
                    "Use the model's full config.json.")
