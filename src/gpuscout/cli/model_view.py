"""`gpuscout model`: the shape of a language or image model, as JSON and as tables."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from gpuscout.estimator.breakdown import total_bytes
from gpuscout.estimator.inference import kv_bytes_per_sequence, weight_terms
from gpuscout.report.console import image_model_table, model_table, weights_table
from gpuscout.workload.image import ImageModelShape, image_preset_ids
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import llm_presets
from gpuscout.workload.resolve import resolve_any
from gpuscout.workload.shape import ModelShape

WEIGHT_FORMATS = ("fp32", "bf16", "fp8", "int8", "int4")
KV_FORMATS = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}


def model_view(ref: str) -> tuple[dict[str, Any], RenderableType]:
    shape = resolve_any(ref)
    if isinstance(shape, ImageModelShape):
        return {"kind": "image", **shape.model_dump(), "params_total": shape.params_total}, image_model_table(shape)
    weights = weight_bytes_by_format(shape)
    kv = {fmt: round(kv_bytes_per_sequence(shape, 1, b, 1, 1)) for fmt, b in KV_FORMATS.items()}
    payload = {
        "kind": "llm",
        "params_total": shape.params_total,
        "params_active": shape.params_active,
        "kv_cache_bytes_per_token": kv["bf16"],
        "kv_cache_bytes_per_token_by_dtype": kv,
        "weight_bytes_by_format": weights,
        "shape": shape.model_dump(),
    }
    return payload, Group(model_table(shape), weights_table(weights, kv))


def weight_bytes_by_format(shape: ModelShape) -> dict[str, int]:
    """Weight bytes in each storage format (int4: group 128; quantized formats keep 16-bit leftovers)."""
    out = {}
    for fmt in WEIGHT_FORMATS:
        job = InferenceJob(kind="inference", model=shape.name, weights=fmt)
        out[fmt] = total_bytes(weight_terms(job, shape.model_copy(update={"checkpoint": None})))
    if shape.checkpoint is not None:
        out["checkpoint (exact)"] = shape.checkpoint.total_bytes
    return out


def list_view() -> tuple[dict[str, Any], RenderableType]:
    presets = llm_presets()
    table = Table(title="Built-in model presets")
    for col in ("id", "name", "source"):
        table.add_column(col, overflow="fold")
    for p in presets:
        table.add_row(p.id, p.name, p.source)
    for image_id in image_preset_ids():
        table.add_row(image_id, "(image model)", "")
    payload = {"llm": [p.id for p in presets], "image": list(image_preset_ids())}
    return payload, table
