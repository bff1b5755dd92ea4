"""Model shapes from a Hugging Face `config.json`, without importing torch or transformers.

`load_hf_config` reads the file; `shape_from_hf_config` dispatches on `model_type` to the family
builders in `workload.hf_families` and adds the parameter totals. The counts are exact: the tests
compare them with `transformers` models built on the meta device.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gpuscout.errors import SpecError, UnknownNameError
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


def supported_model_types() -> tuple[str, ...]:
    return tuple(sorted(_BUILDERS))


def load_hf_config(path: Path) -> dict[str, Any]:
    """Read a `config.json` file, or the one inside a model directory."""
    file = path / "config.json" if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError(
            f"No model config at {file}.",
            "A Hugging Face model is described by the config.json in its directory.",
            "Pass the path of a config.json file or of a model directory that contains one.",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"Cannot read {file}.", str(exc), "Check the file's permissions and that it is UTF-8 JSON."
        ) from None
    return _parse_config_json(text, file)


def _parse_config_json(text: str, file: Path) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{file} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            "config.json must be a single JSON object.",
            f"Fix line {exc.lineno} of {file} (a trailing comma or a missing quote is the usual cause).",
        ) from None
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
    dropout_keys = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout")
    default_dropout = 0.1 if model_type == "gpt2" else 0.0  # GPT2Config defaults all three to 0.1
    dropouts = [config.get(k, default_dropout if k in ("attn_pdrop", "resid_pdrop", "embd_pdrop") else 0.0)
                for k in dropout_keys]
    act = config.get("hidden_activation") or config.get("hidden_act") or config.get("activation_function")
    return {
        "hidden_act": str(act or ("gelu_new" if model_type == "gpt2" else "silu")),
        "dropout": max(float(d or 0.0) for d in dropouts),
        "norms_per_layer": 4 if gemma else 2,
        # Gemma2Config defaults attn_logit_softcapping to 50.0.
        "attn_logit_softcapping": bool(config.get("attn_logit_softcapping", 50.0 if model_type == "gemma2" else None)),
    }


def _model_type(config: dict[str, Any]) -> str:
    raw = config.get("model_type")
    if not isinstance(raw, str):
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
            f"Unsupported model_type '{raw}'.",
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
        if isinstance(config.get(key), int):
            return int(config[key])
    raise SpecError("The model config has no layer count.", "num_hidden_layers (or n_layer) is missing.",
                    "Use the model's full config.json.")
