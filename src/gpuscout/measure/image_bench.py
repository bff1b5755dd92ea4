"""Image slice of `gpuscout bench`: the real diffusers denoiser and VAE, timed at the job's sizes.

One case per job, in its own process (`harness.run_isolated`). The preset's denoiser
(`UNet2DConditionModel` or `FluxTransformer2DModel`) and `AutoencoderKL` are built from the stored
configs with diffusers' own random initialisation on the benchmark device (the same builders as
the trace mode, `torchmodel.image`; nothing is downloaded). Text conditioning is random tensors of the
shape the text encoders produce. One repeat is what the diffusers pipeline does for one batch:

    text encoders once (CLIP-class encoders only, see generation.TEXT_ENCODER_PARAMS_LIMIT)
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

import time
from dataclasses import dataclass, field
from typing import Any

from gpuscout.measure.generation import (
    STEP_SIZE,
    PhaseClock,
    Timing,
    generate,
    random_text_encoder,
    refuse_offload,
    text_encoders_fit,
    time_generation,
)
from gpuscout.measure.harness import BenchSettings, PlannedCase, derived_metric, timed_metric
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

_GUIDANCE_SCALE = 7.5  # StableDiffusionPipeline's default; only the arithmetic matters here


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
    """Whether the text encoders are cheap enough to build and time (see generation.TEXT_ENCODER_PARAMS_LIMIT)."""
    return text_encoders_fit(shape.components)


def run_image_case(job: ImageJob, settings: BenchSettings, device: str, case_name: str) -> Case:
    """Build, warm up and time the job's image generation; module-level so spawn can pickle it."""
    wall_start = time.perf_counter()
    shape = load_image_preset(job.model)
    require_divisible(shape, job.width, job.height, action="benchmark")
    refuse_offload(job.offload, "image")
    timed = time_generation(settings, device, build=lambda: _build_pipeline(job, shape, device),
                            one_batch=_generate, step=_denoise_step)
    if settings.layers:
        timed.pipe.notes.append("--layers does not apply to image models: the full denoiser was built")
    return timed.case(case_name, _params(job, timed.pipe, device),
                      _metrics(job, shape, timed.pipe, timed.timings, timed.startup_s), wall_start)


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
    prompts = job.batch * (2 if job.guidance and shape.family != "flux" else 1)  # prompt + negative prompt
    built = []
    for part in (c for c in shape.components if c.role == "text_encoder"):
        config = configs[part.name]
        tokens = config.get("max_position_embeddings", shape.text_tokens)
        built.append(random_text_encoder(config, dtype, device, prompts, tokens))
    return built


# --- running ----------------------------------------------------------------------------------------


def _denoise_step(pipe: _Pipeline) -> None:
    """One denoiser forward, the guidance combine and an Euler-like latent update."""
    import torch

    out = pipe.denoiser(**pipe.inputs, return_dict=False)[0]
    if pipe.passes == 2:
        uncond, cond = out.chunk(2)
        out = uncond + _GUIDANCE_SCALE * (cond - uncond)
    pipe.latents = pipe.latents - STEP_SIZE * out
    pipe.inputs[pipe.latent_key] = torch.cat([pipe.latents] * pipe.passes) if pipe.passes > 1 else pipe.latents


def _generate(pipe: _Pipeline, clock: PhaseClock) -> Timing:
    return generate(pipe, clock, encode=_encode if pipe.encoders else None, step=_denoise_step,
                    decode=lambda p: p.vae.decode(p.vae_latents, return_dict=False))


def _encode(pipe: _Pipeline) -> None:
    for encoder, ids in pipe.encoders:
        encoder(ids, output_hidden_states=True)


# --- reporting --------------------------------------------------------------------------------------


def _metrics(job: ImageJob, shape: ImageModelShape, pipe: _Pipeline, timings: list[Timing],
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
