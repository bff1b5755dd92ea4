"""The GPU catalog: it loads, lookups resolve, and its numbers match the reference table (docs/gpus.md §2)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from gpuscout.errors import GpuscoutError, SpecError, UnknownNameError
from gpuscout.hardware.catalog import (
    Gpu,
    find_gpu,
    load_catalog,
    load_sources,
    normalise_name,
    parse_catalog,
    peak_flops_per_s,
    usable_memory_bytes,
)
from gpuscout.units import GB, MIB

EXPECTED_SKUS = {
    "a100-pcie-40gb", "a100-sxm4-40gb", "a100-pcie-80gb", "a100-sxm4-80gb",
    "h100-pcie-80gb", "h100-sxm5-80gb", "h100-nvl-94gb", "h200-sxm-141gb", "h200-nvl-141gb",
    "gh200-96gb", "h20-96gb", "l40s", "l40", "l4", "a10", "a10g",
    "rtx-4090", "rtx-3090", "rtx-5090", "rtx-6000-ada", "rtx-a6000",
    "b200", "b100", "mi300x", "mi325x",
}  # fmt: skip


def _row(sku: str, aliases: list[str]) -> dict[str, Any]:
    """A minimal valid catalog row, for testing the catalog-level checks."""
    return {
        "sku": sku, "name": sku, "vendor": "nvidia", "architecture": "ampere", "aliases": aliases,
        "memory_bytes": 24_000_000_000, "memory_type": "GDDR6", "memory_bandwidth_bytes_per_s": 6e11,
        "bf16_flops_per_s": 1e14, "datasheet_is_sparse": False, "interconnect": "PCIe 4.0",
        "sources": ["S1"],
    }  # fmt: skip


def test_every_gpu_in_the_reference_table_loads() -> None:
    assert {gpu.sku for gpu in load_catalog()} == EXPECTED_SKUS


def test_catalog_is_cached() -> None:
    assert load_catalog() is load_catalog()


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("h100", "h100-sxm5-80gb"),
        ("H100-80GB-SXM5", "h100-sxm5-80gb"),
        ("h100 sxm", "h100-sxm5-80gb"),
        ("H100_SXM5", "h100-sxm5-80gb"),
        ("h100 pcie", "h100-pcie-80gb"),
        ("H100 NVL", "h100-nvl-94gb"),
        ("A100-80GB", "a100-sxm4-80gb"),
        ("a100", "a100-sxm4-80gb"),
        ("a100-80gb-pcie", "a100-pcie-80gb"),
        ("4090", "rtx-4090"),
        ("RTX4090", "rtx-4090"),
        ("rtx 4090", "rtx-4090"),
        ("l40s", "l40s"),
        ("L40", "l40"),
        ("L4", "l4"),
        ("A10G", "a10g"),
        ("A10", "a10"),
        ("H200", "h200-sxm-141gb"),
        ("h200 nvl", "h200-nvl-141gb"),
        ("H20", "h20-96gb"),
        ("mi300x", "mi300x"),
        ("MI325X", "mi325x"),
        # Product names as nvidia-smi / rocm-smi print them.
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_aliases_resolve(name: str, sku: str) -> None:
    assert find_gpu(name).sku == sku


def test_every_sku_resolves_to_itself() -> None:
    for gpu in load_catalog():
        assert find_gpu(gpu.sku) is gpu


@pytest.mark.parametrize(("typo", "suggestion"), [("h10", "h100"), ("a1000", "a100"), ("rtx409", "rtx-4090")])
def test_unknown_name_suggests_close_matches(typo: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as caught:
        find_gpu(typo)
    message = str(caught.value)
    assert "Did you mean" in message
    assert suggestion in message
    assert "gpuscout gpus" in caught.value.fix


def test_unknown_name_suggests_at_most_three() -> None:
    with pytest.raises(UnknownNameError) as caught:
        find_gpu("h2")
    hint = caught.value.what.split("Did you mean: ", 1)[1]
    assert 1 <= len(hint.rstrip("?").split(", ")) <= 3


def test_unrelated_name_has_no_suggestion() -> None:
    with pytest.raises(UnknownNameError) as caught:
        find_gpu("zzzz")
    assert "Did you mean" not in str(caught.value)


def test_normalise_name_ignores_case_separators_and_vendor_prefix() -> None:
    assert normalise_name("NVIDIA H100_80GB-sxm5") == normalise_name("h100 80gb sxm5") == "h10080gbsxm5"


@pytest.mark.parametrize(
    ("name", "field", "expected"),
    [
        ("h100-sxm5-80gb", "bf16_flops_per_s", 989.5e12),
        ("h100-sxm5-80gb", "fp8_flops_per_s", 1979e12),
        ("a100-sxm4-80gb", "memory_bandwidth_bytes_per_s", 2.039e12),
        ("a100-pcie-80gb", "memory_bandwidth_bytes_per_s", 1.935e12),
        ("rtx-4090", "bf16_flops_per_s", 165.2e12),
        ("rtx-4090", "fp16_acc16_flops_per_s", 330.3e12),
        ("rtx-4090", "fp8_flops_per_s", 330.3e12),
        ("rtx-3090", "bf16_flops_per_s", 71.2e12),
        ("l40s", "bf16_flops_per_s", 362e12),
        ("l40", "bf16_flops_per_s", 181e12),
        ("l4", "bf16_flops_per_s", 121e12),
        ("mi300x", "bf16_flops_per_s", 1307.4e12),
        ("a10g", "bf16_flops_per_s", 70e12),
        ("a10", "bf16_flops_per_s", 125e12),
        ("h100-nvl-94gb", "bf16_flops_per_s", 835.5e12),
        ("b200", "bf16_flops_per_s", 2250e12),
        ("b100", "bf16_flops_per_s", 1750e12),
        ("rtx-a6000", "bf16_flops_per_s", 154.8e12),
        ("mi325x", "memory_bandwidth_bytes_per_s", 6.0e12),
    ],
)
def test_numbers_match_reference_table(name: str, field: str, expected: float) -> None:
    assert getattr(find_gpu(name), field) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "gb"),
    [("h100", 80), ("h100-nvl", 94), ("h200", 141), ("b200", 180), ("b100", 192), ("mi300x", 192),
     ("mi325x", 256), ("rtx-5090", 32), ("l40s", 48)],
)  # fmt: skip
def test_memory_is_vendor_decimal_gb(name: str, gb: int) -> None:
    assert find_gpu(name).memory_bytes == gb * GB


@pytest.mark.parametrize(
    ("name", "mib"),
    [("h200-nvl", 143_771), ("rtx-5090", 32_607), ("l40s", 46_068), ("b200", 183_359), ("h100", 81_559)],
)
def test_visible_memory_matches_nvidia_smi(name: str, mib: int) -> None:
    assert find_gpu(name).memory_visible_bytes == mib * MIB


def test_usable_memory_prefers_visible_figure() -> None:
    assert usable_memory_bytes(find_gpu("h200-nvl")) == 143_771 * MIB
    h200_sxm = find_gpu("h200")
    assert h200_sxm.memory_visible_bytes is None
    assert usable_memory_bytes(h200_sxm) == 141 * GB


def test_every_gpu_cites_existing_sources() -> None:
    sources = load_sources()
    for gpu in load_catalog():
        assert gpu.sources, gpu.sku
        for source in gpu.sources:
            assert source in sources, (gpu.sku, source)
    assert {f"S{i}" for i in range(1, 22)} <= set(sources)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("h20", {"bf16_flops_per_s", "fp32_flops_per_s", "tdp_w", "memory_bytes", "datasheet_is_sparse"}),
        ("a10g", {"int8_ops_per_s"}),
        ("rtx-5090", {"bf16_flops_per_s", "fp16_flops_per_s", "fp8_flops_per_s", "int8_ops_per_s"}),
        ("b100", {"bf16_flops_per_s", "memory_bytes", "memory_bandwidth_bytes_per_s", "tdp_w"}),
    ],
)
def test_verify_marks_carried_over(name: str, fields: set[str]) -> None:
    assert fields <= set(find_gpu(name).verify)


def test_confirmed_gpus_carry_no_verify_marks() -> None:
    for name in ("h100", "a100-40gb", "l40s", "mi300x", "b200", "rtx-4090"):
        assert find_gpu(name).verify == (), name


def test_no_two_skus_share_an_alias() -> None:
    owner: dict[str, str] = {}
    for gpu in load_catalog():
        for name in (gpu.sku, *gpu.aliases):
            key = normalise_name(name)
            assert owner.setdefault(key, gpu.sku) == gpu.sku, (name, owner[key], gpu.sku)


def test_bf16_at_least_fp32_on_nvidia_tensor_core_gpus() -> None:
    for gpu in load_catalog():
        if gpu.vendor == "nvidia" and gpu.bf16_flops_per_s and gpu.fp32_flops_per_s:
            assert gpu.bf16_flops_per_s >= gpu.fp32_flops_per_s, gpu.sku


def test_tensor_rates_are_ordered() -> None:
    """Dense peaks: tf32 <= bf16 == fp16 <= fp8 wherever the catalog has them."""
    for gpu in load_catalog():
        assert gpu.bf16_flops_per_s == gpu.fp16_flops_per_s, gpu.sku
        assert gpu.bf16_flops_per_s is not None
        if gpu.tf32_flops_per_s is not None:
            assert gpu.tf32_flops_per_s <= gpu.bf16_flops_per_s, gpu.sku
        if gpu.fp8_flops_per_s is not None:
            assert gpu.fp8_flops_per_s >= gpu.bf16_flops_per_s, gpu.sku


def test_geforce_cards_have_fp16_accumulate_rate() -> None:
    for name in ("rtx-3090", "rtx-4090", "rtx-5090"):
        gpu = find_gpu(name)
        assert gpu.fp16_acc16_flops_per_s == pytest.approx(2 * gpu.fp16_flops_per_s, rel=0.01)  # type: ignore[operator]


def test_peak_flops_per_s() -> None:
    h100 = find_gpu("h100")
    assert peak_flops_per_s(h100, "bf16") == 989.5e12
    assert peak_flops_per_s(h100, "BF16") == 989.5e12
    assert peak_flops_per_s(h100, "bfloat16") == 989.5e12
    assert peak_flops_per_s(h100, "int8") == 1979e12
    assert peak_flops_per_s(find_gpu("a100"), "tf32") == 156e12


def test_peak_flops_unsupported_dtype_suggests_bf16() -> None:
    with pytest.raises(GpuscoutError) as caught:
        peak_flops_per_s(find_gpu("a100"), "fp8")
    assert "tensor-core path" in caught.value.why
    assert "bf16" in caught.value.fix


def test_peak_flops_unpublished_fp32_raises() -> None:
    with pytest.raises(GpuscoutError, match="fp32"):
        peak_flops_per_s(find_gpu("b100"), "fp32")


@pytest.mark.parametrize("dtype", ["int4", "fp4", "fp64", "nonsense"])
def test_peak_flops_uncatalogued_dtype_raises(dtype: str) -> None:
    with pytest.raises(SpecError, match="Unknown precision"):
        peak_flops_per_s(find_gpu("h100"), dtype)


def test_gpu_model_is_frozen_and_strict() -> None:
    gpu = find_gpu("h100")
    with pytest.raises(ValidationError):
        gpu.sku = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Gpu.model_validate({**_row("x", []), "colour": "green"})
    with pytest.raises(ValidationError):
        Gpu.model_validate({**_row("x", []), "bf16_flops_per_s": -1.0})
    with pytest.raises(ValidationError):
        Gpu.model_validate({**_row("x", []), "verify": ["bf16_flops"]})


def test_parse_catalog_rejects_shared_alias() -> None:
    document = {"gpu": [_row("one", ["x-1"]), _row("two", ["X 1"])], "sources": {"S1": "s"}}
    with pytest.raises(ValueError, match="claimed by both"):
        parse_catalog(document)


def test_parse_catalog_rejects_duplicate_sku() -> None:
    document = {"gpu": [_row("one", []), _row("one", [])], "sources": {"S1": "s"}}
    with pytest.raises(ValueError, match="Duplicate"):
        parse_catalog(document)


def test_parse_catalog_rejects_missing_source() -> None:
    with pytest.raises(ValueError, match="missing from"):
        parse_catalog({"gpu": [_row("one", [])], "sources": {}})


def test_catalog_import_stays_light() -> None:
    """The catalog is on the CLI's fast path: importing it must not pull in torch."""
    code = (
        "import sys, gpuscout.hardware.catalog as c; c.load_catalog(); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
