"""The GPU catalog: datasheet facts per SKU, read from the bundled `gpus.toml`.

Hardware facts are data, not code (docs/design.md §4): every number lives in `gpus.toml` next to the
source it came from, so a wrong figure is fixed in one place and reviewed against its citation.
This module only loads, validates and looks rows up. It is on the CLI's fast path, so it imports
nothing heavier than pydantic and the standard library.
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from gpuscout.errors import GpuscoutError, SpecError, UnknownNameError
from gpuscout.frozen import Frozen

Vendor = Literal["nvidia", "amd"]
Architecture = Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna3"]

_Positive = Annotated[float, Field(gt=0)]
_Name = Annotated[str, Field(min_length=1)]

# Fields that describe the row rather than the hardware; `verify` may not name them.
_META_FIELDS = frozenset({"sku", "name", "vendor", "aliases", "notes", "sources", "verify"})


class Gpu(Frozen):
    """One GPU SKU as its vendor specifies it. SI units; tensor rates are dense peaks.

    A rate of None means the format is unsupported or the vendor publishes no figure; see
    `gpus.toml` for which, and `verify` for figures not yet confirmed against a vendor document.
    """


    sku: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    name: _Name
    vendor: Vendor
    architecture: Architecture
    # NVIDIA only: CUDA compute capability, "major.minor" ("8.0" is sm80). Kernels state what they need in it.
    compute_capability: str | None = Field(default=None, pattern=r"^[0-9]{1,2}\.[0-9]$")
    aliases: tuple[_Name, ...] = ()

    memory_bytes: int = Field(gt=0)
    memory_visible_bytes: int | None = Field(default=None, gt=0)
    memory_type: _Name
    memory_bandwidth_bytes_per_s: _Positive

    fp32_flops_per_s: _Positive | None = None
    tf32_flops_per_s: _Positive | None = None
    bf16_flops_per_s: _Positive | None = None
    fp16_flops_per_s: _Positive | None = None
    fp8_flops_per_s: _Positive | None = None
    int8_ops_per_s: _Positive | None = None
    # GeForce only: FP16 tensor rate with FP16 accumulate (the fp16 field holds FP32 accumulate).
    fp16_acc16_flops_per_s: _Positive | None = None
    datasheet_is_sparse: bool

    interconnect: _Name
    nvlink_bytes_per_s: _Positive | None = None
    pcie_gen: int | None = Field(default=None, ge=1)
    pcie_bytes_per_s: _Positive | None = None
    # False where the driver refuses direct GPU-to-GPU copies (GeForce): collectives go through host memory.
    peer_to_peer: bool = True
    tdp_w: _Positive | None = None

    notes: str = ""
    sources: tuple[_Name, ...] = Field(min_length=1)
    verify: tuple[str, ...] = ()

    @field_validator("verify")
    @classmethod
    def _verify_names_data_fields(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """A typo in `verify` would silently hide an unconfirmed figure, so names must be fields."""
        unknown = [name for name in value if name not in cls.model_fields or name in _META_FIELDS]
        if unknown:
            raise ValueError(f"verify names unknown data fields: {unknown}")
        return value

    @property
    def sm(self) -> int | None:
        """The compute capability as one number, 8.0 -> 80 and 12.0 -> 120; None for AMD."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)


# Precision name -> Gpu field with its peak rate. Spellings from torch/numpy map to the same rows.
_PEAK_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "fp32": "fp32_flops_per_s",
        "tf32": "tf32_flops_per_s",
        "bf16": "bf16_flops_per_s",
        "fp16": "fp16_flops_per_s",
        "fp8": "fp8_flops_per_s",
        "int8": "int8_ops_per_s",
    }
)
_DTYPE_SYNONYMS: Mapping[str, str] = MappingProxyType(
    {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
)

# Prefixes that nvidia-smi / rocm-smi put in front of product names ("NVIDIA GeForce RTX 4090",
# "Tesla T4", "AMD Instinct MI300X"); dropping them lets detected device names resolve directly.
_VENDOR_PREFIXES = ("nvidia", "geforce", "tesla", "amd", "instinct")
_SEPARATORS = re.compile(r"[\s_\-]+")


def normalise_name(name: str) -> str:
    """Lookup key for a GPU name: case, spaces, '_' and '-' and a vendor prefix do not matter.

    "H100-80GB-SXM5", "h100 80gb sxm5" and "NVIDIA H100_80GB_SXM5" all give "h10080gbsxm5";
    "Tesla V100-SXM2-32GB" gives "v100sxm232gb".
    """
    key = _SEPARATORS.sub("", name.lower())
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                stripped = True
    return key


@functools.cache
def _read_document() -> Mapping[str, Any]:
    """The parsed `gpus.toml`, read once. importlib.resources works from a wheel or a zip too."""
    text = resources.files("gpuscout.hardware").joinpath("gpus.toml").read_text(encoding="utf-8")
    return MappingProxyType(tomllib.loads(text))


@functools.cache
def load_catalog() -> tuple[Gpu, ...]:
    """Every GPU in the bundled catalog, validated, in file order. Cached: the file never changes.

    A malformed bundled catalog is a bug in gpuscout, not a user error, so it raises ValueError
    (pydantic's ValidationError is one) and keeps its traceback.
    """
    return parse_catalog(_read_document())


@functools.cache
def load_sources() -> Mapping[str, str]:
    """Source id ("S1", "SMI2", …) -> citation text, from the catalog's `[sources]` table."""
    return MappingProxyType(dict(_read_document()["sources"]))


def parse_catalog(document: Mapping[str, Any]) -> tuple[Gpu, ...]:
    """Validate a catalog document: each row, unique SKUs and names, and that cited sources exist."""
    gpus = tuple(Gpu.model_validate(row) for row in document.get("gpu", []))
    if not gpus:
        raise ValueError("The GPU catalog has no [[gpu]] rows.")
    _check_names_unique(gpus)
    _check_sources_exist(gpus, document.get("sources", {}))
    return gpus


def _check_names_unique(gpus: tuple[Gpu, ...]) -> None:
    """Two SKUs answering to one name would make lookups depend on file order, so forbid it."""
    skus = [gpu.sku for gpu in gpus]
    duplicates = sorted({sku for sku in skus if skus.count(sku) > 1})
    if duplicates:
        raise ValueError(f"Duplicate GPU skus in the catalog: {duplicates}")
    owner: dict[str, str] = {}
    for gpu in gpus:
        for name in _names_of(gpu):
            key = normalise_name(name)
            if not key:
                raise ValueError(f"GPU {gpu.sku!r} has an empty alias {name!r}.")
            if owner.setdefault(key, gpu.sku) != gpu.sku:
                raise ValueError(f"Alias {name!r} is claimed by both {owner[key]!r} and {gpu.sku!r}.")


def _check_sources_exist(gpus: Iterable[Gpu], sources: Mapping[str, Any]) -> None:
    """Every number must trace to a citation; a dangling source id breaks that chain."""
    for gpu in gpus:
        missing = [source for source in gpu.sources if source not in sources]
        if missing:
            raise ValueError(f"GPU {gpu.sku!r} cites sources missing from [sources]: {missing}")


def _names_of(gpu: Gpu) -> tuple[str, ...]:
    """All spellings a GPU answers to: its SKU first, then its aliases."""
    return (gpu.sku, *gpu.aliases)


@functools.cache
def _name_index() -> Mapping[str, tuple[str, Gpu]]:
    """Normalised name -> (the spelling as written in the catalog, its GPU)."""
    index: dict[str, tuple[str, Gpu]] = {}
    for gpu in load_catalog():
        for name in _names_of(gpu):
            index.setdefault(normalise_name(name), (name, gpu))
    return MappingProxyType(index)


def find_gpu(name: str) -> Gpu:
    """The GPU whose SKU or alias matches `name` (see `normalise_name`), or UnknownNameError."""
    gpu = lookup_gpu(name)
    if gpu is None:
        raise _unknown_gpu(name)
    return gpu


def lookup_gpu(name: str) -> Gpu | None:
    """`find_gpu` without the did-you-mean search, for bulk imports where most misses are expected."""
    if len(name) > _MAX_NAME:
        return None
    entry = _name_index().get(normalise_name(name))
    return None if entry is None else entry[1]


_MAX_NAME = 255  # no catalog name is longer; difflib on a megabyte-long name would take seconds


def _suggestions(name: str, limit: int = 3) -> list[str]:
    """Up to `limit` catalog spellings close to `name`, at most one per GPU, best match first."""
    index = _name_index()
    if len(name) > _MAX_NAME:
        return []
    close = difflib.get_close_matches(normalise_name(name), list(index), n=len(index), cutoff=0.6)
    picked: dict[str, str] = {}
    for key in close:
        spelling, gpu = index[key]
        picked.setdefault(gpu.sku, spelling)
    return list(picked.values())[:limit]


def _unknown_gpu(name: str) -> UnknownNameError:
    """The three-part error for a GPU name that is not in the catalog."""
    suggestions = _suggestions(name)
    hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
    shown = repr(name) if len(name) <= 80 else repr(name[:77]) + "..."  # repr escapes control characters
    return UnknownNameError(
        f"Unknown GPU {shown}.{hint}",
        "GPU names are matched against the SKUs and aliases in gpuscout's catalog "
        "(case, spaces, '-' and '_' are ignored).",
        "run `gpuscout gpus` to list them.",
    )


def peak_flops_per_s(gpu: Gpu, dtype: str) -> float:
    """Dense peak rate of `gpu` for `dtype` (fp32, tf32, bf16, fp16, fp8, int8), in ops per second.

    A peak is an upper bound for roofline estimates, never a runtime (docs/gpus.md §2 notes).
    Raises instead of returning 0 or a fallback: silently using another GPU's or dtype's figure is
    how code tables end up overstating throughput.
    """
    key = _DTYPE_SYNONYMS.get(dtype.strip().lower(), dtype.strip().lower())
    field = _PEAK_FIELDS.get(key)
    if field is None:
        raise SpecError(
            f"Unknown precision {dtype!r}.",
            "The catalog holds peak rates for fp32, tf32, bf16, fp16, fp8 and int8 only; "
            "int4, fp4 and fp64 are not catalogued.",
            f"use one of: {', '.join(_PEAK_FIELDS)}.",
        )
    value: float | None = getattr(gpu, field)
    if value is None:
        raise _no_peak(gpu, key)
    return value


def _no_peak(gpu: Gpu, dtype: str) -> GpuscoutError:
    """Error for a dtype the GPU cannot run on tensor cores, or whose peak is unpublished.

    The fix names the dtypes this GPU does have: a V100 or T4 has fp16 but no bf16, so "use bf16"
    would send the user from one missing rate to another.
    """
    if dtype == "fp32":
        why = f"{gpu.vendor.upper()} publishes no FP32 figure for the {gpu.name}."
    else:
        # No GPU name here: screens print the why as a note shared by every GPU it applies to.
        why = f"This GPU has no tensor-core path for {dtype} (or its vendor publishes no figure)."
    have = available_dtypes(gpu)
    instead = f"use {' or '.join(have)} on this GPU (its catalogued tensor rates)" if have else "choose another GPU"
    fix = f"{instead}, or benchmark the GPU to measure it."
    return GpuscoutError(f"No peak {dtype} rate for {gpu.name}.", why, fix)


def available_dtypes(gpu: Gpu) -> tuple[str, ...]:
    """The 16-bit training precisions (bf16, fp16) this GPU has a catalogued tensor rate for, bf16 first."""
    return tuple(d for d in ("bf16", "fp16") if getattr(gpu, _PEAK_FIELDS[d]) is not None)


def usable_memory_bytes(gpu: Gpu) -> int:
    """Device memory a job can count on before framework overhead, in bytes.

    The nameplate is in decimal GB, while nvidia-smi reports the visible total in MiB after the
    driver's reservations (docs/gpus.md §2: vendor "GB" ≈ GiB visible less reserved memory; e.g. H100
    SXM 80 GB shows 81,559 MiB). Fit checks start from the visible figure when the catalog has one,
    else from the nameplate.
    """
    return gpu.memory_visible_bytes if gpu.memory_visible_bytes is not None else gpu.memory_bytes
