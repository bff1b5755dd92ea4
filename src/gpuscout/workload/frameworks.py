"""The trainer a fine-tune runs under, and the defaults it brings (frameworks.toml).

A job may name its trainer: `framework = "torchtune"` or `"torchtune@0.6"` (docs/estimator.md §2.16). Each version lists
the settings where that trainer's defaults differ in memory (fp32 upcast of unquantized modules under
QLoRA, where LoRA goes, checkpointing policy, loss implementation), each with its public source.

Resolution, field by field: what the spec writes, then the framework's default, then gpuscout's default.
A spec without `framework` is left untouched, so it means exactly what it meant before frameworks existed.
Defaults are versioned: a trainer's changed default is a new version in the data file, never an edit of
an old one, and the resolved `id@version` is written back into the job (and so into every estimate).
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpuscout.errors import SpecError

DATA_FILE = "frameworks.toml"


@dataclass(frozen=True)
class Default:
    """One setting a framework version chooses: a job field (dotted for a nested one) and its value."""

    field: str
    value: Any
    source: str
    # Applied only when the job checkpoints activations: it chooses how, not whether.
    when_checkpointing: bool = False
    # Part of another default (the layer interval of a checkpoint policy): skipped when the spec writes
    # that field itself, so a spec's own policy never inherits the framework's parameter for another one.
    companion_of: str | None = None


@dataclass(frozen=True)
class Note:
    """Documented behaviour that is recorded, not modelled through a job field (wrap policy, offload)."""

    topic: str
    text: str
    source: str


@dataclass(frozen=True)
class FrameworkVersion:
    framework: str
    version: str
    name: str
    covers: str
    defaults: tuple[Default, ...]
    notes: tuple[Note, ...]

    @property
    def ref(self) -> str:
        return f"{self.framework}@{self.version}"

    def default(self, field: str) -> Default | None:
        return next((d for d in self.defaults if d.field == field), None)


@dataclass(frozen=True)
class Framework:
    id: str
    name: str
    latest: str
    versions: dict[str, FrameworkVersion]


@cache
def frameworks() -> dict[str, Framework]:
    """frameworks.toml, parsed and checked once (a malformed bundled file is a bug: ValueError)."""
    text = resources.files("gpuscout.workload").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return {fid: _framework(fid, raw) for fid, raw in tomllib.loads(text).items()}


def _framework(fid: str, raw: dict[str, Any]) -> Framework:
    versions = {v: _version(fid, raw["name"], v, body) for v, body in raw["versions"].items()}
    if raw["latest"] not in versions:
        raise ValueError(f"{DATA_FILE}: {fid}.latest = {raw['latest']!r} is not one of its versions {sorted(versions)}")
    return Framework(id=fid, name=raw["name"], latest=raw["latest"], versions=versions)


def _version(fid: str, name: str, version: str, body: dict[str, Any]) -> FrameworkVersion:
    defaults = []
    for field, entry in body.get("defaults", {}).items():
        if not entry.get("source"):
            raise ValueError(f"{DATA_FILE}: {fid}@{version} default {field} has no source")
        defaults.append(Default(field, entry["value"], entry["source"], bool(entry.get("when_checkpointing")),
                                entry.get("companion_of")))
    notes = tuple(Note(topic, n["text"], n["source"]) for topic, n in body.get("notes", {}).items())
    return FrameworkVersion(fid, version, name, body.get("covers", ""), tuple(defaults), notes)


def resolve(ref: str) -> FrameworkVersion:
    """`id` or `id@version` to its entry; an unknown one is a SpecError that names the close ones."""
    fid, _, version = ref.strip().partition("@")
    known = frameworks()
    if fid not in known:
        close = difflib.get_close_matches(fid.lower(), sorted(known), n=3, cutoff=0.5)
        hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise SpecError(
            f"Unknown framework {ref!r} in the job spec.",
            f"gpuscout knows the defaults of these trainers: {', '.join(sorted(known))}.",
            f'{hint}Write framework = "<id>" or "<id>@<version>", or drop the key for transformers + peft.',
        )
    fw = known[fid]
    if not version:
        return fw.versions[fw.latest]
    if version not in fw.versions:
        raise SpecError(
            f"Unknown version {version!r} of framework {fid!r} in the job spec.",
            f"gpuscout has {fid}'s defaults for versions {', '.join(sorted(fw.versions))}.",
            f'Write framework = "{fid}" (version {fw.latest}) or pin one of the listed versions.',
        )
    return fw.versions[version]


def apply_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The raw finetune spec with its framework's defaults filled into the fields it leaves out.

    `framework` is rewritten to the resolved `id@version`. A field the spec writes always wins; a
    default marked `when_checkpointing` is applied only when checkpointing is on (spec or framework).
    """
    ref = data.get("framework")
    if ref is None:
        return data
    if not isinstance(ref, str):
        return data  # the field's own type check reports it
    fv = resolve(ref)
    out = dict(data)
    out["framework"] = fv.ref
    wanted = [d for d in fv.defaults if d.companion_of is None or d.companion_of not in data]
    for d in wanted:
        if not d.when_checkpointing:
            _set_default(out, d.field, d.value)
    if out.get("gradient_checkpointing") is True:
        for d in wanted:
            if d.when_checkpointing:
                _set_default(out, d.field, d.value)
    return out


def _set_default(data: dict[str, Any], field: str, value: Any) -> None:
    head, _, rest = field.partition(".")
    if not rest:
        data.setdefault(head, value)
        return
    inner = data.get(head, {})
    if not isinstance(inner, dict):
        return  # a malformed nested table: the model's own validation names it
    inner = dict(inner)
    _set_default(inner, rest, value)
    data[head] = inner
