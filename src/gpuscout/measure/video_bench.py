"""Video slice of `gpuscout bench`: the real diffusers video transformer and VAE, timed at the job's sizes.

One case per job, in its own process (`harness.run_isolated`), as the image slice
(`measure.image_bench`). The preset's transformer and VAE (Wan: `WanTransformer3DModel`,
`AutoencoderKLWan`; CogVideoX: `CogVideoXTransformer3DModel`, `AutoencoderKLCogVideoX`) are built
from the stored configs with diffusers' random initialisation on the benchmark device (nothing is
downloaded). One repeat is what the family's pipeline does for one batch of clips:

    text encoder once (only when small enough to build, see measure.generation)
    + `steps` × (the conditional and, with guidance, the unconditional transformer pass: a second
                 forward in WanPipeline, one forward at twice the batch in CogVideoXPipeline;
                 the guidance combine and an Euler-like latent update)
    + one VAE decode of the latents to `frames` frames

Text conditioning is random states of the encoder's shape (512 × 4096 for UMT5-XXL, 226 × 4096 for
T5-XXL). CogVideoX-5B's rotary embeddings come from CogVideoXPipeline's own helper. The
scheduler is an Euler-like update, not diffusers' own. Each phase is bracketed by CUDA events on a
GPU (perf_counter_ns on the CPU); the raw samples are kept (docs/measurement.md §1).

torch and diffusers are imported inside functions only: importing this module is cheap.
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
from gpuscout.torchmodel.image import ImageAttention, build_image_model
from gpuscout.workload.job import VideoJob
from gpuscout.workload.jobtime import whole_job_formula, whole_job_s
from gpuscout.workload.video import VideoModelShape, check_video_size, load_video_preset, video_component_configs

_GUIDANCE_SCALE = 5.0  # WanPipeline's default guidance_scale; only the arithmetic matters here


def plan_video_cases(job: VideoJob, settings: BenchSettings, device: str) -> list[PlannedCase]:
    """One case at the job's width, height, frames, batch, steps, guidance and dtype."""
    name = f"video {job.width}x{job.height}x{job.frames} batch {job.batch} {job.steps} steps"
    size: dict[str, Scalar] = {"model": job.model, "width": job.width, "height": job.height, "frames": job.frames,
                               "batch": job.batch, "steps": job.steps, "guidance": job.guidance, "dtype": job.dtype,
                               "vae_tiling": job.vae_tiling, "offload": job.offload}
    return [PlannedCase(name=name, fn=run_video_case, args=(job, settings, device, name), size=size)]


def passes_per_step(job: VideoJob) -> int:
    """Transformer passes per step: 2 with guidance (separate in Wan, batched in CogVideoX), else 1."""
    return 2 if job.guidance else 1


def measures_text_encoder(shape: VideoModelShape) -> bool:
    """Whether the text encoder is cheap enough to build and time (see generation.TEXT_ENCODER_PARAMS_LIMIT)."""
    return text_encoders_fit(shape.components)


def run_video_case(job: VideoJob, settings: BenchSettings, device: str, case_name: str) -> Case:
    """Build, warm up and time the job's video generation; module-level so spawn can pickle it."""
    wall_start = time.perf_counter()
    shape = load_video_preset(job.model)
    check_video_size(shape, job.width, job.height, job.frames)
    refuse_offload(job.offload, "video")
    timed = time_generation(settings, device, build=lambda: _build(job, shape, device), one_batch=_generate,
                            step=_step)
    if settings.layers:
        timed.pipe.notes.append("--layers does not apply to video models: the full transformer was built")
    return timed.case(case_name, _params(job, timed.pipe, device),
                      _metrics(job, timed.pipe, timed.timings, timed.startup_s), wall_start)


@dataclass
class _Pipe:
    transformer: Any
    vae: Any
    inputs: dict[str, Any]  # transformer inputs; hidden_states is updated every step
    latents: Any
    vae_latents: Any
    passes: int
    steps: int
    vae_dtype: str
    batched_guidance: bool = False  # one forward at twice the batch (CogVideoXPipeline)
    encoder: tuple[Any, Any] | None = None  # (model, input_ids)
    notes: list[str] = field(default_factory=list)


def _build(job: VideoJob, shape: VideoModelShape, device: str) -> _Pipe:
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    configs = video_component_configs(job.model)
    vae_part = shape.component("vae")
    vae_dtype = "fp32" if vae_part.default_dtype == "fp32" else job.dtype
    attention: ImageAttention = "eager" if job.attention == "eager" else "sdpa"
    transformer = build_image_model(configs[shape.component("denoiser").name], dtypes[job.dtype], attention, device)
    vae = build_image_model(configs[vae_part.name], dtypes[vae_dtype], attention, device)
    if job.vae_tiling:
        vae.enable_tiling()
    lat = (shape.latent_frames(job.frames), job.height // shape.vae_scale_spatial, job.width // shape.vae_scale_spatial)
    inputs = _transformer_inputs(job, shape, transformer, lat, dtypes[job.dtype], device)
    vae_latents = torch.randn(job.batch, shape.latent_channels, *lat, dtype=dtypes[vae_dtype], device=device)
    pipe = _Pipe(transformer=transformer, vae=vae, inputs=inputs, latents=inputs["hidden_states"],
                 vae_latents=vae_latents, passes=passes_per_step(job), steps=job.steps, vae_dtype=vae_dtype,
                 batched_guidance=shape.guidance_batched)
    if job.attention == "flash":
        pipe.notes.append("attention 'flash' runs as SDPA, which dispatches to the flash kernel where it can")
    if measures_text_encoder(shape):
        pipe.encoder = _build_text_encoder(job, shape, configs, dtypes[job.dtype], device)
    else:
        encoder = shape.component("text_encoder").class_name
        pipe.notes.append(f"text encoder not built or timed ({encoder}: too costly to build for one call per batch); "
                          "s_per_clip leaves out text encoding")
    return pipe


def _build_text_encoder(job: VideoJob, shape: VideoModelShape, configs: dict[str, dict[str, Any]], dtype: Any,
                        device: str) -> tuple[Any, Any]:
    prompts = job.batch * passes_per_step(job)  # the prompt and, with guidance, the negative prompt
    return random_text_encoder(configs[shape.component("text_encoder").name], dtype, device, prompts, shape.text_tokens)


def _transformer_inputs(job: VideoJob, shape: VideoModelShape, transformer: Any, lat: tuple[int, int, int],
                        dtype: Any, device: str) -> dict[str, Any]:
    """The forward arguments the family's pipeline passes, at the job's batch (latents random)."""
    import torch

    text = torch.randn(job.batch, shape.text_tokens, shape.text_dim, dtype=dtype, device=device)
    timestep = torch.full((job.batch,), 500, dtype=torch.long, device=device)
    if shape.family == "ltx":  # LTXPipeline: packed (batch, tokens, channels) latents and the latent grid
        from gpuscout.torchmodel.video import ltx_transformer_inputs

        return ltx_transformer_inputs(torch, shape, lat, job.batch, dtype, device, torch.randn)
    if shape.family != "cogvideox":
        latents = torch.randn(job.batch, shape.latent_channels, *lat, dtype=dtype, device=device)
        return {"hidden_states": latents, "timestep": timestep, "encoder_hidden_states": text}
    # CogVideoXPipeline: latents are (batch, frames, channels, H, W); rotary embeddings (5B) come
    # from the pipeline's own helper, called with just the attributes it reads.
    from types import SimpleNamespace

    from diffusers import CogVideoXPipeline

    latents = torch.randn(job.batch, lat[0], shape.latent_channels, lat[1], lat[2], dtype=dtype, device=device)
    inputs: dict[str, Any] = {"hidden_states": latents, "timestep": timestep, "encoder_hidden_states": text}
    if transformer.config.use_rotary_positional_embeddings:
        owner = SimpleNamespace(transformer=transformer, vae_scale_factor_spatial=shape.vae_scale_spatial)
        inputs["image_rotary_emb"] = CogVideoXPipeline._prepare_rotary_positional_embeddings(
            owner, job.height, job.width, lat[0], torch.device(device))
    return inputs


def _step(pipe: _Pipe) -> None:
    """The conditional and (with guidance) the unconditional pass, combine, Euler-like update."""
    if pipe.passes == 2 and pipe.batched_guidance:  # CogVideoXPipeline: torch.cat([latents] * 2)
        doubled = {k: _doubled(v) for k, v in pipe.inputs.items()}
        uncond, out = pipe.transformer(**doubled, return_dict=False)[0].chunk(2)
        out = uncond + _GUIDANCE_SCALE * (out - uncond)
    else:
        out = pipe.transformer(**pipe.inputs, return_dict=False)[0]
        if pipe.passes == 2:  # WanPipeline: a second, separate forward
            uncond = pipe.transformer(**pipe.inputs, return_dict=False)[0]
            out = uncond + _GUIDANCE_SCALE * (out - uncond)
    pipe.latents = pipe.latents - STEP_SIZE * out
    pipe.inputs["hidden_states"] = pipe.latents


def _doubled(value: Any) -> Any:
    """A batch-first tensor repeated twice along the batch; the rotary (cos, sin) pair is shared."""
    import torch

    return torch.cat([value, value]) if isinstance(value, torch.Tensor) else value


def _generate(pipe: _Pipe, clock: PhaseClock) -> Timing:
    return generate(pipe, clock, encode=_encode if pipe.encoder is not None else None, step=_step,
                    decode=lambda p: p.vae.decode(p.vae_latents, return_dict=False))


def _encode(pipe: _Pipe) -> None:
    if pipe.encoder is not None:
        pipe.encoder[0](pipe.encoder[1])


def _metrics(job: VideoJob, pipe: _Pipe, timings: list[Timing], startup_s: float) -> tuple[Metric, ...]:
    batch_s = [t.batch_s for t in timings]
    text = "text encoder + " if pipe.encoder is not None else ""
    per_clip = f"({text}{job.steps} × transformer step + VAE decode) / batch {job.batch}"
    if pipe.encoder is None:
        per_clip += "; text encoding not measured (see the case notes)"
    metrics = [
        timed_metric("s_per_clip", "s", [s / job.batch for s in batch_s], note=per_clip),
        timed_metric("s_per_frame", "s", [s / (job.batch * job.frames) for s in batch_s],
                     note=f"s_per_clip / {job.frames} frames"),
        derived_metric("clips_per_s", "clips/s", [job.batch / s for s in batch_s],
                       note=f"batch {job.batch} / seconds per batch"),
        timed_metric("denoiser_step_s", "s", [s for t in timings for s in t.step_s],
                     note=f"{pipe.passes} transformer pass(es) at batch {job.batch}"
                          + (_guidance_note(pipe) if pipe.passes == 2 else "")
                          + ", guidance combine and latent update"),
        timed_metric("vae_decode_s", "s", [t.vae_s for t in timings],
                     note=f"{type(pipe.vae).__name__} decode of {job.frames} frames × batch {job.batch} in "
                          f"{pipe.vae_dtype}"
                          + (" with tiling" if job.vae_tiling else "")),
    ]
    if pipe.encoder is not None:
        metrics.append(timed_metric("text_encode_s", "s", [t.text_s or 0.0 for t in timings],
                                    note="the text encoder, once per batch"))
    metrics.append(timed_metric("job_s", "s", [whole_job_s(job, s, startup_s=startup_s) for s in batch_s],
                                note="projected: " + whole_job_formula(job, startup_s=startup_s, save_s=None)))
    return tuple(metrics)


def _guidance_note(pipe: _Pipe) -> str:
    if pipe.batched_guidance:
        return " (guidance: the unconditional pass batched with the conditional one, as CogVideoXPipeline)"
    return " (guidance: a separate unconditional pass, as WanPipeline)"


def _params(job: VideoJob, pipe: _Pipe, device: str) -> dict[str, Scalar]:
    return {"model": job.model, "width": job.width, "height": job.height, "frames": job.frames, "batch": job.batch,
            "steps": job.steps, "guidance": job.guidance, "dtype": job.dtype, "attention": job.attention,
            "vae_tiling": job.vae_tiling, "offload": job.offload, "transformer_passes": pipe.passes,
            "vae_dtype": pipe.vae_dtype, "text_encoder_timed": pipe.encoder is not None, "device": device}
