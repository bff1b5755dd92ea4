"""Leave-one-out calibration of the speed points, through gpuscout's own calibration code.

For each counted speed point whose (GPU, phase) has at least one other counted point, a calibration is
fitted on the others (`calibration.fit_calibration`) and the point is predicted with it
(`estimate_speed(..., calibration=...)`): how well a user's own measurements of a GPU would correct
the speed model for a job not among them. A point is one observation: its measured time beside the
default estimate of the same metric. A throughput (tokens/s, samples/s) becomes a time ratio:
measured / estimated time = estimated throughput / measured throughput.

Phases (the speed model's efficiency kinds): step_s, s_per_it, tokens_per_s, samples_per_s of a
fine-tune → training; ttft_s → prefill; tpot_s and output tokens/s → decode; s_per_image and
s_per_it of an image job → the denoiser's kind (image, or video for a DiT where that kind exists).
If gpuscout has no `gpuscout.estimator.calibration` with `fit_calibration` and `Observation`, or its
`estimate_speed` takes no `calibration`, `apply` returns False and the report leaves the row out.
"""

from __future__ import annotations

import datetime
import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from published.gpuscout_side import SPEED_METRICS, _setup

THROUGHPUTS = ("tokens_per_s", "samples_per_s", "output_tokens_per_s")
INFERENCE_PHASE = {"ttft_s": "prefill", "tpot_s": "decode", "output_tokens_per_s": "decode",
                   "tokens_per_s": "decode"}


def calibration_module() -> Any | None:
    """gpuscout's calibration module, if it has what a leave-one-out fit needs."""
    try:
        module = importlib.import_module("gpuscout.estimator.calibration")
        from gpuscout.estimator.speed.estimate import estimate_speed
    except ImportError:
        return None
    if not all(hasattr(module, name) for name in ("fit_calibration", "Observation")):
        return None
    if "calibration" not in inspect.signature(estimate_speed).parameters:
        return None
    return module


def phase_of(quantity: str, job: Any, model: Any, module: Any) -> str | None:
    if job.kind == "finetune":
        return "training" if quantity in SPEED_METRICS["finetune"] else None
    if job.kind == "inference":
        return INFERENCE_PHASE.get(quantity)
    if quantity in ("s_per_image", "s_per_it"):
        kind = getattr(module, "denoiser_kind", None)
        return str(kind("image", model)) if kind is not None else "image"
    return None


def speed_value(quantity: str, job: Any, model: Any, gpu: Any, calibration: Any = None) -> float:
    """The point's metric from estimate_speed, with `calibration` in force when given."""
    from gpuscout.estimator.speed.estimate import estimate_speed

    estimate = estimate_speed(job, model, gpu, calibration=calibration)
    if job.kind == "image" and quantity == "s_per_it":
        return float(next(p for p in estimate.phases if "denoiser" in p.name).seconds)
    return float(estimate.metrics[SPEED_METRICS[job.kind][quantity]])


def apply(rows: Sequence[Any]) -> bool:
    """Fill `row.calibrated` for each counted speed row that has a partner; False without the API."""
    module = calibration_module()
    if module is None:
        return False
    cases = []
    for row in rows:
        if row.point.category != "speed" or not row.counted:
            continue
        job, model, gpu = _setup(row.point.to_wire())
        phase = phase_of(row.point.quantity, job, model, module)
        if phase is None:
            continue
        cases.append((row, job, model, gpu, phase, _observation(module, row, job, model, gpu, phase)))
    for row, job, model, gpu, phase, _ in cases:
        others = [obs for other, *_, p, obs in cases if other is not row and obs.gpu_sku == gpu.sku and p == phase]
        if others:
            row.calibrated = speed_value(row.point.quantity, job, model, gpu, module.fit_calibration(others))
    return True


def _observation(module: Any, row: Any, job: Any, model: Any, gpu: Any, phase: str) -> Any:
    quantity, measured = row.point.quantity, row.point.measured
    estimated = speed_value(quantity, job, model, gpu)
    if quantity in THROUGHPUTS:  # a rate: time ratio = estimated rate / measured rate
        measured_s, estimated_s = estimated / measured, 1.0
    else:
        measured_s, estimated_s = measured, estimated
    return module.Observation(gpu_sku=gpu.sku, phase=phase, measured_s=measured_s, estimated_s=estimated_s,
                              machine=gpu.name, date=datetime.date.today(), source=f"published:{row.point.id}",
                              case=row.point.id)
