"""The bundled diffusion presets (image or video): reading their folder, and finding one by its id or an
alias, with did-you-mean."""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Iterable, Mapping
from importlib.resources.abc import Traversable
from typing import Any

from gpuscout.errors import UnknownNameError
from gpuscout.userfile import shown


def normalize(name: str) -> str:
    """Case, surrounding space, '_' and ' ' do not matter in a preset name."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def alias_table(presets: Iterable[tuple[str, Iterable[str]]]) -> dict[str, str]:
    """Every accepted spelling (normalized id and aliases) → the preset id."""
    return {normalize(name): pid for pid, aliases in presets for name in (pid, *aliases)}


def resolve_preset(name: str, table: Mapping[str, str], kind: str, ids: Iterable[str], alias_example: str) -> str:
    """The preset id `name` spells, or an UnknownNameError naming the close matches and every id."""
    key = normalize(name)
    if key in table:
        return table[key]
    close = dict.fromkeys(table[n] for n in difflib.get_close_matches(key, table, n=5, cutoff=0.5))
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownNameError(
        f"Unknown {kind} model preset {shown(name)}.{hint}",
        f"gpuscout bundles {kind} presets for: {', '.join(ids)}.",
        f"Use one of those ids (or an alias such as {alias_example}).",
    )


def preset_files(folder: Traversable) -> list[dict[str, Any]]:
    """Every `*.toml` preset in `folder`, parsed, in name order."""
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    return [tomllib.loads(f.read_text(encoding="utf-8")) for f in files]


def component_configs(folder: Traversable, preset_id: str, components: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The stored config.json of each component (`<id>.<component>.json`), keyed by component name (a fresh
    copy per call)."""
    return {name: json.loads((folder / f"{preset_id}.{name}.json").read_text(encoding="utf-8")) for name in components}
