"""Leave-one-source-out: each source's points predicted with the constants fitted without that source.

A handful of gpuscout's memory constants were set by looking at published measurements that are also
validation points (their `informs` field says which). Their in-sample error says little about the next
job, so this module refits each such constant by one stated rule on every *other* source's counted
points and re-estimates the left-out source's points with the refitted values.

The constants refitted here, the points each is fitted on and the rule:

  overhead.CONV_WORKSPACE_INPUTS          counted image_peak points
  overhead.VLLM_PROFILE_FLOOR_BYTES       counted inference_peak points  } fitted together
  overhead.VLLM_SAMPLER_BYTES_PER_LOGIT   counted inference_peak points  }

  Rule: the grid value with the least sum of |estimate ÷ measured − 1| (least absolute relative
  error, a median-type fit that one wild point cannot drag); two constants fitted together by
  coordinate descent from the committed values. Where no point of the fitting category is left,
  there is nothing to fit and the point keeps no LOSO figure (the report says so).

  Only the constants a source informed (its points' `informs` field) are refitted without it: a
  constant set by hand without ever seeing a source is already a fit without that source, so the
  committed value is its LOSO value there.

The committed constants were set by hand from those runs, not by this rule, so the report also prints
what the rule gives on every source: how far the hand-set value is from the rule's own fit.

Not refitted, said plainly in the report:
  * weights, training_peak, max_seq_len: no gpuscout constant was fitted on these points, so
    leaving a source out changes nothing; their LOSO figure equals the in-sample one.
    (overhead.ALLOCATOR_FRACTION, the 10% allocator reserve in the nvidia-smi training points,
    comes from fms-acceleration PR #14: the same project as the fms points, a different
    measurement, and no validation point. It is a prior, not refitted.)
  * speed: every counted speed point comes from the Hugging Face SDXL blog, the one source its
    constants (the image row's compute 0.4, the CUDA-core GEMM efficiency, the offload-hook
    bandwidth) were set from; without it nothing is left to fit them on, so speed has no LOSO figure.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from published.gpuscout_side import estimate_point

GIB = 2**30


@dataclass(frozen=True)
class Constant:
    module: str
    name: str
    category: str  # the counted points it is fitted on
    grid: tuple[float, ...]
    shown: Callable[[float], str]

    @property
    def label(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.name}"


def _grid(start: float, stop: float, step: float) -> tuple[float, ...]:
    count = round((stop - start) / step)
    return tuple(round(start + i * step, 10) for i in range(count + 1))


OVERHEAD = "gpuscout.estimator.overhead"
FITTED: tuple[Constant, ...] = (
    Constant(OVERHEAD, "CONV_WORKSPACE_INPUTS", "image_peak", _grid(0.0, 4.0, 0.05), lambda v: f"{v:.2f}"),
    Constant(OVERHEAD, "VLLM_PROFILE_FLOOR_BYTES", "inference_peak",
             tuple(int(v * GIB) for v in _grid(0.0, 1.5, 0.01)), lambda v: f"{v / GIB:.2f} GiB"),
    Constant(OVERHEAD, "VLLM_SAMPLER_BYTES_PER_LOGIT", "inference_peak", _grid(0.0, 64.0, 1.0),
             lambda v: f"{v:.0f} B"),
)
# Categories where no constant was fitted on validation points: LOSO = in-sample there.
NOT_FITTED = ("weights", "training_peak", "max_seq_len", "video_peak")
NO_LOSO = {"speed": "every counted speed point is from the one source its constants were set from"}
SWEEPS = 3


def source_key(source: str) -> str:
    """One source per repository file or per issue/PR thread; the commit and comment do not split it."""
    url = re.search(r"https?://github\.com/([^/\s]+)/([^/\s]+)/(?:issues|pull)/(\d+)", source)
    if url:
        return f"{url.group(1)}/{url.group(2)}#{url.group(3)}"
    repo_file = re.match(r"([\w.-]+/[\w.-]+):([^@\s]+)", source)
    if repo_file:
        return f"{repo_file.group(1)}:{repo_file.group(2)}"
    return source.split()[0] if source.split() else source


@contextmanager
def patched(values: dict[Constant, float]) -> Iterator[None]:
    """The constants set to `values` for the duration (gpuscout reads them at call time)."""
    saved = {}
    for constant, value in values.items():
        module = importlib.import_module(constant.module)
        saved[constant] = getattr(module, constant.name)
        setattr(module, constant.name, type(saved[constant])(value))
    try:
        yield
    finally:
        for constant, value in saved.items():
            setattr(importlib.import_module(constant.module), constant.name, value)


def committed() -> dict[Constant, float]:
    return {c: float(getattr(importlib.import_module(c.module), c.name)) for c in FITTED}


def _loss(rows: Sequence[Any], values: dict[Constant, float]) -> float:
    total = 0.0
    with patched(values):
        for row in rows:
            result = estimate_point(row.point.to_wire())
            if result["status"] != "ok":
                return float("inf")
            total += abs(result["value"] / row.point.measured - 1.0)
    return total


def fit(rows: Sequence[Any], category: str) -> dict[Constant, float] | None:
    """The constants fitted on `rows` of `category` by the rule above; None when no row is left."""
    group = [c for c in FITTED if c.category == category]
    points = [r for r in rows if r.point.category == category and r.counted]
    if not points:
        return None
    # Start from the middle of each grid, not the committed values: those were set with every source,
    # the held-out one too, and a coordinate descent can settle near where it starts.
    values = {c: c.grid[len(c.grid) // 2] for c in group}
    for _ in range(SWEEPS):
        before = dict(values)
        for constant in group:
            best = min(constant.grid, key=lambda v, c=constant: (_loss(points, {**values, c: v}), v))
            values[constant] = best
        if values == before:
            break
    return values


@dataclass
class Loso:
    """What leave-one-source-out gave: the fits and which categories it could not run for."""

    fits: dict[str, dict[str, dict[Constant, float] | None]]  # category -> left-out source ("" = none) -> fit
    sources: dict[str, int]  # source -> counted points


def apply(rows: Sequence[Any]) -> Loso:
    """Fill `row.loso` (the estimate under constants fitted without the row's source) for every row."""
    fit_categories = sorted({c.category for c in FITTED})
    sources: dict[str, int] = {}
    for row in rows:
        key = source_key(row.point.source)
        sources[key] = sources.get(key, 0) + int(row.counted)
    fits: dict[str, dict[str, dict[Constant, float] | None]] = {c: {"": fit(rows, c)} for c in fit_categories}
    informed: dict[str, set[str]] = {}
    for row in rows:
        informed.setdefault(source_key(row.point.source), set()).update(
            c.category for c in FITTED for note in row.point.extra.get("informs", []) if c.label in note)
    for row in rows:
        if row.after["status"] != "ok" or row.point.category in NO_LOSO:
            continue
        key = source_key(row.point.source)
        values: dict[Constant, float] = {}
        missing = False
        # A constant this source did not inform was set without it: the committed value is already a
        # fit without this source. Only the constants it informed are refitted without it.
        for category in sorted(informed.get(key, set())):
            if key not in fits[category]:
                fits[category][key] = fit([r for r in rows if source_key(r.point.source) != key], category)
            found = fits[category][key]
            if found is None:
                missing = True
            else:
                values.update(found)
        if missing:
            row.loso_note = "nothing left to fit its constants on"
            continue
        with patched(values):
            result = estimate_point(row.point.to_wire())
        row.loso = result["value"] if result["status"] == "ok" else None
    return Loso(fits, sources)
