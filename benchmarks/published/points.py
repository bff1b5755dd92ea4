"""Published measurement points (validation/published/*.toml): the format, its validation, loading.

One TOML file per category, each a list of `[[point]]` tables; the format is described in
validation/published/README.md. A malformed point is a `PointFormatError` that names the file and
the point's id, never a traceback: the files are written by hand and read by people.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES = (
    "weights", "kv_capacity", "training_peak", "inference_peak", "image_peak", "video_peak", "max_seq_len", "speed",
)

# Unit of each measured quantity. Memory quantities are in GiB (2**30), GB (1e9) or MiB (2**20).
MEMORY_STATS = ("peak_allocated", "peak_reserved", "nvidia_smi", "activation", "cuda_graph", "weights", "kv",
                "profile_peak")
MEMORY_UNITS = {"gib": 2.0**30, "gb": 1e9, "mib": 2.0**20}
COUNT_QUANTITIES = ("kv_tokens", "kv_blocks", "max_concurrency", "max_seq_len_tokens")
SPEED_QUANTITIES = (
    "step_s", "tokens_per_s", "samples_per_s", "ttft_s", "tpot_s", "output_tokens_per_s", "s_per_image", "s_per_it",
    "s_per_clip",
)
QUANTITIES = (
    *(f"{stat}_{unit}" for stat in MEMORY_STATS for unit in MEMORY_UNITS), *COUNT_QUANTITIES, *SPEED_QUANTITIES,
)

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "id": str, "category": str, "gpu": str, "quantity": str, "measured": (int, float), "what": str,
    "source": str, "quote": str, "conditions": str, "certain": bool, "notes": str, "job": dict,
}
# informs: the gpuscout constants set from this point (it is in-sample for them; the report says so).
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "oom_seq_len_tokens": int, "gpus": int, "framework": str, "informs": list,
}
KEBAB = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")
MAX_QUOTE = 200
INEXPRESSIBLE = "inexpressible:"


class PointFormatError(ValueError):
    """A point that does not follow the format: says which file, which point and what is wrong."""

    def __init__(self, path: Path | str, point_id: str, problem: str) -> None:
        self.path, self.point_id, self.problem = str(path), point_id, problem
        super().__init__(f"{path}: point {point_id!r}: {problem}")


@dataclass(frozen=True)
class Point:
    id: str
    category: str
    gpu: str
    quantity: str
    measured: float
    what: str
    source: str
    quote: str
    conditions: str
    certain: bool
    notes: str
    job: dict[str, Any]
    file: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def inexpressible_note(self) -> str | None:
        """The setting the point's author says gpuscout cannot express, if the notes name one."""
        at = self.notes.lower().find(INEXPRESSIBLE)
        if at < 0:
            return None
        said = re.split(r"\.(?:\s|$)", self.notes[at + len(INEXPRESSIBLE):], maxsplit=1)[0].strip()
        return said or "(not said)"

    def to_wire(self) -> dict[str, Any]:
        """What the gpuscout side needs, as plain JSON (it may run in another interpreter)."""
        return {"id": self.id, "category": self.category, "gpu": self.gpu, "quantity": self.quantity,
                "measured": self.measured, "conditions": self.conditions, "job": self.job,
                "framework": self.extra.get("framework")}


def quantity_unit(quantity: str) -> str:
    """The unit a quantity's name gives: 'GiB', 'GB', 'MiB', 'tokens', 's', 'tokens/s' …"""
    for suffix, label in (("_gib", "GiB"), ("_gb", "GB"), ("_mib", "MiB")):
        if quantity.endswith(suffix):
            return label
    return {"kv_tokens": "tokens", "kv_blocks": "blocks", "max_concurrency": "×", "max_seq_len_tokens": "tokens",
            "tokens_per_s": "tok/s", "samples_per_s": "samples/s", "output_tokens_per_s": "tok/s",
            "s_per_it": "s/it", "s_per_image": "s/image", "s_per_clip": "s/clip"}.get(quantity, "s")


def is_memory(quantity: str) -> bool:
    return any(quantity.endswith(f"_{unit}") for unit in MEMORY_UNITS)


def parse_point(raw: Any, path: Path | str, category: str) -> Point:
    """Validate one `[[point]]` table read from `path` (whose stem is `category`)."""
    point_id = str(raw.get("id", "(no id)")) if isinstance(raw, dict) else "(not a table)"
    if not isinstance(raw, dict):
        raise PointFormatError(path, point_id, "a [[point]] entry must be a table")

    def bad(problem: str) -> PointFormatError:
        return PointFormatError(path, point_id, problem)

    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise bad(f"missing key(s): {', '.join(missing)}")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise bad(f"unknown key(s): {', '.join(unknown)} (extra keys allowed: {', '.join(OPTIONAL)})")
    for key, kind in (*REQUIRED.items(), *OPTIONAL.items()):
        value = raw.get(key)
        if key in raw and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise bad(f"{key} must be {names}, got {value!r}")
    if not KEBAB.match(raw["id"]):
        raise bad("id must be kebab-case: lower-case letters, digits and '-'")
    if raw["category"] != category:
        raise bad(f"category {raw['category']!r} differs from the file's ({category!r})")
    if raw["quantity"] not in QUANTITIES:
        raise bad(f"unknown quantity {raw['quantity']!r}; one of: {', '.join(QUANTITIES)}")
    if not raw["measured"] > 0:
        raise bad(f"measured must be positive, got {raw['measured']!r}")
    if len(raw["quote"]) > MAX_QUOTE:
        raise bad(f"quote is {len(raw['quote'])} characters; at most {MAX_QUOTE}")
    if not raw["source"].strip() or not raw["quote"].strip():
        raise bad("source and quote must not be empty: every point cites where its number comes from")
    if raw["gpu"] == "" and category != "weights":
        raise bad("gpu is empty; only weights points may leave it empty")
    if "kind" not in raw["job"]:
        raise bad("[point.job] has no kind (finetune, inference or image)")
    if not all(isinstance(x, str) and x.strip() for x in raw.get("informs", [])):
        raise bad("informs must list the constants set from this point, as non-empty strings")
    extra = {key: raw[key] for key in OPTIONAL if key in raw}
    return Point(
        id=raw["id"], category=category, gpu=raw["gpu"], quantity=raw["quantity"], measured=float(raw["measured"]),
        what=raw["what"], source=raw["source"], quote=raw["quote"], conditions=raw["conditions"],
        certain=raw["certain"], notes=raw["notes"], job=dict(raw["job"]), file=str(path), extra=extra,
    )


def read_file(path: Path) -> list[Any]:
    """The raw `[[point]]` tables of one category file; a file-level problem raises `PointFormatError`."""
    if path.stem not in CATEGORIES:
        raise PointFormatError(path, "(file)", f"unknown category file; expected one of "
                               f"{', '.join(c + '.toml' for c in CATEGORIES)}")
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PointFormatError(path, "(file)", f"cannot be read as TOML: {exc}") from None
    unknown = sorted(set(document) - {"point"})
    if unknown:
        raise PointFormatError(path, "(file)", f"unknown top-level key(s): {', '.join(unknown)} (only [[point]])")
    raw_points = document.get("point", [])
    if not isinstance(raw_points, list):
        raise PointFormatError(path, "(file)", "`point` must be an array of tables ([[point]])")
    return raw_points


def load_points(folder: Path) -> tuple[list[Point], list[PointFormatError]]:
    """All well-formed points of every `*.toml` in `folder`, and every format error (each point is
    checked, so a reader sees every problem at once). Ids must be unique across files."""
    points: list[Point] = []
    errors: list[PointFormatError] = []
    for path in sorted(folder.glob("*.toml")):
        try:
            raw_points = read_file(path)
        except PointFormatError as exc:
            errors.append(exc)
            continue
        for raw in raw_points:
            try:
                points.append(parse_point(raw, path, path.stem))
            except PointFormatError as exc:
                errors.append(exc)
    seen: dict[str, str] = {}
    for point in points:
        if point.id in seen:
            errors.append(PointFormatError(point.file, point.id, f"id also used in {seen[point.id]}"))
        seen.setdefault(point.id, point.file)
    return points, errors
