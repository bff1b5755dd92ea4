"""gpuscout's own estimate set beside what a bench measured on the same GPU.

When a bench ran on a GPU whose name matches a catalog SKU, the estimator is run for the same job
on that SKU and each estimated metric (job time, step time, throughputs, TTFT/TPOT …) is paired
with the measured one of the case at the job's own size, as measured / estimate. The peak memory
pairs the estimate's peak with the measured one (torch reserved, or the full-depth extrapolation
of a depth-sliced case). This is how a user sees how far to trust the estimate on this machine.
"""

from __future__ import annotations

from pydantic import computed_field

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.results.schema import BenchResult, Case
from gpuscout.workload.job import Job
from gpuscout.workload.model import Model


class BesideRow(Frozen):
    metric: str
    unit: str
    estimate: float
    measured: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float:
        """measured / estimate: above 1 the job took longer (or ran faster, for throughputs)."""
        return self.measured / self.estimate


class EstimateBeside(Frozen):
    """The estimate for the bench's GPU beside the measurement, or why there is none."""

    gpu_sku: str | None
    case: str | None  # the case the measured figures come from
    rows: tuple[BesideRow, ...] = ()
    reason: str | None = None  # why nothing is set beside (no GPU, unknown SKU …)


def estimate_beside(result: BenchResult, job: Job | None, model: Model | None) -> EstimateBeside | None:
    """None for CPU runs and runs without a job; otherwise the rows, or the reason there are none."""
    if job is None or model is None or result.fixed.device != "cuda":
        return None
    sku = result.fingerprint.gpu_sku
    if sku is None:
        return EstimateBeside(gpu_sku=None, case=None, reason="this GPU matched no catalog SKU")
    try:
        gpu = find_gpu(sku)
        speed, memory = estimate_speed(job, model, gpu), estimate_memory(job, model, gpu)
    except GpuscoutError as exc:
        return EstimateBeside(gpu_sku=sku, case=None, reason=exc.what)
    case = next((c for c in reversed(result.cases) if c.failure is None), None)
    if case is None:
        return EstimateBeside(gpu_sku=sku, case=None, reason="no case finished")
    estimated = {**speed.metrics, "job_s": speed.job_s}
    return EstimateBeside(gpu_sku=sku, case=case.name, rows=(*_metric_rows(case, estimated),
                                                              *_memory_row(case, memory.peak_bytes)))


def _metric_rows(case: Case, estimated: dict[str, float]) -> list[BesideRow]:
    """Estimated metrics with a measured twin (the full-depth extrapolation for a depth slice)."""
    sliced = case.layers is not None
    measured = {m.name.removesuffix("_full_depth"): m for m in case.metrics if m.extrapolated == sliced}
    return [BesideRow(metric=name, unit=measured[name].unit, estimate=value, measured=measured[name].value)
            for name, value in estimated.items() if name in measured and value]


def _memory_row(case: Case, estimated_bytes: int) -> list[BesideRow]:
    peak = case.peak_memory.extrapolated_allocated_bytes or case.peak_memory.torch_reserved_bytes
    if not peak or not estimated_bytes:
        return []
    return [BesideRow(metric="peak memory", unit="bytes", estimate=float(estimated_bytes), measured=float(peak))]
