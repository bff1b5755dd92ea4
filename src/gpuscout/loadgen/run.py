"""Orchestration: workload + load shapes → runs → cases → one `BenchResult` of kind "load".

One case per load level (a single shape, a sweep, or the levels an SLO search measured). The client
machine's fingerprint is recorded (the server is remote: its hardware is whatever the user rented);
the API key never enters the result. Pricing is not done here: cost is an opinion computed from the
stored result at report time (docs/design.md §3), by the CLI.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscout.host import cpu_model, package_version, ram_bytes, usable_cores
from gpuscout.loadgen.client import Endpoint, LoadInterrupted, LoadRun, run_load_sync
from gpuscout.loadgen.context import Progress
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import Workload
from gpuscout.results.schema import BenchResult, Case, Fingerprint, FixedVariables
from gpuscout.workload.job import Slo

ProgressFactory = Callable[[LoadShape], Progress | None]


def measure_case(url: str, model: str, workload: Workload, shape: LoadShape, *, endpoint: Endpoint, stream: bool,
                 api_key_env: str | None, timeout_s: float | None, slo: Slo | None, percentile: float,
                 progress: Progress | None = None, extra_body: dict[str, Any] | None = None,
                 metrics_url: str | None = None, workers: int = 1) -> tuple[LoadRun, Case]:
    """One run of one level: in this process, or in `workers` processes sharing its schedule."""
    options: dict[str, Any] = {"endpoint": endpoint, "stream": stream, "api_key_env": api_key_env,
                               "timeout_s": timeout_s, "extra_body": extra_body, "metrics_url": metrics_url}
    if workers > 1:
        from gpuscout.loadgen.workers import run_load_workers

        run = run_load_workers(url, model, workload, shape, workers=workers, progress=progress, **options)
    else:
        run = run_load_sync(url, model, workload, shape, progress=progress, **options)
    try:
        return run, summarize_load(run, slo=slo, percentile_needed=percentile)
    except KeyboardInterrupt as stop:  # the level was measured whole: it is kept, as a stopped one
        raise LoadInterrupted(run, getattr(stop, "signum", None)) from stop


def build_result(*, url: str, model: str, workload: Workload, workload_hash: str | None, cases: list[Case],
                 shapes: list[LoadShape], endpoint: Endpoint, stream: bool, notes: tuple[str, ...] = (),
                 name: str | None = None, complete: bool = True, region: str | None = None,
                 billing: str | None = None,
                 extra_settings: dict[str, str | int | float | bool | None] | None = None,
                 server_gpu: str | None = None, server_gpus: int = 1) -> BenchResult:
    """The result of a load test; `url` must already be redacted (`client.endpoint_url`). The fingerprint
    is the client's machine; with `server_gpu` its GPU fields name the server's GPUs, the machine under test
    (listed beside another result's by compare, never held equal; read by `pick --load`)."""
    first = shapes[0]
    out_tokens = sorted({p.output_tokens for p in workload.prompts})
    stream = stream and endpoint != "images"  # an image generation answers with one body
    settings: dict[str, str | int | float | bool | None] = {
        "endpoint": endpoint, "stream": stream, "arrival": first.kind,
        "levels": ",".join(f"{_level(s):g}" for s in dict.fromkeys(shapes)),
        "burstiness": first.burstiness if first.kind == "gamma" else None, "requests": first.requests,
        "duration_s": first.duration_s, "output_tokens": out_tokens[0] if len(out_tokens) == 1 else str(out_tokens),
        "prompts": len(workload.prompts), "workload": workload.description, "tokenizer": workload.tokenizer,
    }
    settings |= {k: v for k, v in (extra_settings or {}).items() if v is not None}
    fixed = FixedVariables(kind="load", model=model, model_config_hash=_sha256(model.encode()), data=workload.source,
                           data_hash=workload_hash or _sha256(workload.model_dump_json().encode()), seed=workload.seed,
                           precision="server-defined", device="remote", warmup=first.warmup_requests, repeats=1,
                           settings=settings, region=region, billing=billing)
    job: dict[str, Any] = {"url": url, "model": model, "endpoint": endpoint, "stream": stream}
    fingerprint = client_fingerprint()
    if server_gpu is not None:
        fingerprint = fingerprint.model_copy(update={"gpu_name": server_gpu, "gpu_count": server_gpus})
    return BenchResult(kind="load", created_at=datetime.now(UTC), name=name or f"load {model} @ {url}", job=job,
                       fixed=fixed, fingerprint=fingerprint, cases=tuple(cases), notes=notes, complete=complete)


def _level(shape: LoadShape) -> float:
    if shape.kind == "trace":
        return shape.speedup
    return float(shape.concurrency if shape.concurrency is not None else shape.rate_rps or 0)


def file_sha256(path: Path) -> str:
    return _sha256(path.read_bytes())


def client_fingerprint() -> Fingerprint:
    """The load generator's machine: its CPU bounds how much load it can offer."""
    return Fingerprint(gpuscout_version=package_version("gpuscout") or "unknown", python=sys.version.split()[0],
                       platform=platform.platform(), cpu_model=cpu_model(), cpu_cores=usable_cores(),
                       ram_bytes=ram_bytes(),
                       libraries={k: v for k in ("pydantic", "msgspec") if (v := package_version(k))})


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
