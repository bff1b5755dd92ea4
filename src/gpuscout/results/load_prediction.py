"""The serving simulator's prediction of a measured load result: every load run is also a check of the model.

After `gpuscout load` measured its levels, the same arrivals (the users or the rate of each level, its
request count) at the prompt and output lengths the level measured are simulated on the server's GPU with
the served job's engine settings (docs/serving_sim.md, "Every load run checks the model"). The prediction
is the central estimate, not the slow end of the band: it is held against a measurement, and the error
it shows is the model's own. Where no prediction can be made, a one-line reason takes its place.

It lives in `results` because it reads a load result's cases; the simulation is the estimator's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from gpuscout.errors import GpuscoutError
from gpuscout.hardware.catalog import Gpu, lookup_gpu
from gpuscout.results.schema import BenchResult, Case, LoadPrediction, Metric, PredictedLevel
from gpuscout.userfile import first_invalid_field, shown
from gpuscout.workload.job import InferenceJob, Job, Slo
from gpuscout.workload.shape import ModelShape

if TYPE_CHECKING:
    from gpuscout.estimator.serving.model import Arrivals, SimConfig, SimResult

# The simulator's request count per level is the measured level's, up to this many: a longer level's
# percentiles settle well before it, and `load` levels are 100 requests by default.
MAX_SIMULATED_REQUESTS = 5000
TraceRow = tuple[float, int, int]  # send time s, prompt tokens, output tokens (the simulator's trace rows)


@dataclass(frozen=True)
class Served:
    """What served the load: the GPU and GPU count behind the endpoint, and the served job (None: not given)."""

    gpu_name: str | None
    gpus: int
    job: Job | None
    job_data: dict[str, Any]  # the job spec as given, stored with the prediction
    base_dir: Path | None = None  # where a relative model path in the job is read from


@dataclass(frozen=True)
class Prompts:
    """What the load sent, as plain numbers: the prompts' mean length, and a trace's rows."""

    prompt_tokens: float | None
    trace: tuple[TraceRow, ...] = ()


def predict_load(result: BenchResult, served: Served, prompts: Prompts, *, slo: Slo | None = None,
                 search: bool = False) -> LoadPrediction:
    """The simulator's prediction of every level of `result`; with `search`, of the most load meeting `slo`."""
    base = {"gpu": None, "gpus": served.gpus, "job": served.job_data}
    setup = _config(result, served)
    if isinstance(setup, str):
        gpu = lookup_gpu(served.gpu_name) if served.gpu_name else None
        return LoadPrediction(**base | {"gpu": gpu.sku if gpu else None}, unavailable=setup)
    config, gpu = setup
    levels = tuple(_level(case, config, prompts, result.fixed.seed) for case in result.cases)
    level, note = (None, "")
    if search and slo is not None:
        level, note = _search(result, config, prompts, slo)
    return LoadPrediction(**base | {"gpu": gpu.sku}, costs_source=config.costs.source, levels=levels,
                          search_level=level, search_note=note)


def unavailable(served: Served, why: str) -> LoadPrediction:
    """A prediction that could not be made, and why (one line)."""
    return LoadPrediction(gpus=served.gpus, job=served.job_data, unavailable=why)


def _config(result: BenchResult, served: Served) -> tuple[SimConfig, Gpu] | str:
    """The simulator's configuration for the served job on the server's GPU, or why there is none."""
    if result.fixed.settings.get("endpoint") == "images":
        return "no prediction: the serving simulator models token generation, not image generations"
    if served.job is None:
        return "no prediction: pass --job SPEC.toml (the served inference job) to check the simulator against it"
    if not isinstance(served.job, InferenceJob):
        return f"no prediction: the job is a {served.job.kind} job; the serving simulator needs an inference job"
    if served.gpu_name is None:
        return "no prediction: the server's GPU is not known; pass --server-gpu NAME or --offer ID"
    gpu = lookup_gpu(served.gpu_name)
    if gpu is None:
        return (f"no prediction: {shown(served.gpu_name)} is not a catalog GPU (gpuscout gpus lists them), so "
                "there are no peak rates to simulate with")
    job = served.job
    if served.gpus != job.tensor_parallel:
        return (f"no prediction: the job runs tensor_parallel = {job.tensor_parallel} but the endpoint has "
                f"{served.gpus} GPU(s) (--server-gpus); the simulator models one replica: make them agree")
    from gpuscout.estimator.serving.from_speed import sim_config, simulable
    from gpuscout.workload.jobs import resolve_job_model

    why = simulable(job)
    if why is not None:
        return f"no prediction: {why}"
    try:
        shape = resolve_job_model(job, served.base_dir)
        if not isinstance(shape, ModelShape):  # an inference job's model is a language model
            return "no prediction: the job's model is not a language model"
        return sim_config(job, shape, gpu), gpu
    except GpuscoutError as exc:
        return f"no prediction: {exc.what}"


def _level(case: Case, config: SimConfig, prompts: Prompts, seed: int) -> PredictedLevel:
    """One level's prediction (or, in `note`, why it has none)."""
    from gpuscout.estimator.serving.simulate import simulate

    made = _arrivals(case, config, prompts, seed)
    if isinstance(made, str):
        return PredictedLevel(case=case.name, note=made)
    arrivals, config = made
    sim = simulate(config, arrivals)
    return predicted(case.name, arrivals, sim)


def predicted(name: str, arrivals: Arrivals, sim: SimResult) -> PredictedLevel:
    """A simulated run as a `PredictedLevel` of the result file."""
    return PredictedLevel(
        case=name, arrivals=describe(arrivals), prompt_tokens=arrivals.prompt_tokens,
        output_tokens=arrivals.output_tokens, ttft_p50_s=sim.ttft_s.p50, ttft_p95_s=sim.ttft_s.p95,
        itl_p50_s=sim.itl_s.p50, itl_p95_s=sim.itl_s.p95, tpot_p50_s=sim.tpot_s.p50, tpot_p95_s=sim.tpot_s.p95,
        output_tokens_per_s=sim.output_tokens_per_s, requests_per_s=sim.requests_per_s, stable=sim.stable,
        note=sim.unstable or "")


def describe(arrivals: Arrivals) -> str:
    """'concurrency 8, 100 requests, 512 → 128 tokens' (or 'poisson 2.5 req/s', 'trace of 300 requests')."""
    if arrivals.kind == "concurrency":
        how = f"concurrency {arrivals.concurrency}"
    elif arrivals.kind == "trace":
        how = "trace"
    else:
        how = f"{arrivals.kind} {arrivals.rate_per_s:g} req/s"
    return f"{how}, {arrivals.requests} requests, {arrivals.prompt_tokens} → {arrivals.output_tokens} tokens"


def _arrivals(case: Case, config: SimConfig, prompts: Prompts, seed: int) -> tuple[Arrivals, SimConfig] | str:
    """The simulator's arrivals for a measured level, and the config with the level's measured prefix-cache
    hit rate (where the server reported one); or why the level cannot be simulated."""
    from gpuscout.estimator.serving.model import Arrivals

    params = case.params
    kind = params.get("arrival")
    if case.failure is not None or not _finished(case):
        return "no prediction: no request of this level finished, so its lengths are not known"
    metrics = {m.name: m for m in case.metrics}
    output = _mean_output(metrics)
    if output is None:
        return "no prediction: the level recorded no output tokens per request"
    if prompts.prompt_tokens is None or not prompts.prompt_tokens > 0:
        return "no prediction: the prompts' lengths are not known"
    prompt = max(1, round(prompts.prompt_tokens))
    requests = _requests(case, metrics)
    fields: dict[str, Any] = {"requests": requests, "prompt_tokens": prompt, "output_tokens": output, "seed": seed}
    burst = params.get("burstiness")
    if kind == "concurrency":
        fields |= {"kind": "concurrency", "concurrency": params.get("concurrency")}
    elif kind in ("poisson", "constant") or (kind == "gamma" and burst == 1):
        fields |= {"kind": "poisson" if kind == "gamma" else kind, "rate_per_s": params.get("rate_rps")}
    elif kind == "gamma":
        return (f"no prediction: gamma arrivals (burstiness k = {burst}) are not simulated; the simulator sends "
                "at a fixed concurrency, a Poisson or constant rate, or a trace's times")
    elif kind == "sessions":
        return ("no prediction: multi-turn conversations are not simulated (each turn's prompt carries the "
                "conversation so far)")
    elif kind == "trace":
        rows = _trace_rows(prompts.trace, params.get("speedup"), requests)
        if not rows:
            return "no prediction: the trace's rows are not known"
        fields |= {"kind": "trace", "trace": rows, "requests": len(rows)}
    else:
        return f"no prediction: arrivals of kind {shown(kind)} are not simulated"
    hit = metrics.get("prefix_cache_hit_rate")
    if hit is not None and 0 <= hit.value < 1:  # what the server's cache really found beats the job's guess
        config = config.model_copy(update={"limits": config.limits.model_copy(
            update={"prefix_hit_rate": hit.value})})
    try:
        return Arrivals(**fields), config
    except ValidationError as exc:
        return f"no prediction: the level's arrivals are outside the simulator's range ({first_invalid_field(exc)})"


def _finished(case: Case) -> bool:
    ttft = next((m for m in case.metrics if m.name == "ttft_s"), None)
    return ttft is not None and ttft.summary is not None and ttft.summary.n > 0


def _mean_output(metrics: dict[str, Metric]) -> int | None:
    """Output tokens per request as measured: Σ output tokens / successes, i.e. output tokens/s over req/s."""
    tokens, requests = metrics.get("output_tokens_per_s"), metrics.get("requests_per_s")
    if tokens is None or requests is None or not (tokens.value > 0 and requests.value > 0):
        return None
    return max(1, round(tokens.value / requests.value))


def _requests(case: Case, metrics: dict[str, Metric]) -> int:
    """The level's request count: as planned, else (a --duration level) what finished in one run."""
    planned = case.params.get("requests")
    if isinstance(planned, int) and planned > 0:
        return min(planned, MAX_SIMULATED_REQUESTS)
    ttft = metrics["ttft_s"].summary
    finished = ttft.n if ttft is not None else 1
    return max(1, min(MAX_SIMULATED_REQUESTS, math.ceil(finished / max(1, case.runs))))


def _trace_rows(rows: Sequence[TraceRow], speedup: Any, requests: int) -> tuple[TraceRow, ...]:
    """The trace's first `requests` rows on the replay's clock (send times divided by the speed-up)."""
    factor = float(speedup) if isinstance(speedup, int | float) and speedup > 0 else 1.0
    kept = list(rows[:requests])
    if not kept:
        return ()
    start = min(t for t, _, _ in kept)
    return tuple(((t - start) / factor, p, o) for t, p, o in kept)


def _search(result: BenchResult, config: SimConfig, prompts: Prompts, slo: Slo) -> tuple[float | None, str]:
    """The most load meeting `slo` by simulation, at the lengths the search's levels measured, searched up
    to the highest level the measured search tried (so the two answers share their ceiling)."""
    from gpuscout.estimator.serving.capacity import max_concurrency_at_slo, max_rate_at_slo

    outputs = [o for case in result.cases if (o := _mean_output({m.name: m for m in case.metrics})) is not None]
    if not outputs or prompts.prompt_tokens is None:
        return None, "no simulated search: no level finished, so the lengths are not known"
    output = round(sum(outputs) / len(outputs))
    prompt = max(1, round(prompts.prompt_tokens))
    kinds = {c.params.get("arrival") for c in result.cases}
    levels = [float(v) for c in result.cases for k in ("concurrency", "rate_rps")
              if isinstance(v := c.params.get(k), int | float)]
    top = max(levels, default=0.0)
    seed = result.fixed.seed
    try:
        if kinds == {"concurrency"}:
            found = max_concurrency_at_slo(config, slo, prompt_tokens=prompt, output_tokens=output, seed=seed,
                                           max_concurrency=max(1, int(top)))
            level = float(found.concurrency or 0)
        elif kinds <= {"poisson", "constant"}:
            kind: Literal["poisson", "constant"] = "constant" if kinds == {"constant"} else "poisson"
            found = max_rate_at_slo(config, slo, prompt_tokens=prompt, output_tokens=output, seed=seed, kind=kind)
            level = min(found.rate_per_s or 0.0, top) if top else found.rate_per_s or 0.0
        else:
            return None, f"no simulated search: arrivals of kind {', '.join(sorted(map(str, kinds)))} are not searched"
    except GpuscoutError as exc:
        return None, f"no simulated search: {exc.what}"
    at = f"simulated at {prompt} → {output} tokens"
    binds = f"; past it: {'; '.join(found.binding)}" if found.binding else "; nothing missed up to the top level"
    if not level > 0:
        return None, f"the simulator finds no load meeting the SLO ({at}{binds})"
    return level, at + binds
