"""Image slice of `gpuscout bench`: the real diffusers denoiser and VAE, timed at the job's sizes.

One case per job, in its own process (`harness.run_isolated`). The preset's denoiser
(`UNet2DConditionModel` or `FluxTransformer2DModel`) and `AutoencoderKL` are built from the stored
configs with diffusers' own random initialisation on the benchmark device (the same builders as
the trace mode, `torchmodel.image`; nothing is downloaded). Text conditioning is random tensors of the
shape the text encoders produce. One repeat is what the diffusers pipeline does for one batch:

    text encoders once (CLIP-class encoders only, see TEXT_ENCODER_PARAMS_LIMIT)
    + `steps` × (denoiser forward at batch × passes, the guidance combine, a scheduler-like update)
    + one VAE decode of the batch's latents

where passes is 2 with classifier-free guidance (conditional and unconditional as one doubled
batch), except FLUX.1-dev, which is guidance-distilled and runs one pass (`denoiser_passes`).

Each phase is bracketed by CUDA events on a GPU (perf_counter_ns on the CPU) and the raw samples
are kept (docs/measurement.md §1). The scheduler is not diffusers' own: an Euler-like
update of the latents stands in for it (a few element-wise ops per step).

torch, diffusers and transformers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from gpuscout.errors import UnsupportedHere
from gpuscout.measure.harness import BenchSettings, PlannedCase, derived_metric, timed_metric
from gpuscout.measure.peak_memory import PeakMemoryMonitor
from gpuscout.measure.startup import StartupClock, startup_seconds
from gpuscout.results.schema import Case, Metric, Scalar
from gpuscout.torchmodel.image import (
    ImageAttention,
    build_image_model,
    denoiser_inputs,
    denoiser_passes,
    image_component,
    latent_hw,
    require_divisible,
    vae_run_dtype,
)
from gpuscout.workload.image import ImageModelShape, image_component_configs, load_image_preset
from gpuscout.workload.job import ImageJob
from gpuscout.workload.jobtime import whole_job_formula, whole_job_s

# Text encoders are built and timed when all of them together are at most this size: CLIP ViT-L
# (123 M) and OpenCLIP bigG (695 M) build in seconds. FLUX.1-dev's T5-XXL (4.8 B) would cost more
# build time than its one call per batch is worth measuring; its time is left out and noted.
TEXT_ENCODER_PARAMS_LIMIT = 1_500_000_000
_GUIDANCE_SCALE = 7.5  # StableDiffusionPipeline's default; only the arithmetic matters here
_STEP_SIZE = 0.05  # Euler-like update; keeps random-weight latents finite over a few steps


def plan_image_cases(job: ImageJob, settings: BenchSettings, device: str) -> list[PlannedCase]:
    """One case at the job's width, height, batch, steps, guidance and dtype."""
    name = f"image {job.width}x{job.height} batch {job.batch} {job.steps} steps"
    size: dict[str, Scalar] = {"model": job.model, "width": job.width, "height": job.height, "batch": job.batch,
                               "steps": job.steps, "guidance": job.guidance, "dtype": job.dtype}
    return [PlannedCase(name=name, fn=run_image_case, args=(job, settings, device, name), size=size)]


def passes_per_step(job: ImageJob, shape: ImageModelShape) -> int:
    """Denoiser batch multiplier of one step: 2 with guidance, 1 without or for FLUX.1-dev."""
    return denoiser_passes(shape, job.guidance)


def measures_text_encoders(shape: ImageModelShape) -> bool:
    """Whether the text encoders are cheap enough to build and time (see TEXT_ENCODER_PARAMS_LIMIT)."""
    return sum(c.params for c in shape.components if c.role == "text_encoder") <= TEXT_ENCODER_PARAMS_LIMIT


def run_image_case(job: ImageJob, settings: BenchSettings, device: str, case_name: str) -> Case:
    """Build, warm up and time the job's image generation; module-level so spawn can pickle it."""
    wall_start = time.perf_counter()
    shape = load_image_preset(job.model)
    require_divisible(shape, job.width, job.height, action="benchmark")
    if job.offload != "none":
        raise UnsupportedHere(f"offload = {job.offload!r} is not benchmarked yet: the image slice keeps every "
                              "component on the device, which would be a different job. Measure with "
                              'offload = "none".')
    clock = StartupClock(settings.created_at)
    import diffusers  # noqa: F401  (timed: part of the startup a user pays)
    import torch

    clock.mark("imports")
    clock.init_cuda(torch, device)
    torch.manual_seed(settings.seed)
    monitor = PeakMemoryMonitor(device)
    with monitor:
        pipe = _build_pipeline(job, shape, device)
        _sync(device)
        clock.mark("model_build")
        # Random weights are initialised in fp32 and then cast, a transient that loading a real
        # checkpoint in the job's dtype does not have: count the peak from here (GPU views only;
        # a process's peak RSS cannot be reset).
        monitor.restart()
        pipe.notes.append("torch/NVML peaks count from the end of the model build (random fp32 init, then the cast)"
                          if device == "cuda" else "peak RSS includes building the random weights in fp32")
        with torch.inference_mode():
            started, t0 = time.time(), time.perf_counter()
            _denoise_step(pipe)
            _sync(device)
            clock.first_step(time.perf_counter() - t0, started_at=started)
            for _ in range(settings.warmup):
                _generate(pipe, _Clock(device))
            timings = [_generate(pipe, _Clock(device)) for _ in range(settings.repeats)]
    if settings.layers:
        pipe.notes.append("--layers does not apply to image models: the full denoiser was built")
    return Case(
        name=case_name,
        params=_params(job, pipe, device),
        metrics=_metrics(job, shape, pipe, timings, startup_seconds(clock.phases())),
        peak_memory=monitor.result(),
        startup=clock.phases(),
        wall_s=time.perf_counter() - wall_start,
        notes=tuple(pipe.notes),
    )


# --- building ---------------------------------------------------------------------------------------


@dataclass
class _Pipeline:
    denoiser: Any
    vae: Any
    inputs: dict[str, Any]  # denoiser inputs; the latent entry is updated every step
    latent_key: str  # "sample" (UNet) or "hidden_states" (FLUX tokens)
    latents: Any  # the batch's latents, batch × … (the denoiser sees them `passes` times)
    vae_latents: Any  # what the VAE decodes: batch × latent channels × h × w in the VAE's dtype
    passes: int
    steps: int
    vae_dtype: str
    attention: ImageAttention
    encoders: list[tuple[Any, Any]] = field(default_factory=list)  # (model, input_ids) per text encoder
    notes: list[str] = field(default_factory=list)


def _build_pipeline(job: ImageJob, shape: ImageModelShape, device: str) -> _Pipeline:
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    configs = image_component_configs(job.model)
    denoiser_part, vae_part = image_component(shape, "denoiser"), image_component(shape, "vae")
    attention: ImageAttention = "eager" if job.attention == "eager" else "sdpa"
    vae_dtype = vae_run_dtype(vae_part, job.dtype)
    passes = passes_per_step(job, shape)
    denoiser = build_image_model(configs[denoiser_part.name], dtypes[job.dtype], attention, device)
    vae = build_image_model(configs[vae_part.name], dtypes[vae_dtype], attention, device)
    if job.vae_tiling:
        vae.enable_tiling()
    if job.vae_slicing:
        vae.enable_slicing()
    inputs = denoiser_inputs(shape, configs[denoiser_part.name], job.width, job.height, job.batch * passes,
                             dtypes[job.dtype], device=device, random=True)
    key = "sample" if shape.denoiser_kind == "unet" else "hidden_states"
    latents = inputs[key][: job.batch].clone()
    vae_latents = torch.randn(job.batch, shape.latent_channels, *latent_hw(shape, job.width, job.height),
                              dtype=dtypes[vae_dtype], device=device)
    pipe = _Pipeline(denoiser=denoiser, vae=vae, inputs=inputs, latent_key=key, latents=latents,
                     vae_latents=vae_latents, passes=passes, steps=job.steps, vae_dtype=vae_dtype, attention=attention)
    if job.attention == "flash":
        pipe.notes.append("attention 'flash' runs as SDPA, which dispatches to the flash kernel where it can")
    if measures_text_encoders(shape):
        pipe.encoders = _build_text_encoders(job, shape, configs, dtypes[job.dtype], device)
    else:
        pipe.notes.append("text encoders not built or timed (T5-XXL class: too costly to build for one call "
                          "per batch); s_per_image leaves out text encoding")
    return pipe


def _build_text_encoders(job: ImageJob, shape: ImageModelShape, configs: dict[str, dict[str, Any]], dtype: Any,
                         device: str) -> list[tuple[Any, Any]]:
    """transformers text encoders with random weights, and random token ids of their length."""
    import torch
    import transformers

    prompts = job.batch * (2 if job.guidance and shape.family != "flux" else 1)  # prompt + negative prompt
    built = []
    for part in (c for c in shape.components if c.role == "text_encoder"):
        config = configs[part.name]
        model_class = getattr(transformers, config["architectures"][0])
        with torch.device(device):
            model = model_class(model_class.config_class.from_dict(config))
        torch.nn.Module.to(model, dtype)
        model.eval()
        tokens = config.get("max_position_embeddings", shape.text_tokens)
        ids = torch.randint(0, config["vocab_size"], (prompts, tokens), device=device)
        built.append((model, ids))
    return built


# --- running ----------------------------------------------------------------------------------------


def _denoise_step(pipe: _Pipeline) -> None:
    """One denoiser forward, the guidance combine and an Euler-like latent update."""
    import torch

    out = pipe.denoiser(**pipe.inputs, return_dict=False)[0]
    if pipe.passes == 2:
        uncond, cond = out.chunk(2)
        out = uncond + _GUIDANCE_SCALE * (cond - uncond)
    pipe.latents = pipe.latents - _STEP_SIZE * out
    pipe.inputs[pipe.latent_key] = torch.cat([pipe.latents] * pipe.passes) if pipe.passes > 1 else pipe.latents


@dataclass
class _Timing:
    text_s: float | None
    step_s: list[float]
    vae_s: float

    @property
    def batch_s(self) -> float:
        return (self.text_s or 0.0) + sum(self.step_s) + self.vae_s


def _generate(pipe: _Pipeline, clock: _Clock) -> _Timing:
    """One batch as the pipeline makes it, each phase between two clock marks."""
    marks = [clock.mark()]
    for encoder, ids in pipe.encoders:
        encoder(ids, output_hidden_states=True)
    text_mark = clock.mark() if pipe.encoders else None
    step_marks = []
    for _ in range(pipe.steps):
        _denoise_step(pipe)
        step_marks.append(clock.mark())
    pipe.vae.decode(pipe.vae_latents, return_dict=False)
    end = clock.mark()
    clock.wait(end)
    start = text_mark if text_mark is not None else marks[0]
    bounds = [start, *step_marks]
    return _Timing(
        text_s=clock.seconds(marks[0], text_mark) if text_mark is not None else None,
        step_s=[clock.seconds(a, b) for a, b in itertools.pairwise(bounds)],
        vae_s=clock.seconds(step_marks[-1], end),
    )


class _Clock:
    """Phase marks: CUDA events on the current stream on a GPU, perf_counter_ns on the CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter_ns()
        import torch

        cuda: Any = torch.cuda  # Event is untyped in torch's stubs
        event = cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, mark: Any) -> None:
        if self.cuda:
            mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0 if self.cuda else (end - start) / 1e9


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


# --- reporting --------------------------------------------------------------------------------------


def _metrics(job: ImageJob, shape: ImageModelShape, pipe: _Pipeline, timings: list[_Timing],
             startup_s: float) -> tuple[Metric, ...]:
    batch_s = [t.batch_s for t in timings]
    text = "text encoders + " if pipe.encoders else ""
    per_image = f"({text}{job.steps} × denoiser step + VAE decode) / batch {job.batch}"
    metrics = [
        timed_metric("s_per_image", "s", [s / job.batch for s in batch_s],
                     note=per_image + ("" if pipe.encoders else "; text encoding not measured (see the case notes)")),
        derived_metric("images_per_s", "images/s", [job.batch / s for s in batch_s], note=f"batch {job.batch} / "
                       "seconds per batch"),
        timed_metric("denoiser_step_s", "s", [s for t in timings for s in t.step_s],
                     note=f"one forward at batch {job.batch} × {pipe.passes} pass(es) "
                          + _passes_why(job, shape, pipe.passes) + ", guidance combine and latent update"),
        timed_metric("vae_decode_s", "s", [t.vae_s for t in timings],
                     note=f"AutoencoderKL decode of batch {job.batch} in {pipe.vae_dtype}"
                          + (" with tiling" if job.vae_tiling else "")),
    ]
    if pipe.encoders:
        metrics.append(timed_metric("text_encode_s", "s", [t.text_s or 0.0 for t in timings],
                                    note=f"{len(pipe.encoders)} text encoder(s), once per batch"))
    metrics.append(timed_metric("job_s", "s", [whole_job_s(job, s, startup_s=startup_s) for s in batch_s],
                                note="projected: " + whole_job_formula(job, startup_s=startup_s, save_s=None)))
    return tuple(metrics)


def _passes_why(job: ImageJob, shape: ImageModelShape, passes: int) -> str:
    if passes == 2:
        return "(classifier-free guidance: conditional and unconditional as one doubled batch)"
    if job.guidance and shape.family == "flux":
        return "(FLUX.1-dev is guidance-distilled: one pass, guidance is an embedding)"
    return "(guidance off)"


def _params(job: ImageJob, pipe: _Pipeline, device: str) -> dict[str, Scalar]:
    return {"model": job.model, "width": job.width, "height": job.height, "batch": job.batch, "steps": job.steps,
            "guidance": job.guidance, "dtype": job.dtype, "attention": pipe.attention, "vae_tiling": job.vae_tiling,
            "vae_slicing": job.vae_slicing,
            "denoiser_batch": job.batch * pipe.passes, "vae_dtype": pipe.vae_dtype,
            "text_encoders_timed": bool(pipe.encoders), "device": device}
