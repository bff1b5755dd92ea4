"""Import a SkyPilot catalog (`vms.csv`) as gpuscout offers.

SkyPilot keeps one `vms.csv` per cloud (docs/cost.md §7.1): whole-instance on-demand
`Price` and `SpotPrice` in USD per hour, per region and zone, with column order that differs by
cloud. The file carries no date, so the caller says when it was observed (the catalog commit date,
or the day it was downloaded).

Mapping rules, in order (SkyPilot's names are not gpuscout SKUs; "A100" alone is 40 GB there):

- "A100" / "A100-40GB" -> A100 SXM4 40GB, unless the row's per-GPU memory is >= 60 GiB; "A100-80GB"
  -> A100 SXM4 80GB. Either becomes the PCIe part when the instance type says "pcie" or is an
  Azure NC…ads_A100_v4 (docs/cost.md §7.2 / docs/prices.md §1.3: those are PCIe).
- "H100", "H100-SXM", "H100-MEGA", "H100-80GB" -> H100 SXM5 80GB; the PCIe part when the instance
  type says "pcie"; the NVL 94GB part when the name or instance says "nvl", the memory is >= 90 GiB,
  or it is an Azure NC…H100_v5 (docs/prices.md §1.3: NC-H100-v5 is H100 NVL).
- Anything else goes through the GPU catalog's names and aliases ("L40S", "L4", "A10G", "RTX4090",
  "A6000", "H200", "B200", …). Names the catalog lacks (K80, TPUs, Trainium…) are skipped
  and reported; so are fractional counts (a slice of a GPU is not the GPU the catalog describes).
- GCP lists accelerator-optimized host VMs (a2/a3/g2) without their GPUs and prices the GPUs in
  separate rows with an empty InstanceType ("attachable", skypilot-catalog #31). SkyPilot's own cost
  is host $/h + accelerator $/h (docs/cost.md §7.3), so this importer combines a host row with the GPU
  row of the same zone, using the machine-type -> GPU table from Google's machine-type docs below.
  GPU rows that no host in the file matches are skipped with that reason, never taken for machines.
"""

from __future__ import annotations

import ast
import csv
import functools
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.billing_rules import UNKNOWN_RULES_NOTE, RulesTable, billing_rules
from gpuscout.hardware.catalog import lookup_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.units import GB, GIB
from gpuscout.userfile import MAX_CATALOG_BYTES, printable, read_user_text

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region")
OPTIONAL_COLUMNS = ("GpuInfo", "SpotPrice", "AvailabilityZone", "Arch")

# GCP machine type -> (SkyPilot accelerator name, GPUs per VM). Source: Google Cloud "GPU machine
# types" docs (A2 Standard/Ultra, A3 High/Edge/Mega/Ultra, G2); GPU count is the "-Ng" suffix.
_GCP_HOSTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^a2-(?:highgpu|megagpu)-(\d+)g$"), "A100"),
    (re.compile(r"^a2-ultragpu-(\d+)g$"), "A100-80GB"),
    (re.compile(r"^a3-(?:highgpu|edgegpu)-(\d+)g(?:-nolssd)?$"), "H100"),
    (re.compile(r"^a3-megagpu-(\d+)g$"), "H100-MEGA"),
    (re.compile(r"^a3-ultragpu-(\d+)g$"), "H200"),
)
_G2_L4_COUNT: Mapping[str, int] = {
    "g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
    "g2-standard-32": 1, "g2-standard-24": 2, "g2-standard-48": 4, "g2-standard-96": 8,
}  # fmt: skip

_A100_80GB_MIN_MIB = 60 * 1024  # between the 40 GB and 80 GB parts
_H100_NVL_MIN_MIB = 90 * 1024  # H100 NVL shows 94 GB; SXM/PCIe 80 GB
# GpuInfo is a Python literal of ~200 characters; a longer one is not worth ast.literal_eval's time.
_MAX_GPU_INFO = 10_000
_MAX_GPUS = 1024  # Offer.gpu_count's bound


class SkippedRow(Frozen):
    """A catalog row that did not become an offer, and why."""


    line: int
    accelerator: str
    reason: str


class SkypilotImport(Frozen):
    """What an import produced: the offers, and every row it skipped with the reason."""


    path: str
    cloud: str
    offers: tuple[Offer, ...]
    skipped: tuple[SkippedRow, ...]


UNKNOWN_GPU = "GPU not in gpuscout's catalog"
FRACTIONAL = "fractional GPU count"
NO_GPU = "no GPU"
UNMATCHED_ATTACHABLE = "attachable GPU price (empty InstanceType) with no matching host VM row"
HOST_WITHOUT_GPU = "GCP host VM whose attachable GPU price row is missing"


def import_skypilot_catalog(path: Path, *, cloud: str, observed_at: date, include_spot: bool = True,
                            table: RulesTable | None = None) -> SkypilotImport:
    """Read a SkyPilot `vms.csv` into offers (on-demand, plus spot where SpotPrice is given), under the
    cloud's billing rules from `table` (gpuscout's billing rules table by default)."""
    cloud = cloud.strip().lower()
    table = table or billing_rules()
    rows = list(_read_rows(path))
    offers: list[Offer] = []
    skipped: list[SkippedRow] = []
    attachable = {_attach_key(r): r for _, r in rows if _is_attachable(r)}
    used_attachable: set[tuple[str, str, str, str]] = set()
    seen_ids: set[str] = set()
    for line, row in rows:
        if _is_attachable(row):
            continue
        gpu_row: Mapping[str, str] = row
        host_price: tuple[float, float | None] | None = None
        if cloud == "gcp" and not row["AcceleratorName"] and _gcp_host_gpus(row["InstanceType"])[0]:
            combined = _gcp_gpu_row(row, attachable)
            if combined is None:
                accelerator = _gcp_host_gpus(row["InstanceType"])[0]
                skipped.append(SkippedRow(line=line, accelerator=accelerator, reason=HOST_WITHOUT_GPU))
                continue
            gpu_row, key = combined
            used_attachable.add(key)
            host_price = (_number(row["Price"]) or 0.0, _number(row["SpotPrice"]))
        made, reason = _offers_for_row(row, gpu_row, host_price, cloud, path, observed_at, include_spot, table)
        if reason is not None:
            skipped.append(SkippedRow(line=line, accelerator=gpu_row["AcceleratorName"], reason=reason))
            continue
        for offer in made:
            if offer.id in seen_ids:
                skipped.append(SkippedRow(line=line, accelerator=gpu_row["AcceleratorName"], reason="duplicate row"))
                break
            seen_ids.add(offer.id)
            offers.append(offer)
    skipped.extend(_unused_attachable(rows, used_attachable))
    return SkypilotImport(path=str(path), cloud=cloud, offers=tuple(offers), skipped=tuple(skipped))


def describe_import(result: SkypilotImport) -> str:
    """One line for a CLI: "imported N offers, skipped M rows (unknown GPUs: K80 ×3, Inferentia2; …)"."""
    line = f"imported {len(result.offers)} offers, skipped {len(result.skipped)} rows"
    unknown = Counter(row.accelerator for row in result.skipped if row.reason == UNKNOWN_GPU)
    others = Counter(row.reason for row in result.skipped if row.reason != UNKNOWN_GPU)
    parts = []
    if unknown:
        names = ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in sorted(unknown.items()))
        parts.append(f"unknown GPUs: {names}")
    parts.extend(f"{reason}: {n}" for reason, n in sorted(others.items()))
    return f"{line} ({'; '.join(parts)})" if parts else line


def _read_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row with every known column present as a stripped string)."""
    text = read_user_text(path, "SkyPilot catalog", "Point at a vms.csv, e.g. ~/.sky/catalogs/v7/aws/vms.csv.",
                          max_bytes=MAX_CATALOG_BYTES)
    reader = csv.reader(text.splitlines())
    try:
        header = [name.strip() for name in next(reader, [])]
        # v7/v8 spell the column GpuInfo on most clouds and GPUInfo on some.
        columns = {("GpuInfo" if name == "GPUInfo" else name): i for i, name in enumerate(header)}
        _check_columns(path, header, columns)
        for fields in reader:
            if not any(field.strip() for field in fields):
                continue
            yield reader.line_num, _row(fields, columns, len(header))
    except csv.Error as exc:
        raise SpecError(
            f"{path} is not a readable CSV file (line {reader.line_num}): {printable(str(exc))}.",
            "The CSV parser stopped at that line.",
            "Fix the quoting at that line, or download the catalog again.",
        ) from None


def _check_columns(path: Path, header: list[str], columns: Mapping[str, int]) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise SpecError(
            f"{path} is not a SkyPilot vms.csv: it lacks the columns {', '.join(missing)}.",
            f"Expected the v7/v8 columns {', '.join(REQUIRED_COLUMNS)} (plus optional "
            f"{', '.join(OPTIONAL_COLUMNS)}); found {printable(', '.join(header)) or 'no header'}.",
            "Use a catalog from ~/.sky/catalogs/v7|v8/<cloud>/vms.csv or skypilot-org/skypilot-catalog.",
        )


def _row(fields: list[str], columns: Mapping[str, int], width: int) -> dict[str, str]:
    row = {name: fields[i].strip() if i < len(fields) else "" for name, i in columns.items()}
    for name in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS):
        row.setdefault(name, "")
    row["_width_ok"] = "1" if len(fields) == width else ""
    return row


def _is_attachable(row: Mapping[str, str]) -> bool:
    return not row["InstanceType"] and bool(row["AcceleratorName"])


def _attach_key(row: Mapping[str, str]) -> tuple[str, str, str, str]:
    count = _number(row["AcceleratorCount"])
    return (row["Region"], row["AvailabilityZone"], row["AcceleratorName"], f"{count:g}" if count else "")


def _gcp_gpu_row(
    host: Mapping[str, str], attachable: Mapping[tuple[str, str, str, str], dict[str, str]]
) -> tuple[dict[str, str], tuple[str, str, str, str]] | None:
    """The attachable GPU row in the host's zone for a GCP accelerator-optimized machine type.

    A row for the host's exact GPU count is used as is; otherwise a single-GPU row is scaled by the
    count (GPU prices are linear in the count on GCP).
    """
    accelerator, count = _gcp_host_gpus(host["InstanceType"])
    place = (host["Region"], host["AvailabilityZone"], accelerator)
    exact, single = (*place, f"{count:g}"), (*place, "1")
    if exact in attachable:
        return attachable[exact], exact
    if single not in attachable:
        return None
    row = attachable[single]
    scaled = {
        **row,
        "AcceleratorCount": str(count),
        "Price": _scaled(row["Price"], count),
        "SpotPrice": _scaled(row["SpotPrice"], count),
    }
    return scaled, single


def _scaled(text: str, factor: int) -> str:
    value = _number(text)
    return "" if value is None else repr(value * factor)


def _gcp_host_gpus(instance_type: str) -> tuple[str, int]:
    if instance_type in _G2_L4_COUNT:
        return "L4", _G2_L4_COUNT[instance_type]
    for pattern, accelerator in _GCP_HOSTS:
        match = pattern.match(instance_type)
        if match:
            return accelerator, int(match.group(1))
    return "", 0


def _unused_attachable(
    rows: list[tuple[int, dict[str, str]]], used: set[tuple[str, str, str, str]]
) -> list[SkippedRow]:
    skipped = []
    for line, row in rows:
        if _is_attachable(row) and _attach_key(row) not in used:
            known = map_gpu(row["AcceleratorName"], "", _memory_mib(row["GpuInfo"])) is not None
            reason = UNMATCHED_ATTACHABLE if known else UNKNOWN_GPU
            skipped.append(SkippedRow(line=line, accelerator=row["AcceleratorName"], reason=reason))
    return skipped


def _offers_for_row(
    row: Mapping[str, str],
    gpu_row: Mapping[str, str],
    host_price: tuple[float, float | None] | None,
    cloud: str,
    path: Path,
    observed_at: date,
    include_spot: bool,
    table: RulesTable,
) -> tuple[list[Offer], str | None]:
    """The on-demand (and spot) offers for one row, or the reason it was skipped."""
    accelerator = gpu_row["AcceleratorName"]
    if not row["_width_ok"]:
        return [], "malformed row (wrong number of fields)"
    if not accelerator:
        return [], NO_GPU
    count = _number(gpu_row["AcceleratorCount"])
    if count is None or count <= 0:
        return [], f"unreadable AcceleratorCount {_cell(gpu_row['AcceleratorCount'])}"
    if count != int(count):
        return [], FRACTIONAL
    if count > _MAX_GPUS:
        return [], f"more than {_MAX_GPUS:,} GPUs in one instance"
    sku = map_gpu(accelerator, row["InstanceType"], _memory_mib(gpu_row["GpuInfo"]))
    if sku is None:
        return [], UNKNOWN_GPU
    price, spot = _prices(gpu_row, host_price)
    if price is None or price <= 0:
        return [], f"no usable on-demand Price {_cell(gpu_row['Price'])}"
    base = _offer_fields(row, sku, int(count), cloud, path, observed_at, table, combined=host_price is not None)
    tiers: list[dict[str, Any]] = [{"price": price}]
    if include_spot and spot is not None and spot > 0:
        tiers.append({"id": base["id"] + "-spot", "tier": "spot", "price": spot})
    try:
        return [Offer.model_validate({**base, **tier}) for tier in tiers], None
    except ValidationError as exc:  # one odd row is skipped with its reason, never the whole import
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "row"
        return [], printable(f"invalid offer: {where}: {first['msg']}", 120)


def _cell(text: str) -> str:
    """A CSV cell for a skip reason: repr'd (control characters escaped) and short."""
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def _prices(gpu_row: Mapping[str, str], host: tuple[float, float | None] | None) -> tuple[float | None, float | None]:
    """On-demand and spot $/h; for a GCP host + attachable GPU, the two summed (docs/cost.md §7.3)."""
    price, spot = _number(gpu_row["Price"]), _number(gpu_row["SpotPrice"])
    if host is None:
        return price, spot
    host_price, host_spot = host
    total = None if price is None else price + host_price
    total_spot = None if spot is None or host_spot is None else spot + host_spot
    return total, total_spot


def _offer_fields(
    row: Mapping[str, str], sku: str, count: int, cloud: str, path: Path, observed_at: date, table: RulesTable, *,
    combined: bool
) -> dict[str, Any]:
    zone = row["AvailabilityZone"]
    place = zone or row["Region"]
    notes = [f"zone {zone}" if zone else "", "price in the catalog's 'Price' column, whole instance"]
    if combined:
        notes.append("GCP host VM price + attachable GPU price of the same zone, summed as SkyPilot does")
    rules = table.find(cloud)
    if rules is None or rules.assumed:  # known, sourced rules need no note; the others say what was assumed
        notes.append(UNKNOWN_RULES_NOTE if rules is None else f"{rules.terms()}: no public statement found")
    vcpus, ram_gib = _number(row["vCPUs"]), _number(row["MemoryGiB"])
    return {
        "id": _slug(f"{cloud}-{row['InstanceType']}-{place}"),
        "provider": cloud if rules is None else rules.name,
        "product": row["InstanceType"],
        "region": row["Region"],
        "gpu": sku,
        "gpu_count": count,
        "price_basis": "instance",
        "currency": "USD",
        "vcpus": vcpus if vcpus and vcpus > 0 else None,
        "ram_gb": ram_gib * GIB / GB if ram_gib and ram_gib > 0 else None,
        "observed_at": observed_at,
        "source": f"SkyPilot catalog {path.name} ({cloud})",
        "notes": "; ".join(note for note in notes if note),
        **({} if rules is None else rules.offer_fields("USD")),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._:/+-]+", "-", text).strip("-")


@functools.lru_cache(maxsize=4096)
def map_gpu(accelerator: str, instance_type: str, memory_mib: float | None) -> str | None:
    """gpuscout SKU for a SkyPilot accelerator name (rules in the module docstring), or None.

    Cached: a catalog repeats the same few names in every zone.
    """
    name = accelerator.strip().upper().replace("_", "-").replace(" ", "")
    instance = instance_type.lower()
    pcie = "pcie" in instance
    if name in ("A100", "A100-40GB", "A100-80GB"):
        big = name == "A100-80GB" or (memory_mib is not None and memory_mib >= _A100_80GB_MIN_MIB)
        pcie = pcie or re.match(r"standard_nc\d+ads_a100_v4", instance) is not None
        return f"a100-{'pcie' if pcie else 'sxm4'}-{'80' if big else '40'}gb"
    if name in ("H100", "H100-SXM", "H100-MEGA", "H100-80GB", "H100-NVL"):
        nvl = "NVL" in name or "nvl" in instance or re.match(r"standard_nc\d+\w*_h100_v5", instance) is not None
        if nvl or (memory_mib is not None and memory_mib >= _H100_NVL_MIN_MIB):
            return "h100-nvl-94gb"
        return "h100-pcie-80gb" if pcie else "h100-sxm5-80gb"
    gpu = lookup_gpu(accelerator)
    return None if gpu is None else gpu.sku


@functools.lru_cache(maxsize=1024)  # a catalog repeats one instance type's GpuInfo in every region and zone
def _memory_mib(gpu_info: str) -> float | None:
    """Per-GPU memory from GpuInfo's Gpus[0].MemoryInfo.SizeInMiB (TotalGpuMemoryInMiB is per-GPU
    in some clouds' files and per-instance in others, so it is not used)."""
    if not gpu_info or len(gpu_info) > _MAX_GPU_INFO:
        return None
    try:
        info = ast.literal_eval(gpu_info)
        size = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    except (ValueError, SyntaxError, TypeError, KeyError, IndexError, MemoryError, RecursionError):
        return None
    # A size over 2^40 MiB (an exbibyte per GPU) is garbage; checking first also keeps float() from overflowing.
    ok = isinstance(size, int | float) and not isinstance(size, bool) and 0 < size < 2**40
    return float(size) if ok else None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
