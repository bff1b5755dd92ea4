"""Time of diffusion video generation: text encoder once, the DiT every step, the VAE decode once.

FLOPs are derived from the shape (docs/video.md §3):

* Wan DiT block (text by cross-attention), per token: self-attention Q, K, V, O (4 D²),
  cross-attention Q, O (2 D²) and the feed-forward D → ffn → D (2 D·ffn), so
  2 · N · (6 D² + 2 D·ffn) per block; cross-attention K, V act on the 512 text tokens
  (2 · 512 · 2 D²); self-attention scores and values 4 · N² · D; cross-attention 4 · N · 512 · D.
  Checked against the preset: 30 blocks × (8 D² + 2 D·ffn) = 1.39 B of the 1.42 B transformer
  parameters (the rest are embedders).
* CogVideoX block (text in the sequence, S = N + 226 tokens): Q, K, V, O (4 D²) and the
  feed-forward (2 D·ffn) on every token, 2 · S · (4 D² + 2 D·ffn), and attention 4 · S² · D.
* Classifier-free guidance: two forwards' FLOPs per step either way; WanPipeline runs them as two
  calls (weights read twice), CogVideoXPipeline as one call at twice the batch (read once).
* Text encoder (UMT5-XXL / T5-XXL): 2 · params · text tokens per prompt (the negative prompt too
  with guidance).
* VAE decode: the preset's FLOPs per output pixel per latent frame, counted by torch's
  FlopCounterMode over the real decode.

Eager attention: the S² scores are written and re-read three times per block by memory-bound
kernels that run between the GEMMs, so that traffic is its own phase and adds to the step (as in
speed/image.py).

Offload: "model" moves every component's weights onto the GPU for its phase and back out after it,
once per batch; "sequential" moves every leaf module's weights onto the GPU for each forward, so the
transformer's weights cross PCIe once per transformer call and the VAE decoder's once per decoded
chunk (Wan: every latent frame; CogVideoX: every 2). These transfers do not overlap compute in
accelerate's hooks, so they add, at accelerate's pageable copy rate
(`roofline.OFFLOAD_HOOK_BYTES_PER_S`).

Efficiency: the "video" row of efficiency.toml (the DiT factor measured on FLUX.1-dev) for the linears,
and the architecture's fused-attention rate (efficiency.toml, [[attention]]) for the attention FLOPs.
"""

from __future__ import annotations

import math

from gpuscout.estimator.efficiency import Efficiency, attention_efficiency, calibrated, default_efficiency
from gpuscout.estimator.speed.image import EAGER_SCORE_PASSES
from gpuscout.estimator.speed.roofline import (
    PhaseTime,
    Rates,
    SpeedEstimate,
    banded,
    dominant,
    gib,
    offload_rates,
    phase,
    tflop,
)
from gpuscout.estimator.video import component_bytes, component_dtype
from gpuscout.hardware.catalog import Gpu, peak_flops_per_s
from gpuscout.workload.job import VideoJob
from gpuscout.workload.shape import DTYPE_BYTES
from gpuscout.workload.video import VideoModelShape, check_video_size

DIT_PROJ_PER_TOKEN = 6  # × D²: self Q, K, V, O + cross Q, O
DIT_JOINT_PROJ_PER_TOKEN = 4  # × D²: Q, K, V, O over the joint text + video sequence
DIT_TRAFFIC_PER_TOKEN = 20  # × D values moved per block: rough; these phases are compute-bound


def passes_per_step(job: VideoJob) -> int:
    """Transformer passes' worth of FLOPs per step: 2 with classifier-free guidance, else 1."""
    return 2 if job.guidance else 1


def calls_per_step(job: VideoJob, model: VideoModelShape) -> int:
    """Transformer calls per step, each reading the weights once: one where guidance is batched."""
    return 1 if model.guidance_batched else passes_per_step(job)


def dit_forward_flops(model: VideoModelShape, tokens: int, eager: bool = False) -> float:
    """One transformer forward at batch 1 over `tokens` video tokens (see the module docstring)."""
    d, ffn, text = float(model.hidden_size), float(model.ffn_dim), float(model.text_tokens)
    patch = 2 * 2 * tokens * model.latent_channels * model.patch_size**2 * d  # patch embedding, proj_out
    if model.text_in_sequence:
        seq = tokens + text
        per_block = 2 * seq * (DIT_JOINT_PROJ_PER_TOKEN * d * d + 2 * d * ffn) + 4 * seq * seq * d
        return model.num_layers * per_block + 2 * text * model.text_dim * d + patch  # text_proj: text_dim → D
    per_block = 2 * tokens * (DIT_PROJ_PER_TOKEN * d * d + 2 * d * ffn)
    per_block += 2 * text * 2 * d * d  # cross-attention K, V over the text tokens
    per_block += 4 * tokens * tokens * d + 4 * tokens * text * d
    embed = 2 * text * (model.text_dim * d + d * d)  # text_embedder: text_dim → D → D
    return model.num_layers * per_block + embed + patch


def dit_attention_flops(model: VideoModelShape, tokens: int) -> float:
    """The part of `dit_forward_flops` inside the attention kernels (scores and values): self-attention over
    the joint text + video sequence, or over the video tokens plus cross-attention to the text."""
    d, text = float(model.hidden_size), float(model.text_tokens)
    if model.text_in_sequence:
        seq = tokens + text
        return model.num_layers * 4 * seq * seq * d
    return model.num_layers * (4 * tokens * tokens * d + 4 * tokens * text * d)


def split_attention(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency) -> tuple[Efficiency, str]:
    """The denoiser's efficiency with its attention FLOPs at the fused kernel's measured rate on this
    architecture (efficiency.toml, [[attention]]) and its linears at the row's `compute`: one compute
    fraction, the FLOP-weighted harmonic mean. Left as it is for eager attention (the math backend's
    matmuls are plain GEMMs), a calibrated or caller-given efficiency (measured on the whole step), and an
    architecture without a source."""
    kernel = attention_efficiency(gpu)
    with calibrated(None):
        uncalibrated = default_efficiency(gpu, "video")
    if kernel is None or job.attention == "eager" or eff != uncalibrated:
        return eff, ""
    tokens = model.tokens(job.width, job.height, job.frames)
    total, attn = dit_forward_flops(model, tokens), dit_attention_flops(model, tokens)
    share = attn / total
    compute = 1.0 / (share / kernel.compute + (1.0 - share) / eff.compute)
    how = (f"; attention {share:.0%} of the FLOPs at {kernel.compute:.2f} of peak ({gpu.architecture} "
           f"FlashAttention-2), linears at {eff.compute:.2f}: {compute:.2f} overall")
    return eff.model_copy(update={"compute": compute, "source": f"{eff.source} | {kernel.source}"}), how


def vae_decode_chunks(model: VideoModelShape, frames: int) -> int:
    """Decoder calls per clip: latent frames / latent frames per chunk (at least one; one for a whole-clip VAE)."""
    if model.vae_decode_whole_clip:
        return 1
    return max(model.latent_frames(frames) // model.vae_decode_latent_frames, 1)


def vae_decode_flops(model: VideoModelShape, job: VideoJob) -> float:
    return model.vae_decode_flops_per_px_frame * job.width * job.height * model.latent_frames(job.frames)


def estimate_video_speed(
    job: VideoJob, model: VideoModelShape, gpu: Gpu, *, efficiency: Efficiency | None
) -> SpeedEstimate:
    check_video_size(model, job.width, job.height, job.frames)
    eff = efficiency or default_efficiency(gpu, "video")
    passes = passes_per_step(job)
    phases = [_text_phase(job, model, gpu, eff, passes), _denoiser_phase(job, model, gpu, eff),
              _vae_phase(job, model, gpu, eff)]
    counts = [1.0, float(job.steps), 1.0]
    if job.attention == "eager":
        phases.append(_scores_phase(job, model, gpu, eff))
        counts.append(float(job.steps))
    if job.offload != "none":
        offload, per_clip = _offload_phase(job, model, gpu, eff)
        phases.append(offload)
        counts.append(per_clip)
    batch_s = sum(p.seconds * n for p, n in zip(phases, counts, strict=True))
    batches = math.ceil(job.clips / job.batch)
    job_s, low, high = banded(batches * batch_s, eff)
    per_clip_s = batch_s / job.batch
    step = phases[1].seconds
    notes = (
        f"{passes} transformer pass(es) per step" + (f" (guidance: {_guidance_how(model)})" if passes == 2 else ""),
        "video DiT FLOPs are derived from the shape (speed/video.py); compute efficiency is the FLUX.1-dev "
        "measurement (efficiency.toml, video row), with the attention share at the fused kernel's published "
        "rate where the architecture has one ([[attention]]); no video-specific measurement",
    )
    return SpeedEstimate(
        job_kind="video", gpu_sku=gpu.sku, gpus=1, job_s=job_s, job_low_s=low, job_high_s=high,
        bound=dominant(list(zip(phases, counts, strict=True))),
        metrics={"s_per_clip": per_clip_s, "s_per_frame": per_clip_s / job.frames, "clips_per_s": 1 / per_clip_s,
                 "denoiser_step_s": step, "vae_decode_s": phases[2].seconds, "batch_s": batch_s},
        units={"clips": float(job.clips), "frames": float(job.clips * job.frames)},
        phases=tuple(phases), efficiency=eff, notes=notes,
    )


def _guidance_how(model: VideoModelShape) -> str:
    return "batched with the conditional one" if model.guidance_batched else "a second, separate forward"


def _rates(gpu: Gpu, dtype: str) -> Rates:
    return Rates(flops_per_s=peak_flops_per_s(gpu, dtype), memory_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                 link_bytes_per_s=gpu.pcie_bytes_per_s or gpu.memory_bandwidth_bytes_per_s)


def _text_phase(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency, prompts: int) -> PhaseTime:
    enc = [c for c in model.components if c.role == "text_encoder"]
    flops = sum(2.0 * c.params * model.text_tokens for c in enc) * prompts * job.batch
    moved = sum(component_bytes(job, c) for c in enc)
    return phase("text encoder", flops=flops, bytes_moved=moved, rates=_rates(gpu, job.dtype), efficiency=eff,
                 formula=(f"2 × params × {model.text_tokens} tokens × {prompts} prompt(s) × batch {job.batch} = "
                          f"{tflop(flops)}; once per batch"))


def _denoiser_phase(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency) -> PhaseTime:
    eff, how = split_attention(job, model, gpu, eff)
    tokens = model.tokens(job.width, job.height, job.frames)
    seq = model.sequence(job.width, job.height, job.frames)
    forward = dit_forward_flops(model, tokens)
    passes = passes_per_step(job)
    n = passes * job.batch
    b = DTYPE_BYTES[job.dtype]
    weights = component_bytes(job, model.component("denoiser"))
    acts = DIT_TRAFFIC_PER_TOKEN * model.hidden_size * seq * model.num_layers * b
    calls = calls_per_step(job, model)
    return phase("denoiser step", flops=forward * n, bytes_moved=weights * calls + acts * n,
                 rates=_rates(gpu, job.dtype), efficiency=eff,
                 formula=(f"DiT forward over {tokens:,} tokens ({model.latent_frames(job.frames)} latent frames) = "
                          f"{tflop(forward)} × {passes} pass(es) × batch {job.batch} in {calls} call(s); "
                          f"× {job.steps} steps{how}"))


def _scores_phase(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency) -> PhaseTime:
    seq = model.sequence(job.width, job.height, job.frames)
    per_pass = EAGER_SCORE_PASSES * model.attention_heads * seq * seq * model.num_layers * DTYPE_BYTES[job.dtype]
    moved = per_pass * passes_per_step(job) * job.batch
    return phase("attention scores (eager)", flops=0.0, bytes_moved=moved, rates=_rates(gpu, job.dtype),
                 efficiency=eff,
                 formula=(f"heads × S² scores written and re-read {EAGER_SCORE_PASSES}× per block = {gib(moved)} per "
                          f"step, memory-bound kernels between the GEMMs; × {job.steps} steps"))


def _vae_phase(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency) -> PhaseTime:
    vae = model.component("vae")
    dtype = component_dtype(job, vae)
    # fp32 convolutions run on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32 = True).
    compute = "tf32" if dtype == "fp32" and gpu.tf32_flops_per_s is not None else dtype
    flops = vae_decode_flops(model, job) * job.batch
    b = DTYPE_BYTES[dtype]
    moved = vae.params * b + job.batch * job.frames * job.width * job.height * model.vae_decoder_channels[-1] * 2 * b
    return phase("VAE decode", flops=flops, bytes_moved=moved, rates=_rates(gpu, compute), efficiency=eff,
                 formula=(f"{vae.class_name} decode of {job.frames} frames at {job.width}×{job.height} = "
                          f"{tflop(flops / job.batch)} × batch {job.batch} in {compute}; once per batch"
                          + ("; tiling overlap not counted" if job.vae_tiling else "")))


def _offload_phase(job: VideoJob, model: VideoModelShape, gpu: Gpu, eff: Efficiency) -> tuple[PhaseTime, float]:
    """PCIe transfers and how often they happen per batch."""
    rates = offload_rates(_rates(gpu, job.dtype), eff)
    rate = f", at {rates.link_bytes_per_s * eff.link / 1e9:.1f} GB/s (accelerate's pageable copies)"
    if job.offload == "model":
        weights = sum(component_bytes(job, c) for c in model.components)
        return phase("CPU offload transfers", flops=0.0, bytes_moved=0.0, comm_bytes=2 * weights,
                     rates=rates, efficiency=eff,
                     formula=f"model offload: every component's weights ({gib(weights)}) in and back out once per "
                             f"batch{rate}"), 1.0
    text = sum(component_bytes(job, c) for c in model.components if c.role == "text_encoder")
    dit = component_bytes(job, model.component("denoiser"))
    vae = component_bytes(job, model.component("vae"))
    calls, chunks = calls_per_step(job, model), vae_decode_chunks(model, job.frames)
    per_batch = text + dit * calls * job.steps + vae * chunks
    return phase("CPU offload transfers", flops=0.0, bytes_moved=0.0, comm_bytes=per_batch,
                 rates=rates, efficiency=eff,
                 formula=(f"sequential offload: transformer weights {gib(dit)} × {calls} call(s) × {job.steps} steps"
                          f" + text encoder {gib(text)} + VAE {gib(vae)} × {chunks} decoder call(s) "
                          f"= {gib(per_batch)} per batch{rate}")), 1.0
