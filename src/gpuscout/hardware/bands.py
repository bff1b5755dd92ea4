"""Expected bands for `gpuscout doctor`: what healthy machines were publicly measured to deliver.

The numbers are data (`expected_bands.toml`, a source per band), like the GPU catalog: a band is
built from the published measurements it lists (low = their minimum less the spread seen across one
node, high = their maximum), so every figure traces to a citation. This module loads, validates and
looks bands up; judging a measurement against one lives in `doctor.verdict`.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from pydantic import Field, model_validator

from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import load_catalog

# The lane rate NCCL models per PCIe generation (×100 Mbit/s, NVIDIA/nccl issue #1206): a band
# measured on one generation is scaled to another by these ratios, and to other widths by lanes.
PCIE_LANE_RATE = MappingProxyType({1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480})


class Band(Frozen):
    """One check's expected range on one SKU (or PCIe generation), from published measurements."""


    check: str = Field(min_length=1)
    sku: str | None = None  # a catalog SKU or a variant's name
    pcie_gen: int | None = Field(None, ge=1)  # host_copy bands are keyed by the link, not the GPU
    gpus: int | None = Field(None, ge=2)  # collectives: the GPU count the figures were measured on
    measurements: tuple[float, ...] = Field(min_length=1)
    spread: float = Field(0.05, ge=0, lt=1)
    fail_below: float = Field(0.90, gt=0, le=1)
    floor: bool = False  # a minimum only (disks): no high end, no position in a band
    sources: tuple[str, ...] = Field(min_length=1)
    note: str = ""

    @model_validator(mode="after")
    def _measured(self) -> Band:
        if any(m <= 0 for m in self.measurements):
            raise ValueError(f"{self.check} {self.sku or self.pcie_gen}: measurements must be positive")
        return self

    @property
    def low(self) -> float:
        return min(self.measurements) * (1 - self.spread)

    @property
    def high(self) -> float | None:
        return None if self.floor else max(self.measurements)


class Variant(Frozen):
    """A SKU sold beside another under nearly the same name (a 4090 D beside the 4090)."""


    sku: str
    of: str  # the catalog SKU it is mistaken for
    label: str
    nvml_names: tuple[str, ...] = ()
    sm_count: int | None = Field(None, ge=1)
    of_sm_count: int | None = Field(None, ge=1)
    in_catalog: bool = True
    sources: tuple[str, ...] = Field(min_length=1)


class Bands(Frozen):
    bands: tuple[Band, ...]
    variants: tuple[Variant, ...] = ()
    sources: Mapping[str, str]


@functools.cache
def load_bands() -> Bands:
    """The bundled bands, validated; a malformed file is a bug in gpuscout (ValueError, with traceback)."""
    text = resources.files("gpuscout.hardware").joinpath("expected_bands.toml").read_text(encoding="utf-8")
    return parse_bands(tomllib.loads(text))


def parse_bands(document: Mapping[str, Any]) -> Bands:
    bands = Bands(bands=tuple(Band.model_validate(b) for b in document.get("band", [])),
                  variants=tuple(Variant.model_validate(v) for v in document.get("variant", [])),
                  sources=MappingProxyType(dict(document.get("sources", {}))))
    _check_references(bands)
    return bands


def _check_references(bands: Bands) -> None:
    """Every source cited exists, and every SKU is a catalog SKU or a declared variant."""
    skus = {g.sku for g in load_catalog()}
    names = skus | {v.sku for v in bands.variants}
    cited = [s for b in bands.bands for s in b.sources] + [s for v in bands.variants for s in v.sources]
    missing = sorted({s for s in cited if s not in bands.sources})
    if missing:
        raise ValueError(f"expected_bands.toml cites unknown sources {missing}")
    for band in bands.bands:
        if band.sku is not None and band.sku not in names:
            raise ValueError(f"expected_bands.toml: band {band.check} names unknown SKU {band.sku!r}")
    for variant in bands.variants:
        if variant.of not in skus or (variant.in_catalog and variant.sku not in skus):
            raise ValueError(f"expected_bands.toml: variant {variant.sku!r} of {variant.of!r} is not in the catalog")


def band_for(check: str, sku: str | None, *, gpus: int | None = None) -> Band | None:
    """The band of `check` on `sku` (for collectives, at `gpus` GPUs), or None where none was published."""
    if sku is None:
        return None
    for band in load_bands().bands:
        if band.check == check and band.sku == sku and band.gpus == gpus:
            return band
    return None


def host_copy_band(gen: int, width: int) -> tuple[Band, float] | None:
    """The pinned-copy band for a PCIe link, and the factor it was scaled by from the link it was measured on.

    The nearest measured generation is scaled by NCCL's lane rates and by lanes / 16.
    """
    measured = [b for b in load_bands().bands if b.check == "host_copy" and b.pcie_gen is not None]
    if not measured or gen not in PCIE_LANE_RATE or width < 1:
        return None
    band = min(measured, key=lambda b: abs((b.pcie_gen or 0) - gen))
    factor = PCIE_LANE_RATE[gen] / PCIE_LANE_RATE[band.pcie_gen or gen] * width / 16
    return band, factor


def floor_for(check: str) -> Band | None:
    return next((b for b in load_bands().bands if b.check == check and b.floor), None)


def variants_of(sku: str) -> tuple[Variant, ...]:
    """The variants sold beside `sku` (or beside the SKU `sku` is itself a variant of), the SKU's own first."""
    group = {sku} | {v.of for v in load_bands().variants if v.sku == sku}
    return tuple(v for v in load_bands().variants if v.of in group)


def variant_named(nvml_name: str | None) -> Variant | None:
    """The variant whose driver-reported name this is ("NVIDIA GeForce RTX 5090 D"), else None."""
    if not nvml_name:
        return None
    key = nvml_name.strip().lower()
    return next((v for v in load_bands().variants if key in (n.lower() for n in v.nvml_names)), None)
