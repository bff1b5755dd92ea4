"""Synthetic bench results with known samples, shared by the compare, measured-cost and CLI tests.

They are built directly from the schema, so these tests do not depend on `gpuscout bench`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscout.measure.gpu_telemetry import summarize_gpu
from gpuscout.measure.telemetry import build_telemetry
from gpuscout.results.runs import merge_runs
from gpuscout.results.schema import (
    BenchResult,
    Case,
    CpuTelemetry,
    Failure,
    Fingerprint,
    FixedVariables,
    Metric,
    PeakMemory,
    StartupPhase,
    Telemetry,
)
from gpuscout.results.store import save_result
from gpuscout.stats import summarize
from readings import THERMAL, a100, h100, run

GIB = 1024**3
# A: about 1000 tokens/s with a little deterministic noise.
BASE_TPS = (1000.0, 1012.0, 990.0, 1005.0, 996.0, 1008.0, 993.0, 1001.0)
H100 = {"gpu_sku": "h100-sxm5-80gb", "gpu_name": "NVIDIA H100 80GB HBM3", "driver": "570.86", "cuda": "12.8"}
# The same driver and CUDA as H100: software versions are fixed variables (a difference blocks a verdict).
A100 = {"gpu_sku": "a100-sxm4-80gb", "gpu_name": "NVIDIA A100-SXM4-80GB", "driver": "570.86", "cuda": "12.8"}
LIBRARIES = {"torch": "2.6.0", "transformers": "4.50.0"}
FINETUNE_JOB: dict[str, Any] = {"kind": "finetune", "name": "tiny fine-tune", "model": "llama-3-8b",
                                "method": "lora", "micro_batch": 1, "seq_len": 512,
                                "dataset_tokens": 36_000_000, "epochs": 1.0}


def metric(name: str, samples: Sequence[float], unit: str, *, higher: bool = True,
           extrapolated: bool = False) -> Metric:
    s = summarize(samples)
    return Metric(name=name, unit=unit, value=s.mean, samples=tuple(samples), summary=s, higher_is_better=higher,
                  extrapolated=extrapolated)


def train_case(tps: Sequence[float], *, name: str = "train", seq_len: int = 512, nvml_gib: float = 20.0,
               total_gib: float | None = 80.0, extra: Sequence[Metric] = ()) -> Case:
    step = [seq_len / t for t in tps]
    return Case(name=name, params={"micro_batch": 1, "seq_len": seq_len},
                metrics=(metric("step_s", step, "s", higher=False), metric("tokens_per_s", tps, "tokens/s"),
                         *extra),
                peak_memory=PeakMemory(torch_allocated_bytes=int(15 * GIB), nvml_used_bytes=int(nvml_gib * GIB),
                                       device_total_bytes=int(total_gib * GIB) if total_gib else None),
                startup=(StartupPhase(name="imports", seconds=3.0), StartupPhase(name="model_build", seconds=12.0)))


QUIET_CPU = CpuTelemetry(elapsed_s=30.0, cpus_watched=32, usable_cores=32, own_cpu_s=31.0, own_cores=1.03,
                         busy_cores=1.1, other_load_cores=0.07, steal_s=0.0, steal_fraction=0.0, iowait_fraction=0.0)


def recorded_telemetry(gpu: str = "h100", *, throttled: bool = False) -> Telemetry:
    """Telemetry judged from recorded NVML readings: 200 busy samples at full clocks, or with a
    thermal throttle over 35% of them."""
    make = h100 if gpu == "h100" else a100
    readings = run(make, 200, episode=range(100, 170) if throttled else (), **(THERMAL if throttled else {}))
    return build_telemetry(summarize_gpu(readings), QUIET_CPU)


def runs_case(per_run_tps: Sequence[Sequence[float]], *, gpu: str = "h100", throttled_run: int | None = None,
              **options: Any) -> Case:
    """A train case run once per element of `per_run_tps`, merged as `bench --runs N` merges it, each run
    with its telemetry (run number `throttled_run` counted from 1 throttled)."""
    runs = [train_case(tps, **options).model_copy(update={
        "telemetry": (recorded_telemetry(gpu, throttled=n == throttled_run),)})
        for n, tps in enumerate(per_run_tps, 1)]
    return merge_runs(runs)


def failed_case(name: str, kind: str = "oom") -> Case:
    size = {"micro_batch": 8, "seq_len": 512}
    return Case(name=name, params=size, failure=Failure(case=name, kind=kind, message="CUDA out of memory",  # type: ignore[arg-type]
                                                        size=size))


def bench_result(name: str = "A", *, tps: Sequence[float] = BASE_TPS, kind: str = "finetune",
                 gpu: dict[str, str] | None = None, device: str = "cuda", settings: dict[str, Any] | None = None,
                 libraries: dict[str, str] | None = None, job: dict[str, Any] | None = None,
                 cases: Sequence[Case] | None = None, layers: int | None = None,
                 gpu_count: int = 1) -> BenchResult:
    fixed_settings = {"micro_batch": 1, "seq_len": 512} | (settings or {})
    return BenchResult(
        kind=kind,  # type: ignore[arg-type]
        created_at=datetime(2026, 11, 1, tzinfo=UTC),
        name=name,
        job=FINETUNE_JOB if job is None else job,
        fixed=FixedVariables(kind=kind, model="llama-3-8b", model_config_hash="abc123", data="synthetic",  # type: ignore[arg-type]
                             seed=0, precision="bf16_mixed", device=device, warmup=2, repeats=len(tps),
                             layers=layers, settings=fixed_settings),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11.9", platform="Linux", cpu_model="EPYC",
                                cpu_cores=32, libraries=LIBRARIES | (libraries or {}),
                                gpu_count=gpu_count, **(H100 if gpu is None else gpu)),
        cases=tuple(cases) if cases is not None else (train_case(tps),),
    )


def write(result: BenchResult, folder: Path, filename: str | None = None) -> Path:
    path = folder / (filename or f"{result.name}.json")
    save_result(result, path)
    return path
