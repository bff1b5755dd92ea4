"""The bundled diffusion presets (image or video): a folder of TOML shapes with their components'
config.json files, read once, and found by id or alias with did-you-mean."""

from __future__ import annotations

import difflib
import functools
import json
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Generic, Protocol, Self, TypeVar

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


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Preset(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...


P = TypeVar("P", bound=_Preset)


class PresetFolder(Generic[P]):
    """The presets of one kind in `gpuscout/workload/<folder>/`: each `*.toml` is one preset (validated as
    `model`), and `<id>.<component>.json` beside it is the verbatim config.json of one component."""

    def __init__(self, folder: str, model: type[P], kind: str, alias_example: str) -> None:
        self.folder, self.model, self.kind, self.alias_example = folder, model, kind, alias_example

    @functools.cached_property
    def presets(self) -> dict[str, P]:
        """Every preset by id, in file-name order."""
        files = sorted((f for f in self._dir().iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
        presets = [self.model.model_validate(tomllib.loads(f.read_text(encoding="utf-8"))) for f in files]
        return {p.id: p for p in presets}

    def ids(self) -> tuple[str, ...]:
        return tuple(self.presets)

    def find(self, name: str) -> P:
        """The preset `name` spells (its id or an alias, case-insensitive)."""
        return self.presets[resolve_preset(name, self._aliases, self.kind, self.ids(), self.alias_example)]

    def configs(self, preset_id: str, components: Iterable[_Named]) -> dict[str, dict[str, Any]]:
        """The stored config.json of each component, keyed by component name (a fresh copy per call)."""
        return {c.name: json.loads((self._dir() / f"{preset_id}.{c.name}.json").read_text(encoding="utf-8"))
                for c in components}

    @functools.cached_property
    def _aliases(self) -> dict[str, str]:
        return alias_table((p.id, p.aliases) for p in self.presets.values())

    def _dir(self) -> Traversable:
        return resources.files("gpuscout.workload") / self.folder
