"""Bundled LLM presets: public Hugging Face `config.json` files, listed in `llm_presets/index.toml`.

A preset is found by its id ("llama-3-8b"), an alias, or a Hub id ("meta-llama/Meta-Llama-3-8B"),
case-insensitively. Chat/instruct variants ("-Instruct", "-chat-hf", "-it") share the base model's
architecture, so they resolve to the same preset.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from functools import cache
from importlib import resources
from typing import Any

from gpuscout.errors import UnknownNameError
from gpuscout.frozen import Frozen
from gpuscout.userfile import shown
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.shape import ModelShape

_PRESET_DIR = "llm_presets"
# Suffixes of post-trained variants with the same parameter layout as the base model.
_VARIANT_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-pt", "-base")


class LlmPreset(Frozen):
    """One row of `llm_presets/index.toml`."""


    id: str
    name: str
    file: str
    hub_id: str
    source: str  # the Hub URL the config was copied from
    max_position_embeddings: int
    aliases: tuple[str, ...] = ()


@cache
def llm_presets() -> tuple[LlmPreset, ...]:
    index = resources.files("gpuscout.workload").joinpath(_PRESET_DIR, "index.toml").read_text("utf-8")
    return tuple(LlmPreset.model_validate(row) for row in tomllib.loads(index)["model"])


def llm_preset_ids() -> tuple[str, ...]:
    return tuple(p.id for p in llm_presets())


@cache
def _lookup_table() -> dict[str, LlmPreset]:
    """Every accepted spelling, lower-cased: id, Hub id and aliases, with and without the org."""
    table: dict[str, LlmPreset] = {}
    for preset in llm_presets():
        for name in (preset.id, preset.hub_id, *preset.aliases):
            table.setdefault(name.lower(), preset)
            table.setdefault(name.lower().rsplit("/", 1)[-1], preset)
    return table


def _candidates(name: str) -> list[str]:
    """The name, then without org, "meta-" prefix and variant suffixes."""
    key = name.strip().lower()
    tried = [key, key.rsplit("/", 1)[-1]]
    bare = tried[-1].removeprefix("meta-")
    while True:
        tried.append(bare)
        stripped = next((bare.removesuffix(s) for s in _VARIANT_SUFFIXES if bare.endswith(s)), bare)
        if stripped == bare:
            return tried
        bare = stripped


def find_llm_preset(preset_id: str) -> LlmPreset:
    table = _lookup_table()
    for key in _candidates(preset_id):
        if key in table:
            return table[key]
    close = difflib.get_close_matches(_candidates(preset_id)[-1], llm_preset_ids(), n=3, cutoff=0.5)
    hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownNameError(
        f"Unknown model preset {shown(preset_id)}.",
        f"gpuscout bundles the configs of: {', '.join(llm_preset_ids())}.",
        f"{hint}Or pass the model's config.json (or its directory) instead of a preset name.",
    )


@cache
def _preset_config_text(file: str) -> str:
    return resources.files("gpuscout.workload").joinpath(_PRESET_DIR, file).read_text("utf-8")


def llm_preset_config(preset_id: str) -> dict[str, Any]:
    """The raw `config.json` of a preset (a fresh dict: callers may modify it)."""
    config: dict[str, Any] = json.loads(_preset_config_text(find_llm_preset(preset_id).file))
    return config


@cache
def load_llm_preset(preset_id: str) -> ModelShape:
    preset = find_llm_preset(preset_id)
    return shape_from_hf_config(llm_preset_config(preset.id), name=preset.name, source=preset.id)
