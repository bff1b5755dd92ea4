"""Calibration observations read from bench results: each measured phase time beside the
estimate of the same job on the same GPU (docs/estimator.md §3.11).

It lives in `results` because it reads result files; the fitting itself is the estimator's
(`estimator/calibration.py`), which must not import results (docs/design.md §3).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.estimator.calibration import _LLM_PAIRS, DENOISER_METRIC, Extracted, Observation
from gpuscout.estimator.efficiency import EFFICIENCY_KINDS, calibrated
from gpuscout.hardware.catalog import Gpu, lookup_gpu
from gpuscout.results.schema import BenchResult, Case, Metric
from gpuscout.userfile import first_invalid_field, printable, shown


def observations_from_result(result: BenchResult, path: Path, *, digest: str,
                             base_dirs: Sequence[Path] = ()) -> Extracted:
    """Every usable measured phase of `result` beside its default estimate.

    A load result, a probe result and cases that failed or ran disturbed are skipped with a reason; a
    GPU the catalog does not know, or a job that cannot be re-estimated, is a SpecError."""
    if result.kind == "load":
        return Extracted(skipped=(f"{path.name}: skipped for the phase factors: a load result records the client "
                                  "machine and the whole server, not the job's phases on the GPU, so it calibrates "
                                  "the serving simulator's step costs instead (a load run with --job and "
                                  "--server-gpu); bench the job on that GPU for these",))
    if result.kind == "probe" or not result.job:
        return Extracted(skipped=(f"{path.name}: skipped: a probe result measures the machine, not a job",))
    gpu = result_gpu(result, path)
    job, model = _job_and_model(result, path, base_dirs)
    observations: list[Observation] = []
    skipped: list[str] = []
    for case in result.cases:
        if case.failure is not None:
            skipped.append(f"{path.name}: case {case.name!r} skipped: it failed ({case.failure.kind})")
            continue
        # A finding with a side effect (throttling, another tenant, CPU steal) means the times describe
        # that disturbance as much as the GPU (docs/measurement.md §1.13).
        disturbed = [f.kind for t in case.telemetry for f in t.findings if f.side_effect]
        if disturbed:
            skipped.append(f"{path.name}: case {case.name!r} skipped: its run was disturbed "
                           f"({', '.join(dict.fromkeys(disturbed))}), so its times do not describe this GPU")
            continue
        found, why = _case_observations(result, case, job, model, gpu, digest)
        observations += found
        skipped += [f"{path.name}: case {case.name!r}: {w}" for w in why]
    return Extracted(observations=tuple(observations), skipped=tuple(skipped))


def result_gpu(result: BenchResult, path: Path) -> Gpu:
    """The catalog GPU a result was measured on; anything else is a SpecError saying what was found."""
    fp = result.fingerprint
    gpu = lookup_gpu(fp.gpu_sku) if fp.gpu_sku else None
    if gpu is None and fp.gpu_name:
        gpu = lookup_gpu(fp.gpu_name)
    if gpu is not None and result.fixed.device == "cuda":
        return gpu
    found = [f"device {result.fixed.device!r}", f"GPU name {shown(fp.gpu_name) if fp.gpu_name else 'none'}",
             f"catalog SKU {shown(fp.gpu_sku) if fp.gpu_sku else 'none'}", f"{fp.gpu_count} GPU(s)",
             f"CPU {shown(fp.cpu_model)}"]
    why = ("It ran on the CPU; the speed model has no CPU entry, so there is no estimate to calibrate."
           if result.fixed.device == "cpu" else
           "A calibration is kept per catalog GPU, and the estimate needs that GPU's peak rates.")
    raise SpecError(f"{path}: no catalog GPU to calibrate (found: {'; '.join(found)}).", why,
                    "Pass bench results measured on a GPU that `gpuscout gpus` lists (bench --device cuda); "
                    "a GPU missing from the catalog needs its entry in gpus.toml first.")


def _job_and_model(result: BenchResult, path: Path, base_dirs: Sequence[Path]) -> tuple[Any, Any]:
    from gpuscout.workload.job import parse_job
    from gpuscout.workload.jobs import resolve_job_model

    job = parse_job(dict(result.job), origin=f"{path} (the job it recorded)")
    last: GpuscoutError | None = None
    for base in (*base_dirs, None):
        try:
            return job, resolve_job_model(cast(Any, job), base)  # video jobs: as the estimator learns them
        except GpuscoutError as exc:
            last = exc
    assert last is not None
    raise SpecError(f"{path}: cannot re-estimate its job: {last.what}", last.why,
                    "Run calibrate from the folder the job spec's model path is relative to, or bench with a "
                    "preset id or an absolute model path.")


def _case_observations(result: BenchResult, case: Case, job: Any, model: Any, gpu: Gpu,
                       digest: str) -> tuple[list[Observation], list[str]]:
    """The case's measured phases beside the default estimate of the job at the case's size."""
    from gpuscout.estimator.speed.estimate import estimate_speed

    try:
        sized = _at_case_size(job, case)
    except ValidationError as exc:  # a hand-edited size (a fraction of a token, say) makes no job to estimate
        return [], [f"its sizes make no valid job: {first_invalid_field(exc, 'params')}"]
    try:
        with calibrated(None):
            speed = estimate_speed(sized, model, gpu)
    except GpuscoutError as exc:
        return [], [f"no estimate: {exc.what}"]
    measured = _measured(case)
    out: list[Observation] = []
    why: list[str] = []
    for metric_name, phase in _pairs(result.kind, model):
        metric = measured.get(metric_name)
        estimated = _estimated(metric_name, speed)
        if metric is None or not metric.value > 0:
            continue
        if estimated is None or not estimated > 0:
            why.append(f"{metric_name} has no estimated twin")
            continue
        out.append(_observation(result, case, metric, estimated, gpu, phase, digest))
    return out, why


def _at_case_size(job: Any, case: Case) -> Any:
    """The job at the case's size (a bench measures concurrency 1 beside the job's own, …)."""
    fields = type(job).model_fields
    updates = {k: v for k, v in case.params.items() if k in fields and k != "kind" and v is not None
               and getattr(job, k) != v}
    return type(job).model_validate({**job.model_dump(), **updates}) if updates else job


def _measured(case: Case) -> dict[str, Metric]:
    """The case's metrics by name; a depth slice's full-depth extrapolation stands for the whole model."""
    sliced = case.layers is not None
    return {m.name.removesuffix("_full_depth"): m for m in case.metrics if m.extrapolated == sliced}


def _pairs(kind: str, model: Any) -> tuple[tuple[str, str], ...]:
    if kind in _LLM_PAIRS:
        return _LLM_PAIRS[kind]
    return ((DENOISER_METRIC, denoiser_kind(kind, model)),)


def denoiser_kind(result_kind: str, model: Any) -> str:
    """'video' for a video job or a DiT denoiser where efficiency.toml has a video row, else 'image'."""
    if "video" in EFFICIENCY_KINDS and (result_kind == "video" or getattr(model, "denoiser_kind", "") == "dit"):
        return "video"
    return "image"


def _estimated(metric_name: str, speed: Any) -> float | None:
    if metric_name == DENOISER_METRIC:
        step = next((p for p in speed.phases if p.name.startswith("denoiser")), None)
        return None if step is None else float(step.seconds)
    value = speed.metrics.get(metric_name)
    return None if value is None else float(value)


def _observation(result: BenchResult, case: Case, metric: Metric, estimated: float, gpu: Gpu, phase: str,
                 digest: str) -> Observation:
    samples = [s for s in metric.samples if s > 0]
    noise = statistics.stdev(math.log(s) for s in samples) if len(samples) > 1 else None
    fp = result.fingerprint
    machine = fp.gpu_name or gpu.name
    return Observation(gpu_sku=gpu.sku, phase=phase, measured_s=metric.value, estimated_s=estimated,
                       machine=printable(machine, 120), date=result.created_at.date(), source=f"sha256:{digest}",
                       case=printable(case.name, 200), noise_sd=noise, samples=max(len(samples), 1),
                       gpuscout_version=printable(fp.gpuscout_version, 40))


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_observations(paths: Sequence[Path], *, required: bool = True) -> tuple[list[Observation], list[str]]:
    """Every observation the result files give, and what was skipped; none at all is a SpecError when
    `required` (`gpuscout calibrate` asks for none when load results give it serving entries)."""
    from gpuscout.results.store import load_result
    from gpuscout.userfile import MAX_RESULT_BYTES, read_user_bytes

    observations: list[Observation] = []
    skipped: list[str] = []
    for path in paths:
        result = load_result(path)
        digest = file_digest(read_user_bytes(path, "result file", "Pass a bench result file.",
                                             max_bytes=MAX_RESULT_BYTES))
        found = observations_from_result(result, path, digest=digest, base_dirs=(path.parent, Path.cwd()))
        observations += found.observations
        skipped += found.skipped
    if not observations and required:
        raise SpecError("None of the results holds a measured phase time to calibrate from.",
                        "; ".join(skipped) or "No case of theirs finished.",
                        "Pass bench results (gpuscout bench JOB.toml -o FILE on the GPU) with finished cases.")
    return observations, skipped


# ---------------------------------------------------------------- the file ---------------------

