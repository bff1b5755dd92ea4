"""Serving calibration entries from `load` results: the simulator's step costs fitted to what a load measured.

A load result run with `--job SPEC --server-gpu GPU` records the served job and the server's GPU beside
its prediction (results/load_prediction.py). `gpuscout calibrate` re-derives the speed model's step costs
of that job on that GPU at the default factors (the prior), fits the costs that make the simulator
reproduce the measured levels (`estimator.serving.calibrate.fit_step_costs`, with the engine's real
limits), and keeps the fit per GPU as factors over the prior (device terms) and seconds (host terms).

It lives in `results` because it reads result files; the fit itself is the estimator's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.calibration import HOST_TERMS, SERVING_TERMS, ServingEntry
from gpuscout.estimator.efficiency import calibrated
from gpuscout.hardware.catalog import Gpu, lookup_gpu
from gpuscout.results.schema import BenchResult
from gpuscout.userfile import printable, shown
from gpuscout.workload.job import InferenceJob

if TYPE_CHECKING:
    from gpuscout.estimator.serving.model import StepCosts
    from gpuscout.workload.shape import ModelShape

# What the step costs are fitted to: each level's medians and throughput. A short load's P95 carries the client
# machine's hiccups (a busy VM put one level's TTFT P95 at 7x its P50, and a fit on P95s chased it, making two
# of three levels worse than the uncalibrated estimate: docs/serving_sim.md); the tails the calibrated costs
# predict are then held against the measured ones by the next load's prediction.
FIT_METRICS = ("ttft_p50_s", "itl_p50_s", "output_tokens_per_s")
RERUN = ("rerun the load with the served job and the server's GPU: gpuscout load URL --model M --job SPEC.toml "
         "--server-gpu GPU -o FILE")


@dataclass(frozen=True)
class ServingFit:
    """One load result's serving entry (None when it could not be fitted) and what was skipped, and why."""

    entry: ServingEntry | None
    skipped: tuple[str, ...] = ()
    rms_log_error: float | None = None  # the fit's overall residual (log of simulated / measured)


def serving_entry_from_result(result: BenchResult, path: Path, *, digest: str,
                              base_dirs: Sequence[Path] = ()) -> ServingFit:
    """The serving entry a `load` result gives; a result that cannot be fitted is skipped with the reason."""
    prediction = result.prediction
    if prediction is None or not prediction.job:
        return ServingFit(None, (f"{path.name}: skipped: it does not record the served job and GPU; {RERUN}",))
    gpu = lookup_gpu(prediction.gpu or "") or lookup_gpu(result.fingerprint.gpu_name or "")
    if gpu is None:
        return ServingFit(None, (f"{path.name}: skipped: the server's GPU "
                                 f"{shown(prediction.gpu or result.fingerprint.gpu_name)} is not a catalog GPU; "
                                 f"{RERUN}",))
    try:
        found = _job(prediction.job, path, base_dirs)
        if isinstance(found, str):
            return ServingFit(None, (f"{path.name}: skipped: {found}",))
        return _fit(result, path, digest, gpu, *found)
    except GpuscoutError as exc:
        return ServingFit(None, (f"{path.name}: skipped: {exc.what}",))


def _job(data: dict[str, object], path: Path, base_dirs: Sequence[Path]) -> tuple[InferenceJob, ModelShape] | str:
    """The served job and its model's shape, or why they cannot be had."""
    from gpuscout.workload.job import parse_job
    from gpuscout.workload.jobs import resolve_job_model
    from gpuscout.workload.shape import ModelShape

    job = parse_job(dict(data), origin=f"{path} (the served job it recorded)")
    if not isinstance(job, InferenceJob):
        return f"the job it recorded is a {job.kind} job, not an inference job"
    last: GpuscoutError | None = None
    for base in (*base_dirs, None):
        try:
            shape = resolve_job_model(job, base)
        except GpuscoutError as exc:
            last = exc
            continue
        if isinstance(shape, ModelShape):
            return job, shape
    return f"its served model does not resolve ({last.what if last else 'not a language model'})"


def _fit(result: BenchResult, path: Path, digest: str, gpu: Gpu, job: InferenceJob,
         shape: ModelShape) -> ServingFit:
    from gpuscout.estimator.serving.calibrate import fit_step_costs
    from gpuscout.estimator.serving.from_speed import engine_limits, step_costs
    from gpuscout.results.serving_observations import serving_observations

    with calibrated(None):  # the prior is the speed model at its default factors: the factors are over it
        prior = step_costs(job, shape, gpu)
    limits = engine_limits(job, shape, gpu)
    observations = serving_observations(result, prompt_tokens=_prompt_tokens(result))
    if not observations:
        return ServingFit(None, (f"{path.name}: skipped: no level has a simulator twin (fixed concurrency or a "
                                 "Poisson or constant rate, finished requests)",))
    fit = fit_step_costs(observations, prior, limits=limits, metrics=FIT_METRICS)
    factors, seconds = split_terms(fit.costs, prior, fit.fitted)
    residuals: dict[str, list[float]] = {}
    for row in fit.residuals:
        if row.measured > 0 and row.fitted > 0:
            residuals.setdefault(row.metric, []).append(math.log(row.fitted / row.measured))
    entry = ServingEntry(
        gpu_sku=gpu.sku, model=printable(str(job.model), 500), factors=factors, seconds=seconds, points=fit.points,
        residuals={m: math.sqrt(statistics.fmean(v * v for v in logs)) for m, logs in residuals.items()},
        machine=printable(result.fingerprint.gpu_name or gpu.name, 120), date=result.created_at.date(),
        source=f"sha256:{digest}", gpuscout_version=printable(result.fingerprint.gpuscout_version, 40))
    return ServingFit(entry, rms_log_error=fit.rms_log_error)


def split_terms(fitted: StepCosts, prior: StepCosts, terms: Sequence[str]) -> tuple[dict[str, float],
                                                                                    dict[str, float]]:
    """The fitted terms as factors over the prior (device terms whose prior is above 0) and seconds (host terms)."""
    factors: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for term in terms:
        if term not in SERVING_TERMS:
            continue
        value, base = float(getattr(fitted, term)), float(getattr(prior, term))
        if term in HOST_TERMS:
            seconds[term] = value
        elif base > 0 and value > 0:
            factors[term] = value / base
    return factors, seconds


def _prompt_tokens(result: BenchResult) -> int | None:
    """The prompts' mean length the load's prediction recorded (from the workload it sent), if any."""
    prediction = result.prediction
    lengths = [lv.prompt_tokens for lv in (prediction.levels if prediction else ()) if lv.prompt_tokens]
    return max(1, round(statistics.fmean(lengths))) if lengths else None


def read_serving_entries(paths: Sequence[Path]) -> tuple[list[ServingEntry], list[Path], list[str]]:
    """The serving entries the load results among `paths` give, the other (bench) results' paths, and what
    was skipped, and why."""
    from gpuscout.results.calibration_inputs import file_digest
    from gpuscout.results.store import load_result
    from gpuscout.userfile import MAX_RESULT_BYTES, read_user_bytes

    entries: list[ServingEntry] = []
    others: list[Path] = []
    skipped: list[str] = []
    for path in paths:
        result = load_result(path)
        if result.kind != "load":
            others.append(path)
            continue
        digest = file_digest(read_user_bytes(path, "result file", "Pass a load result file.",
                                             max_bytes=MAX_RESULT_BYTES))
        fit = serving_entry_from_result(result, path, digest=digest, base_dirs=(path.parent, Path.cwd()))
        if fit.entry is not None:
            entries.append(fit.entry)
        skipped += fit.skipped
    return entries, others, skipped
