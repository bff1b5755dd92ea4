"""A language model's weight bytes in each storage format, and its KV cache per token by dtype."""

from __future__ import annotations

from gpuscout.estimator.breakdown import total_bytes
from gpuscout.estimator.inference import kv_bytes_per_sequence, weight_terms
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import ModelShape

WEIGHT_FORMATS = ("fp32", "bf16", "fp8", "int8", "int4")
KV_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}


def weight_bytes_by_format(shape: ModelShape) -> dict[str, int]:
    """Weight bytes in each storage format (int4: group 128; quantized formats keep 16-bit leftovers),
    plus the checkpoint's exact bytes when the model came from one."""
    out = {}
    for fmt in WEIGHT_FORMATS:
        job = InferenceJob(kind="inference", model=shape.name, weights=fmt)
        out[fmt] = total_bytes(weight_terms(job, shape.model_copy(update={"checkpoint": None})))
    if shape.checkpoint is not None:
        out["checkpoint (exact)"] = shape.checkpoint.total_bytes
    return out


def kv_bytes_per_token_by_dtype(shape: ModelShape) -> dict[str, int]:
    """KV cache bytes one token adds, over all layers, for each cache dtype."""
    return {fmt: round(kv_bytes_per_sequence(shape, 1, b, 1, 1)) for fmt, b in KV_BYTES.items()}
