"""The GPU catalog: it loads, lookups resolve, and its numbers match the reference table (docs/gpus.md §2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
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
    "a800-pcie-40gb", "a800-sxm4-40gb", "a800-pcie-80gb", "a800-sxm4-80gb",
    "h100-pcie-80gb", "h100-sxm5-80gb", "h100-nvl-94gb", "h800-pcie-80gb", "h800-sxm5-80gb",
    "h200-sxm-141gb", "h200-nvl-141gb", "gh200-96gb", "h20-96gb", "l40s", "l40", "l20", "l4", "a10", "a10g",
    "rtx-4090", "rtx-4090d", "rtx-4080", "rtx-4080-super", "rtx-3090", "rtx-3080", "rtx-3080-ti",
    "rtx-5090", "rtx-5080", "rtx-6000-ada", "rtx-a6000", "a40", "rtx-a5000", "rtx-a4000",
    "v100-pcie-16gb", "v100-pcie-32gb", "v100-sxm2-16gb", "v100-sxm2-32gb", "t4",
    "b200", "b100", "mi300x", "mi325x",
}  # fmt: skip

# The SKUs added after the catalog's first edition, each with the names it must answer to: the product
# name nvidia-smi prints (NVIDIA's driver table, docs/gpus.md §4) and the spellings rental platforms use.
NAMES_OF_NEW_SKUS: dict[str, tuple[str, ...]] = {
    "a800-pcie-40gb": ("NVIDIA A800 40GB Active", "A800 PCIe 40GB", "a800-40gb-pcie"),
    "a800-sxm4-40gb": ("NVIDIA A800-SXM4-40GB", "A800-40G", "a800 40gb"),
    "a800-pcie-80gb": ("NVIDIA A800 80GB PCIe", "NVIDIA A800 80GB PCIe LC", "A800-80GB-PCIe"),
    "a800-sxm4-80gb": ("NVIDIA A800-SXM4-80GB", "A800-80G", "A800", "a800 sxm4"),
    "h800-sxm5-80gb": ("NVIDIA H800", "H800", "H800-SXM5", "H800 80GB HBM3"),
    "h800-pcie-80gb": ("NVIDIA H800 PCIe", "H800-PCIe", "h800 80gb pcie"),
    "rtx-4090d": ("NVIDIA GeForce RTX 4090 D", "RTX 4090D", "4090D", "rtx-4090-d"),
    "l20": ("NVIDIA L20", "L20", "l20-48gb"),
    "v100-sxm2-16gb": ("Tesla V100-SXM2-16GB", "V100", "V100-16G", "v100 sxm2"),
    "v100-sxm2-32gb": ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB", "V100-32G", "v100-32gb"),
    "v100-pcie-16gb": ("Tesla V100-PCIE-16GB", "V100-PCIe", "v100 pcie 16gb"),
    "v100-pcie-32gb": ("Tesla V100-PCIE-32GB", "V100-PCIe-32GB"),
    "t4": ("Tesla T4", "T4", "NVIDIA Tesla T4", "t4-16gb"),
    "a40": ("NVIDIA A40", "A40", "a40-48gb"),
    "rtx-a5000": ("NVIDIA RTX A5000", "A5000", "RTX A5000"),
    "rtx-a4000": ("NVIDIA RTX A4000", "A4000", "RTX-A4000"),
    "rtx-4080": ("NVIDIA GeForce RTX 4080", "RTX 4080", "4080"),
    "rtx-4080-super": ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 Super", "4080S", "4080-super"),
    "rtx-3080": ("NVIDIA GeForce RTX 3080", "RTX 3080", "3080"),
    "rtx-3080-ti": ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", "3080Ti"),
    "rtx-5080": ("NVIDIA GeForce RTX 5080", "RTX 5080", "5080"),
    "gh200-96gb": ("NVIDIA GH200 480GB", "NVIDIA GH200 120GB", "GH200"),
    "h200-sxm-141gb": ("NVIDIA H200", "H200 141GB HBM3e"),
}


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


@pytest.mark.parametrize(("sku", "name"), [(sku, name) for sku, names in NAMES_OF_NEW_SKUS.items() for name in names])
def test_new_skus_resolve_by_each_name_in_any_case(sku: str, name: str) -> None:
    for spelling in (name, name.upper(), name.lower(), name.replace(" ", "_")):
        assert find_gpu(spelling).sku == sku, spelling


def test_every_new_sku_is_named() -> None:
    assert set(NAMES_OF_NEW_SKUS) <= EXPECTED_SKUS


def test_tesla_prefix_is_ignored_like_nvidia() -> None:
    assert normalise_name("Tesla V100-SXM2-32GB") == normalise_name("V100 SXM2 32GB") == "v100sxm232gb"
    assert normalise_name("NVIDIA Tesla T4") == "t4"


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("h10", "h100"), ("a1000", "a100"), ("rtx409", "rtx-4090"), ("a8000", "a800"), ("h8000", "h800"),
     ("v1000", "v100"), ("rtx4090dd", "rtx-4090d"), ("l200", "l20"), ("rtx-a500", "rtx-a5000")],
)  # fmt: skip
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
        ("a800", "bf16_flops_per_s", 312e12),
        ("a800", "nvlink_bytes_per_s", 400e9),
        ("a800-80gb-pcie", "memory_bandwidth_bytes_per_s", 1.935e12),
        ("h800", "bf16_flops_per_s", 989.5e12),
        ("h800", "nvlink_bytes_per_s", 400e9),
        ("h800-pcie", "bf16_flops_per_s", 756.5e12),
        ("rtx-4090d", "fp32_flops_per_s", 73.5e12),
        ("rtx-4090d", "bf16_flops_per_s", 147.1e12),
        ("l20", "bf16_flops_per_s", 119.5e12),
        ("l20", "memory_bandwidth_bytes_per_s", 0.864e12),
        ("v100-sxm2-32gb", "fp16_flops_per_s", 125e12),
        ("v100-sxm2-32gb", "nvlink_bytes_per_s", 300e9),
        ("v100-pcie-16gb", "fp16_flops_per_s", 112e12),
        ("t4", "fp16_flops_per_s", 65e12),
        ("t4", "int8_ops_per_s", 130e12),
        ("a40", "bf16_flops_per_s", 149.7e12),
        ("rtx-a5000", "bf16_flops_per_s", 111.1e12),
        ("rtx-a4000", "bf16_flops_per_s", 76.7e12),
        ("rtx-4080", "bf16_flops_per_s", 97.5e12),
        ("rtx-4080-super", "fp32_flops_per_s", 52.2e12),
        ("rtx-3080", "bf16_flops_per_s", 59.5e12),
        ("rtx-3080-ti", "memory_bandwidth_bytes_per_s", 0.912e12),
        ("rtx-5080", "bf16_flops_per_s", 112.6e12),
    ],
)
def test_numbers_match_reference_table(name: str, field: str, expected: float) -> None:
    assert getattr(find_gpu(name), field) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "gb"),
    [("h100", 80), ("h100-nvl", 94), ("h200", 141), ("b200", 180), ("b100", 192), ("mi300x", 192),
     ("mi325x", 256), ("rtx-5090", 32), ("l40s", 48), ("a800", 80), ("a800-40gb", 40), ("h800", 80),
     ("v100", 16), ("v100-32gb", 32), ("t4", 16), ("l20", 48), ("rtx-4090d", 24), ("rtx-3080", 10),
     ("rtx-3080-ti", 12), ("rtx-4080", 16), ("rtx-5080", 16), ("a40", 48), ("rtx-a5000", 24), ("rtx-a4000", 16)],
)  # fmt: skip
def test_memory_is_vendor_decimal_gb(name: str, gb: int) -> None:
    assert find_gpu(name).memory_bytes == gb * GB


@pytest.mark.parametrize(
    ("name", "mib"),
    [("h200-nvl", 143_771), ("rtx-5090", 32_607), ("l40s", 46_068), ("b200", 183_359), ("h100", 81_559),
     ("h200", 143_771), ("a100", 81_920), ("a800", 81_920), ("a800-80gb-pcie", 81_920), ("a40", 46_068),
     ("t4", 15_360), ("h20", 97_871)],
)  # fmt: skip
def test_visible_memory_matches_nvidia_smi(name: str, mib: int) -> None:
    assert find_gpu(name).memory_visible_bytes == mib * MIB


def test_usable_memory_prefers_visible_figure() -> None:
    assert usable_memory_bytes(find_gpu("h200-nvl")) == 143_771 * MIB
    h800 = find_gpu("h800")  # no public reading found: the nameplate, the smaller figure
    assert h800.memory_visible_bytes is None
    assert usable_memory_bytes(h800) == 80 * GB


def test_h200_sxm_shows_the_same_memory_as_the_nvl_part() -> None:
    """Both carry the same 141 GB of HBM3e; the SXM row once fell back to the nameplate (131.3 GiB)."""
    sxm, nvl = find_gpu("NVIDIA H200"), find_gpu("NVIDIA H200 NVL")
    assert sxm.sku == "h200-sxm-141gb" and nvl.sku == "h200-nvl-141gb"
    assert usable_memory_bytes(sxm) == usable_memory_bytes(nvl) == 143_771 * MIB
    assert usable_memory_bytes(sxm) / 2**30 == pytest.approx(140.4, abs=0.05)


def test_visible_memory_is_the_nameplate_read_in_binary_units() -> None:
    """Vendors print binary capacities as decimal GB: a visible total lies between the decimal nameplate
    less a few percent (driver and ECC reserves) and the same number of GiB. A MiB/GB mix-up or a
    typo in a reading fails here."""
    for gpu in load_catalog():
        if gpu.memory_visible_bytes is not None:
            gb = gpu.memory_bytes / GB
            assert 0.93 * gpu.memory_bytes <= gpu.memory_visible_bytes <= gb * 2**30, gpu.sku


def test_every_gpu_cites_existing_sources() -> None:
    sources = load_sources()
    for gpu in load_catalog():
        assert gpu.sources, gpu.sku
        for source in gpu.sources:
            assert source in sources, (gpu.sku, source)
    assert {f"S{i}" for i in range(1, 35)} | {f"SMI{i}" for i in range(1, 13)} <= set(sources)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("h20", {"bf16_flops_per_s", "fp32_flops_per_s", "tdp_w", "memory_bytes", "datasheet_is_sparse"}),
        ("a10g", {"int8_ops_per_s"}),
        ("rtx-5090", {"bf16_flops_per_s", "fp16_flops_per_s", "fp8_flops_per_s", "int8_ops_per_s"}),
        ("b100", {"bf16_flops_per_s", "memory_bytes", "memory_bandwidth_bytes_per_s", "tdp_w"}),
        ("rtx-5080", {"bf16_flops_per_s", "fp16_flops_per_s", "fp8_flops_per_s", "int8_ops_per_s"}),
        ("l20", {"bf16_flops_per_s", "fp8_flops_per_s", "fp32_flops_per_s", "datasheet_is_sparse", "tdp_w"}),
        ("h800-pcie", {"nvlink_bytes_per_s", "memory_bandwidth_bytes_per_s"}),
        ("a800-40gb", {"memory_bandwidth_bytes_per_s"}),
    ],
)
def test_verify_marks_carried_over(name: str, fields: set[str]) -> None:
    assert fields <= set(find_gpu(name).verify)


def test_confirmed_gpus_carry_no_verify_marks() -> None:
    for name in ("h100", "a100-40gb", "a100", "l40s", "mi300x", "b200", "rtx-4090", "a800", "h800", "v100",
                 "t4", "a40", "rtx-4090d"):
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
    """Dense peaks: tf32 <= bf16 == fp16 <= fp8 wherever the catalog has them; every GPU has a
    16-bit tensor rate (bf16, or fp16 alone on Volta and Turing)."""
    for gpu in load_catalog():
        half = gpu.fp16_flops_per_s
        assert half is not None, gpu.sku
        if gpu.bf16_flops_per_s is not None:
            assert gpu.bf16_flops_per_s == half, gpu.sku
        if gpu.tf32_flops_per_s is not None:
            assert gpu.tf32_flops_per_s <= half, gpu.sku
        if gpu.fp8_flops_per_s is not None:
            assert gpu.fp8_flops_per_s >= half, gpu.sku
        if gpu.fp32_flops_per_s is not None and gpu.vendor == "nvidia":
            assert half >= gpu.fp32_flops_per_s, gpu.sku


def test_only_volta_and_turing_lack_bf16_and_they_lack_tf32_and_fp8_too() -> None:
    for gpu in load_catalog():
        older = gpu.architecture in ("volta", "turing")
        assert (gpu.bf16_flops_per_s is None) == older, gpu.sku
        if older:
            assert gpu.tf32_flops_per_s is None and gpu.fp8_flops_per_s is None, gpu.sku


def test_china_parts_have_their_siblings_compute_and_a_capped_link() -> None:
    """A800 = A100 and H800 = H100 silicon at the same clocks; the chip-to-chip link is what was cut."""
    rates = ("fp32_flops_per_s", "tf32_flops_per_s", "bf16_flops_per_s", "fp8_flops_per_s", "int8_ops_per_s")
    pairs = [("a800-sxm4-80gb", "a100-sxm4-80gb"), ("a800-pcie-80gb", "a100-pcie-80gb"),
             ("a800-sxm4-40gb", "a100-sxm4-40gb"), ("a800-pcie-40gb", "a100-pcie-40gb"),
             ("h800-sxm5-80gb", "h100-sxm5-80gb"), ("h800-pcie-80gb", "h100-pcie-80gb")]  # fmt: skip
    for china, sibling in pairs:
        a, b = find_gpu(china), find_gpu(sibling)
        assert all(getattr(a, r) == getattr(b, r) for r in rates), china
        assert a.memory_bytes == b.memory_bytes and a.memory_bandwidth_bytes_per_s == b.memory_bandwidth_bytes_per_s
        assert a.nvlink_bytes_per_s == 400e9 < b.nvlink_bytes_per_s  # type: ignore[operator]


def test_rtx_4090d_is_the_4090_with_fewer_sms() -> None:
    d, full = find_gpu("rtx-4090d"), find_gpu("rtx-4090")
    for field in ("fp32_flops_per_s", "bf16_flops_per_s", "fp16_acc16_flops_per_s", "fp8_flops_per_s",
                  "int8_ops_per_s"):
        assert getattr(d, field) == pytest.approx(getattr(full, field) * 114 / 128, rel=0.002), field
    assert d.memory_bytes == full.memory_bytes and d.memory_bandwidth_bytes_per_s == full.memory_bandwidth_bytes_per_s


def test_geforce_cards_have_fp16_accumulate_rate() -> None:
    for name in ("rtx-3080", "rtx-3080-ti", "rtx-3090", "rtx-4080", "rtx-4080-super", "rtx-4090", "rtx-4090d",
                 "rtx-5080", "rtx-5090"):
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


@pytest.mark.parametrize("name", ["v100", "v100-pcie-32gb", "t4"])
def test_peak_flops_without_bf16_names_fp16_and_never_invents_a_rate(name: str) -> None:
    gpu = find_gpu(name)
    with pytest.raises(GpuscoutError) as caught:
        peak_flops_per_s(gpu, "bf16")
    assert "use fp16" in caught.value.fix and "bf16" not in caught.value.fix
    assert gpu.name not in caught.value.why  # screens share one note for every GPU it applies to
    assert peak_flops_per_s(gpu, "float16") == gpu.fp16_flops_per_s
    for dtype in ("tf32", "fp8"):
        with pytest.raises(GpuscoutError):
            peak_flops_per_s(gpu, dtype)


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


# --- the whole catalog through the commands a user runs ---------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"}, check=False)


def test_gpus_command_lists_every_sku_legibly_at_80_columns() -> None:
    done = _run("gpus")
    assert done.returncode == 0, done.stderr
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    for gpu in load_catalog():
        assert gpu.sku in done.stdout, gpu.sku
    text = " ".join(done.stdout.split())  # footnotes wrap at 80 columns
    assert "Tesla V100 SXM2 32GB: NVLink2 300 GB/s; PCIe 3.0 x16 (32 GB/s); no bf16, fp16 125 TFLOP/s" in text


def test_estimate_command_screens_every_gpu_and_says_why_a_time_is_missing() -> None:
    done = _run("estimate")  # the built-in default job: bf16 QLoRA
    assert done.returncode == 0, done.stderr
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    rows = {line.split("│")[1].strip() for line in done.stdout.splitlines() if line.startswith("│")}
    assert {gpu.sku for gpu in load_catalog()} <= rows
    assert "No job time: bf16 needs tensor cores of sm80+" in " ".join(done.stdout.split())


@pytest.mark.parametrize("job", sorted(p.name for p in EXAMPLES.glob("*.toml") if not p.name.startswith("prices")))
def test_every_example_job_estimates_on_every_gpu(job: str) -> None:
    """Every GPU gets a verdict; a missing job time always comes with its reason, and only then."""
    from gpuscout import estimate

    report = estimate(EXAMPLES / job)
    verdicts = {v.gpu_sku: v for v in report.screening.verdicts}
    assert set(verdicts) == {gpu.sku for gpu in load_catalog()}
    for sku, v in verdicts.items():
        assert (v.speed is None) == (v.speed_note is not None), sku
        if v.speed is not None:
            assert v.speed.job_s > 0, sku
    for sku in ("v100-sxm2-16gb", "t4"):
        note = verdicts[sku].speed_note
        assert note is None or "fp16" in note, sku


def test_gh200_job_time_is_missing_only_across_gpus_and_says_why() -> None:
    from gpuscout import estimate

    one = estimate(EXAMPLES / "llama3-8b-qlora.toml", gpus=["gh200"]).screening.verdicts[0]
    assert one.speed is not None
    eight = estimate(EXAMPLES / "llama3-8b-full-zero3.toml", gpus=["gh200"]).screening.verdicts[0]
    assert eight.speed is None
    assert eight.speed_note is not None and "NVLink-C2C" in eight.speed_note


def test_fp16_jobs_get_a_time_on_gpus_without_bf16() -> None:
    """The fixes the note gives work: the same job in fp16 mixed precision (and SDPA in place of
    FlashAttention 2, which the example asks for) is timed on a V100 and a T4."""
    from gpuscout import estimate
    from gpuscout.api import load_job
    from gpuscout.workload.job import FinetuneJob

    job = load_job(EXAMPLES / "llama3-8b-qlora.toml")
    assert isinstance(job, FinetuneJob) and job.precision != "fp16_mixed"
    for v in estimate(job, gpus=["v100-sxm2-32gb", "t4"]).screening.verdicts:
        assert v.speed is None and v.speed_note is not None and 'precision = "fp16_mixed"' in v.speed_note
        fixes = {k: val for f in v.compat for k, val in f.fix_change.items()}
        assert fixes == {"precision": "fp16_mixed", "attention": "sdpa"}, v.gpu_sku
        (fixed,) = estimate(job.model_copy(update=fixes), gpus=[v.gpu_sku]).screening.verdicts
        assert fixed.speed is not None and fixed.speed.job_s > 0 and fixed.speed_note is None, v.gpu_sku
        assert fixed.compat == (), v.gpu_sku


def test_pick_excludes_an_untimeable_offer_with_its_reason_and_ranks_the_rest(tmp_path: Path) -> None:
    """A V100 offer for a bf16 job, or two GH200s, must not stop the ranking: each is excluded, saying why."""
    from gpuscout import pick

    def offer(oid: str, gpu: str, count: int) -> str:
        return (f'[[offer]]\nid = "{oid}"\nprovider = "Test"\ngpu = "{gpu}"\ngpu_count = {count}\nprice = 1.0\n'
                'price_basis = "gpu"\ncurrency = "USD"\nobserved_at = 2026-11-30\nsource = "test"\n\n')

    sheet = tmp_path / "offers.toml"
    sheet.write_text(offer("v100", "Tesla V100-SXM2-32GB", 1) + offer("gh200x2", "NVIDIA GH200 480GB", 2)
                     + offer("a800", "A800-80G", 1) + offer("h800", "NVIDIA H800", 1))
    rows = {row.offer_id: row for row in pick(offers=sheet).pick.rows}
    assert rows["a800"].excluded is None and rows["h800"].excluded is None
    assert rows["v100"].excluded is not None and 'precision = "fp16_mixed"' in rows["v100"].excluded
    assert rows["gh200x2"].excluded is not None and "NVLink-C2C" in rows["gh200x2"].excluded


def test_fp16_era_gpus_time_int4_serving_and_fp16_images() -> None:
    """On a T4 or V100 weight-only int4 serving runs fp16 math and an fp32 VAE runs at the FP32 rate
    (no TF32 there): both get a time; bf16 weights do not, and say why."""
    from gpuscout import estimate
    from gpuscout.api import load_job
    from gpuscout.workload.job import InferenceJob

    serving = load_job(EXAMPLES / "llama3-70b-serving-8k.toml")
    assert isinstance(serving, InferenceJob) and serving.weights == "bf16"
    int4 = serving.model_copy(update={"weights": "int4", "tensor_parallel": 1})
    for v in estimate(int4, gpus=["t4", "v100-32gb"]).screening.verdicts:
        assert v.speed is not None and v.speed_note is None, v.gpu_sku
        assert "compute dtype fp16" in " ".join(v.speed.notes), v.gpu_sku
    (bf16,) = estimate(serving.model_copy(update={"tensor_parallel": 1}), gpus=["t4"]).screening.verdicts
    assert bf16.speed is None and bf16.speed_note is not None and "bf16" in bf16.speed_note
    for v in estimate(EXAMPLES / "sdxl-1024.toml", gpus=["t4", "v100"]).screening.verdicts:
        assert v.speed is not None and v.speed.job_s > 0, v.gpu_sku
