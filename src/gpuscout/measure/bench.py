"""`gpuscout bench`: plan the cases of a job, run each in its own process, record a `BenchResult`.

Cases per job kind:

    finetune   one case: the job's own configuration (micro-batch, sequence, recipe)
    inference  one case per concurrency level: the job's `concurrency`, and 1 when that differs,
               so two levels are always measured (how latency and throughput trade as requests
               share the device); a job at concurrency 1 gives one case
    image      the image slice's planner (`measure.image_bench.plan_image_cases`)
    --probe    the machine probes (`measure.probes.plan_probe_cases`), after the job's cases, or
               alone when no job is given

Every case runs in a spawned process (`harness.run_isolated`): an out-of-memory error or a crash
is recorded with the size that failed and the next case runs. Ctrl-C stops the run: the case in
flight is recorded as `interrupted`, the rest are skipped, and the result says `complete=False`
so the caller can still write what finished.

torch is imported inside functions only (through the harness and the case modules).
"""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscout.errors import GpuscoutError
from gpuscout.measure.fingerprint import collect_fingerprint
from gpuscout.measure.harness import BenchSettings, PlannedCase, failed_case, resolve_device, run_watched
from gpuscout.measure.image_bench import plan_image_cases
from gpuscout.measure.llm_finetune import FINETUNE_UNIT_NOTE, plan_finetune_cases
from gpuscout.measure.llm_inference import FRAMEWORK_LOOP_NOTE, concurrency_levels, plan_inference_cases
from gpuscout.measure.llm_setup import LlmCaseSpec
from gpuscout.measure.probes import plan_probe_cases
from gpuscout.measure.progress import StepProgress, progress_for
from gpuscout.measure.video_bench import plan_video_cases
from gpuscout.results.runs import merge_runs
from gpuscout.results.schema import BenchResult, Case, FixedVariables, ResultKind, Scalar
from gpuscout.workload.checkpoint import checkpoint_hash
from gpuscout.workload.hf_config import config_depth, shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.resolve import llm_config, resolve_image, resolve_video
from gpuscout.workload.shape import DTYPE_BYTES

MEMORY_NOTE = ("peak memory views: torch allocated = live tensors; torch reserved = held by the caching allocator; "
               "NVML used = sampled every 10 ms, this process incl. the CUDA context (device-wide in "
               "nvml_device_used_bytes); process RSS = the case process's peak resident set (the CPU view)")
CONCURRENCY_NOTE = ("inference cases: the job's concurrency and 1 when it differs, so two levels are always "
                    "measured")


def run_bench(job: Job | None, *, base_dir: Path | None, settings: BenchSettings, probe: bool = False,
              progress: StepProgress | None = None, checkpoint: Callable[[BenchResult], None] | None = None,
              ) -> BenchResult:
    """Measure `job` (and/or the machine probes) on this machine; never raises for a failed case.

    `checkpoint` receives the result so far (complete=False) after every finished case, so a
    caller can keep it on disk: a kill of this process then loses at most the case in flight.
    """
    if job is None and not probe:
        raise GpuscoutError("Nothing to measure.", "bench needs a job spec, or --probe for the machine probes.",
                            "Pass a spec such as examples/tiny-finetune.toml, or add --probe.")
    device = resolve_device(settings.device)
    settings = settings.model_copy(update={"device": device})
    fingerprint = collect_fingerprint(device)
    model = _ModelRef.of(job, base_dir)
    plan = plan_cases(job, model, settings=settings, device=device, probe=probe, gpu_sku=fingerprint.gpu_sku)
    started = datetime.now(UTC)

    def result(cases: list[Case], complete: bool, run_notes: list[str]) -> BenchResult:
        return BenchResult(kind=_kind(job), created_at=started, name=job.name if job is not None else "machine probes",
                           job=job.model_dump(mode="json") if job is not None else {},
                           fixed=fixed_variables(job, model, settings, probe=probe), fingerprint=fingerprint,
                           cases=tuple(cases), complete=complete, notes=(*_result_notes(job), *run_notes))

    def keep(done: list[Case]) -> None:
        if checkpoint is not None:
            checkpoint(result(done, False, [f"partial: {len(done)} of {len(plan)} case(s) finished so far"]))

    return result(*run_planned(plan, settings, progress=progress, on_case=keep))


def plan_cases(job: Job | None, model: _ModelRef, *, settings: BenchSettings, device: str, probe: bool,
               gpu_sku: str | None) -> list[PlannedCase]:
    plan: list[PlannedCase] = []
    match job:
        case FinetuneJob() | InferenceJob():
            spec = LlmCaseSpec(name=job.name, params=_case_params(job, settings), job=job, config=model.config,
                               settings=settings, device=device, model_dir=model.model_dir, weights=model.weights,
                               gpu_sku=gpu_sku, concurrency=getattr(job, "concurrency", 1))
            if isinstance(job, FinetuneJob):
                plan += plan_finetune_cases(spec)
            else:
                plan += plan_inference_cases(spec, concurrency_levels(job))
        case ImageJob():
            plan += plan_image_cases(job, settings, device)
        case VideoJob():
            plan += plan_video_cases(job, settings, device)
    if probe:
        plan += plan_probe_cases(settings, device, model.bytes)
    return plan


def run_planned(plan: list[PlannedCase], settings: BenchSettings, *, progress: StepProgress | None = None,
                on_case: Callable[[list[Case]], None] | None = None) -> tuple[list[Case], bool, list[str]]:
    """Run every planned case `settings.runs` times, each in its own process: (cases, complete, notes).

    Runs are interleaved (run 1: every case; run 2: every case …) so that a slow period of the
    machine hits every case alike, and merged per case (`results.runs.merge_runs`). Ctrl-C,
    SIGTERM or SIGHUP (raised as KeyboardInterrupt, `interrupts.stop_on_signals`) kill the case in
    flight and return early with what finished; `on_case` sees the merged cases after each run of
    a case (a signal that arrives while it writes them stops the run once the write is done).
    """
    done: list[list[Case]] = [[] for _ in plan]
    runs = settings.runs
    with progress_for(progress)(len(plan) * runs) as advance:
        for run in range(runs):
            for index, planned in enumerate(plan):
                label = planned.name + (f" (run {run + 1} of {runs})" if runs > 1 else "")
                finished = run * len(plan) + index
                try:
                    advance(label, False)
                    case = run_watched(planned.fn, *planned.args, case=planned.name, size=planned.size,
                                       timeout_s=settings.timeout_s)
                    done[index].append(case)
                    finished += 1
                    if on_case is not None:
                        on_case(_merged(done))  # a signal during its write acts once the file is whole
                    advance(label, True)
                except KeyboardInterrupt as stop:
                    how = _stopped_by(stop)
                    if finished == run * len(plan) + index:  # the case was running: it is kept as interrupted
                        done[index].append(failed_case(planned.name, planned.size, "interrupted",
                                                       f"stopped by {how} while run {run + 1} of this case ran",
                                                       0.0))
                    return _merged(done), False, [f"interrupted by {how}: {finished} of {len(plan) * runs} "
                                                  "case runs finished"]
    return _merged(done), True, []


def _merged(done: list[list[Case]]) -> list[Case]:
    return [merge_runs(runs) for runs in done if runs]


def _stopped_by(stop: KeyboardInterrupt) -> str:
    signum = getattr(stop, "signum", None)
    return signal.Signals(signum).name if signum not in (None, signal.SIGINT) else "Ctrl-C"


class _ModelRef:
    """What the cases and the fixed variables need to know about the job's model."""

    def __init__(self, config: dict[str, Any], config_hash: str, model_dir: str | None, weights: bool,
                 model_bytes: int | None) -> None:
        self.config, self.config_hash, self.model_dir = config, config_hash, model_dir
        self.weights, self.bytes = weights, model_bytes

    @classmethod
    def of(cls, job: Job | None, base_dir: Path | None) -> _ModelRef:
        if job is None:
            return cls({}, "none", None, False, None)
        if isinstance(job, ImageJob):
            shape = resolve_image(job.model)
            denoiser = sum(c.params for c in shape.components if c.role == "denoiser")
            return cls({}, config_hash(shape.model_dump(mode="json")), None, False,
                       int(denoiser * DTYPE_BYTES[job.dtype]))
        if isinstance(job, VideoJob):
            video = resolve_video(job.model)
            transformer = video.component("denoiser").params
            return cls({}, config_hash(video.model_dump(mode="json")), None, False,
                       int(transformer * DTYPE_BYTES[job.dtype]))
        config = llm_config(job.model, base_dir=base_dir)
        path = _existing_path(job.model, base_dir)
        model_dir = path if path is not None and path.is_dir() else (path.parent if path is not None else None)
        weights = path is not None and path.is_dir() and any(path.glob("*.safetensors"))
        return cls(config, config_hash(config), str(model_dir) if model_dir else None, weights,
                   _llm_bytes(job, config))


def model_bytes(job: Job, base_dir: Path | None) -> int | None:
    """The job's weight bytes at its dtype (the checkpoint probe's size; `gpuscout doctor --job`)."""
    return _ModelRef.of(job, base_dir).bytes


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a config dict (sorted keys), so key order does not matter."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fixed_variables(job: Job | None, model: _ModelRef, settings: BenchSettings, *, probe: bool) -> FixedVariables:
    layers = settings.layers
    if isinstance(job, FinetuneJob | InferenceJob) and layers is not None and layers >= config_depth(model.config):
        layers = None  # asked for at least the full depth: nothing was sliced
    data = settings.dataset or "synthetic"
    return FixedVariables(
        kind=_kind(job),
        model=job.model if job is not None else "none",
        model_config_hash=model.config_hash,
        data=data,
        data_hash=file_hash(Path(settings.dataset)) if settings.dataset else None,
        seed=settings.seed,
        precision=_precision(job),
        device=settings.device,
        warmup=settings.warmup,
        repeats=settings.repeats,
        layers=layers,
        settings={**_case_params(job, settings), **_cpu_threads(settings.device), **({"probe": True} if probe else {})},
        region=settings.region,
        billing=settings.billing,
        checkpoint_hash=checkpoint_hash(Path(model.model_dir)) if model.weights and model.model_dir else None,
    )


def _cpu_threads(device: str) -> dict[str, Scalar]:
    """On the CPU the intra-op thread count changes every timing, so a fair comparison fixes it.
    The cases' processes inherit the environment (OMP_NUM_THREADS), so they get this count too."""
    if device != "cpu":
        return {}
    import torch

    return {"torch_threads": int(torch.get_num_threads())}


def _case_params(job: Job | None, settings: BenchSettings) -> dict[str, Scalar]:
    match job:
        case FinetuneJob():
            targets = job.lora.target_modules
            return {"method": job.method, "precision": job.precision, "optimizer": job.optimizer,
                    "micro_batch": job.micro_batch, "seq_len": job.seq_len, "grad_accum": job.grad_accum,
                    "gradient_checkpointing": job.gradient_checkpointing, "attention": job.attention,
                    "lora_rank": job.lora.rank if job.method != "full" else None,
                    "lora_alpha": job.lora.alpha if job.method != "full" else None,
                    "lora_targets": (targets if isinstance(targets, str) else ",".join(targets))
                    if job.method != "full" else None,
                    "checkpoint_policy": job.checkpoint_policy, "activation_offload": job.activation_offload,
                    "optimizer_in_backward": job.optimizer_in_backward, "compile": job.compile,
                    "packing": job.packing, "sample_tokens": job.sample_tokens, "padding": job.padding}
        case InferenceJob():
            return {"weights": job.weights, "kv_cache_dtype": job.kv_cache_dtype, "prompt_tokens": job.prompt_tokens,
                    "output_tokens": job.output_tokens,
                    "concurrency_levels": ",".join(str(c) for c in concurrency_levels(job))}
        case ImageJob():
            return {"width": job.width, "height": job.height, "steps": job.steps, "batch": job.batch,
                    "guidance": job.guidance, "dtype": job.dtype, "attention": job.attention,
                    "vae_tiling": job.vae_tiling, "vae_slicing": job.vae_slicing, "offload": job.offload}
        case VideoJob():
            return {"width": job.width, "height": job.height, "frames": job.frames, "steps": job.steps,
                    "batch": job.batch, "guidance": job.guidance, "dtype": job.dtype, "attention": job.attention,
                    "vae_tiling": job.vae_tiling, "offload": job.offload}
    return {}


def _precision(job: Job | None) -> str:
    match job:
        case FinetuneJob():
            return job.precision
        case InferenceJob():
            return job.weights
        case ImageJob() | VideoJob():
            return job.dtype
    return "per probe"


def _kind(job: Job | None) -> ResultKind:
    return job.kind if job is not None else "probe"


def _result_notes(job: Job | None) -> tuple[str, ...]:
    match job:
        case FinetuneJob():
            return (FINETUNE_UNIT_NOTE, MEMORY_NOTE)
        case InferenceJob():
            return (FRAMEWORK_LOOP_NOTE, CONCURRENCY_NOTE, MEMORY_NOTE)
    return (MEMORY_NOTE,)


def _llm_bytes(job: FinetuneJob | InferenceJob, config: dict[str, Any]) -> int | None:
    """Weight bytes at the job's dtype, for the checkpoint save/load probe."""
    try:
        params = shape_from_hf_config(config, name="bench", source="bench").params_total
    except GpuscoutError:
        return None
    dtype = job.weights if isinstance(job, InferenceJob) else ("fp32" if job.precision == "fp32" else "bf16")
    return int(params * DTYPE_BYTES[dtype])


def _existing_path(ref: str, base_dir: Path | None) -> Path | None:
    """The model path as `workload.resolve` finds it: as given, then relative to the spec's folder."""
    for candidate in (Path(ref), (base_dir / ref) if base_dir else None):
        if candidate is not None and candidate.exists():
            return candidate.resolve()
    return None
