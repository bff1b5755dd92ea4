"""`estimate`: memory, fit, fixes, limits and speed of a job on each GPU, a trace of the real step beside it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import calibration_of
from gpuscout.api.jobs import Job, JobRef, job_and_model

if TYPE_CHECKING:
    from gpuscout.estimator.breakdown import MemoryBreakdown
    from gpuscout.estimator.calibration import Calibration
    from gpuscout.estimator.screen import Screening
    from gpuscout.estimator.serving.replica import ReplicaCapacity
    from gpuscout.hardware.catalog import Gpu
    from gpuscout.trace.llm import TraceResult


@dataclass(frozen=True)
class EstimateReport:
    job: Job
    screening: Screening
    detailed: bool  # GPUs were named: show every GPU's breakdown
    trace: TraceResult | None = None  # the real model step traced under FakeTensorMode
    trace_analytic: MemoryBreakdown | None = None  # the analytic estimate of exactly the traced job
    trace_scope: str | None = None  # what was traced ("2 layers, 1 GPU, no sharding, …")
    trace_skipped: str | None = None  # why no trace was made
    calibration: Calibration | None = None  # the measured calibration the speeds used (docs/estimator.md §3.11)
    calibration_path: Path | None = None
    # A serving job on each named GPU it fits: what one replica holds, simulated (GPU SKU, the capacity
    # or why it was not simulated), docs/serving_sim.md "Where the simulation is used".
    capacities: tuple[tuple[str, ReplicaCapacity | str], ...] = ()


def estimate(job: JobRef = None, *, gpus: Sequence[str] = (), trace: bool = False,
             trace_layers: int | None = None, calibration: Calibration | str | Path | None = None,
             use_calibration: bool = True, margin_pct: float | None = None) -> EstimateReport:
    """Memory, fit, fixes, limits and speed of the job on each GPU (every catalog GPU by default).

    Each fit is judged fits / tight / does not fit against the estimator's validated error band, or
    against `margin_pct` (percent of the estimated peak) when given (docs/estimator.md §2.15).
    Speeds use `calibration` (a file or a `Calibration`), else the user's calibration file where one
    exists; `use_calibration=False` keeps the default efficiency factors. With `trace`, the real model
    step is traced, and exactly the traced job estimated beside it on the first GPU (`trace.scope`)."""
    from gpuscout.estimator.efficiency import calibrated
    from gpuscout.estimator.margin import check_margin_pct
    from gpuscout.estimator.screen import screen
    from gpuscout.hardware.catalog import find_gpu, load_catalog

    if margin_pct is not None:
        check_margin_pct(margin_pct)
    the_job, model, base_dir = job_and_model(job)
    chosen = [find_gpu(n) for n in gpus] if gpus else list(load_catalog())
    used, used_path = calibration_of(calibration, use_calibration)
    with calibrated(used):
        screening = screen(the_job, model, chosen, margin_pct)
        capacities = _capacities(the_job, model, chosen, screening) if gpus else ()
    report = EstimateReport(job=the_job, screening=screening, detailed=bool(gpus), calibration=used,
                            calibration_path=used_path, capacities=capacities)
    if not trace:
        return report
    from gpuscout.estimator.memory import estimate_memory
    from gpuscout.trace.scope import TraceSkipped, trace_scoped

    scoped = trace_scoped(the_job, model, base_dir, trace_layers)
    if isinstance(scoped, TraceSkipped):
        return replace(report, trace_skipped=scoped.reason)
    return replace(report, trace=scoped.result, trace_analytic=estimate_memory(scoped.job, scoped.model, chosen[0]),
                   trace_scope=scoped.scope)


def _capacities(job: Job, model: object, gpus: Sequence[Gpu], screening: Screening,
                ) -> tuple[tuple[str, ReplicaCapacity | str], ...]:
    """One replica of a serving job simulated on each named GPU it fits on (as written, at its
    tensor_parallel); the reason instead where the simulator cannot model it."""
    from gpuscout.errors import GpuscoutError
    from gpuscout.estimator.serving.from_speed import simulable
    from gpuscout.estimator.serving.replica import replica_capacity
    from gpuscout.workload.job import InferenceJob
    from gpuscout.workload.shape import ModelShape

    if not isinstance(job, InferenceJob):
        return ()
    out: list[tuple[str, ReplicaCapacity | str]] = []
    for gpu, verdict in zip(gpus, screening.verdicts, strict=True):
        if not verdict.fits or verdict.speed is None:
            continue
        why = simulable(job) if isinstance(model, ModelShape) else "the model is not one language model"
        if why is not None or not isinstance(model, ModelShape):
            out.append((gpu.sku, why or ""))
            continue
        try:
            out.append((gpu.sku, replica_capacity(job, model, gpu)))
        except (GpuscoutError, ValueError) as exc:  # no KV room, a cost outside the simulator's range
            out.append((gpu.sku, str(exc).splitlines()[0]))
    return tuple(out)
