"""The expected bands (hardware/expected_bands.toml): every band built from cited measurements."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuscout.hardware.bands import band_for, load_bands, parse_bands, variant_named, variants_of
from gpuscout.hardware.catalog import find_gpu

DOCTOR_DOC = Path(__file__).resolve().parents[2] / "docs" / "doctor.md"


def test_every_band_is_built_from_positive_measurements_and_cites_a_known_source() -> None:
    bands = load_bands()
    assert len(bands.bands) > 20
    for band in bands.bands:
        assert band.low > 0 and (band.high is None or band.high > band.low), band
        assert band.low == pytest.approx(min(band.measurements) * (1 - band.spread))
        assert all(s in bands.sources for s in band.sources)


def test_every_source_of_the_bands_is_explained_in_the_docs() -> None:
    text = DOCTOR_DOC.read_text(encoding="utf-8")
    cited = set(re.findall(r"\*\*([A-Z0-9]+)\*\*", text))
    assert set(load_bands().sources) <= cited


def test_a_band_naming_an_unknown_source_or_sku_is_refused() -> None:
    band = {"check": "matmul_bf16", "sku": "h100-sxm5-80gb", "measurements": [1.0], "sources": ["X"]}
    with pytest.raises(ValueError, match="unknown sources"):
        parse_bands({"band": [band], "sources": {}})
    with pytest.raises(ValueError, match="unknown SKU"):
        parse_bands({"band": [band | {"sku": "h900"}], "sources": {"X": "x"}})


def test_the_4090_and_its_d_variant_have_bands_apart_so_throughput_can_tell_them() -> None:
    full, d = band_for("matmul_bf16", "rtx-4090"), band_for("matmul_bf16", "rtx-4090d")
    assert full is not None and d is not None and d.high is not None
    assert d.high < full.low
    assert [v.sku for v in variants_of("rtx-4090")] == ["rtx-4090d"]
    assert [v.sku for v in variants_of("rtx-4090d")] == ["rtx-4090d"]
    assert find_gpu("NVIDIA GeForce RTX 4090 D").sku == "rtx-4090d"  # the catalog knows the driver's name


def test_the_5090_d_is_a_variant_outside_the_catalog_known_by_its_driver_name() -> None:
    variant = variant_named("NVIDIA GeForce RTX 5090 D")
    assert variant is not None and variant.of == "rtx-5090" and not variant.in_catalog
    assert variant_named("NVIDIA GeForce RTX 5090") is None


def test_collective_bands_are_for_the_gpu_count_they_were_measured_on() -> None:
    assert band_for("allreduce_busbw", "h100-sxm5-80gb", gpus=8) is not None
    assert band_for("allreduce_busbw", "h100-sxm5-80gb", gpus=4) is None
    assert band_for("allreduce_busbw", "h100-sxm5-80gb") is None
