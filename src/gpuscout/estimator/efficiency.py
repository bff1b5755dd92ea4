"""Efficiency factors: what fraction of each datasheet peak real software reaches.

A roofline with peak figures is only a lower bound on time (docs/gpus.md §2). The factors
live in `efficiency.toml`, one default row per phase kind (training, prefill, decode, image, video) with its
citation, plus override rows per GPU architecture or SKU. A measured benchmark should replace them.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import resources
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu

EfficiencyKind = Literal["training", "prefill", "decode", "image", "video"]
# "video" holds the diffusion-transformer (DiT) factors: video DiTs, and FLUX's DiT denoiser in image jobs.
EFFICIENCY_KINDS: tuple[EfficiencyKind, ...] = ("training", "prefill", "decode", "image", "video")


class Efficiency(Frozen):
    """Achieved fractions of peak, and the error band applied to job time."""


    compute: float = Field(gt=0, le=1)  # fraction of the dense peak for the phase's dtype
    bandwidth: float = Field(gt=0, le=1)  # fraction of peak HBM/GDDR bandwidth
    link: float = Field(gt=0, le=1)  # fraction of the catalog NVLink/PCIe figure for collectives
    overlap: float = Field(ge=0, le=1)  # fraction of gradient communication hidden behind compute
    band_low: float = Field(gt=0, le=1)  # job-time multiplier at the optimistic end
    band_high: float = Field(ge=1)  # job-time multiplier at the pessimistic end
    source: str

    @model_validator(mode="after")
    def _band_brackets_one(self) -> Efficiency:
        if not self.band_low < self.band_high:
            raise ValueError("band_low must be below band_high")
        return self


class EfficiencySource(Protocol):
    """What replaces the defaults per GPU and phase: a measured calibration (estimator/calibration.py)."""

    def efficiency_for(self, gpu: Gpu, phase: str, default: Efficiency) -> Efficiency: ...


# The calibration in force (docs/estimator.md §3.11). Every speed model asks `default_efficiency` for its
# factors, so setting one here calibrates them all, per GPU and phase, without a parameter in each.
_CALIBRATION: ContextVar[EfficiencySource | None] = ContextVar("gpuscout_calibration", default=None)


@contextmanager
def calibrated(source: EfficiencySource | None) -> Iterator[None]:
    """Within the block `default_efficiency` returns `source`'s factors (None: the plain defaults)."""
    token = _CALIBRATION.set(source)
    try:
        yield
    finally:
        _CALIBRATION.reset(token)


def active_source() -> EfficiencySource | None:
    """The calibration in force (set by `calibrated`), None outside one."""
    return _CALIBRATION.get()


def default_efficiency(gpu: Gpu, kind: str) -> Efficiency:
    """The default factors for `kind` (training, prefill, decode, image, video) on `gpu`, with sources;
    inside `calibrated(...)`, the calibrated ones where the calibration has this GPU and kind."""
    if kind not in EFFICIENCY_KINDS:
        raise SpecError(
            f"Unknown efficiency kind {kind!r}.",
            "Efficiency defaults exist per phase kind of the speed model.",
            f"Use one of: {', '.join(EFFICIENCY_KINDS)}.",
        )
    table = _table()
    base = table["default"][kind]
    row = {k: v for k, v in base.items() if k not in ("kind", "source")}
    sources = [str(base["source"])]
    for override in _matching_overrides(table["override"], gpu, kind):
        fields = {k: v for k, v in override.items() if k not in ("sku", "architecture", "kinds", "source")}
        row.update(fields)
        sources.append(str(override["source"]))
    default = Efficiency(**row, source=" | ".join(sources))
    active = _CALIBRATION.get()
    return default if active is None else active.efficiency_for(gpu, kind, default)


def _matching_overrides(overrides: list[Mapping[str, Any]], gpu: Gpu, kind: str) -> list[Mapping[str, Any]]:
    """Architecture rows first, then SKU rows, so the most specific row wins."""
    relevant = [o for o in overrides if kind in o.get("kinds", EFFICIENCY_KINDS)]
    by_arch = [o for o in relevant if o.get("architecture") == gpu.architecture and "sku" not in o]
    by_sku = [o for o in relevant if o.get("sku") == gpu.sku]
    return by_arch + by_sku


class AttentionEfficiency(Frozen):
    """Achieved fraction of the dense 16-bit peak of the fused attention kernel on one architecture."""

    architecture: str
    compute: float = Field(gt=0, le=1)
    set_from: tuple[str, ...] = ()  # validation sources that set or checked the number
    source: str


def attention_efficiency(gpu: Gpu) -> AttentionEfficiency | None:
    """The fused attention kernel's fraction of peak on `gpu`'s architecture, or None where no source gives
    one (efficiency.toml, [[attention]])."""
    rows: Mapping[str, AttentionEfficiency] = _table()["attention"]
    return rows.get(gpu.architecture)


@functools.cache
def _table() -> Mapping[str, Any]:
    """efficiency.toml, parsed and checked once (a malformed bundled file is a bug: ValueError)."""
    text = resources.files("gpuscout.estimator").joinpath("efficiency.toml").read_text(encoding="utf-8")
    document = tomllib.loads(text)
    defaults = {row["kind"]: row for row in document["default"]}
    if set(defaults) != set(EFFICIENCY_KINDS):
        raise ValueError(f"efficiency.toml needs one default row per kind {EFFICIENCY_KINDS}")
    for row in defaults.values():
        Efficiency(**{k: v for k, v in row.items() if k != "kind"})
    attention = {row["architecture"]: AttentionEfficiency(**row) for row in document.get("attention", [])}
    return {"default": defaults, "override": list(document.get("override", [])), "attention": attention}
