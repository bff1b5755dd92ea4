"""Time of diffusion image generation: text encoders once, the denoiser every step, VAE decode once.

No reference gives diffusion FLOPs (docs/estimator.md §2.10), so they are derived from the
shape, with these approximations stated:

* Convolution: 2 · 9 · C_in · C_out FLOPs per output pixel (3 × 3 kernel); a resnet is two of them
  plus a 1 × 1 shortcut when the width changes. UNet up-block resnets take the skip concatenation,
  approximated as 2 · C input channels.
* UNet transformer block (diffusers BasicTransformerBlock, GEGLU ×4): 18 · C² weights per token
  (self-attention Q,K,V,O 4C², cross-attention Q,O 2C², feed-forward C→8C and 4C→C 12C²), so
  2 · 18 · C² · P FLOPs, plus self-attention 4 · P² · C and cross-attention 4 · P · text · C;
  proj_in/proj_out add 2 · 2 · C² · P per attention layer.
* FLUX (MMDiT): every token meets 12 · D² per-token weights in each of the 19 double-stream and 38
  single-stream blocks (double: its stream's Q,K,V,O 4D² + MLP 8D²; single: Q,K,V 3D² + MLP-in 4D² +
  fused out 5D²); the adaLN modulation weights act once per image, not per token. Hence
  2 · N · 12 · D² · blocks + 4 · N² · D · blocks, N = image tokens + 512 text tokens. Checked against
  the preset: 19 · 36 D² + 38 · 15 D² = 11.8 B of the 11.9 B transformer parameters.
* Activation traffic: each convolution reads its input and writes its output once; a transformer
  block moves about 20 values per token per channel. A rough memory term; these phases are usually
  compute-bound.
* Eager attention writes and re-reads the heads · P² scores three times (QKᵀ, softmax, ·V). Those
  kernels are memory-bound and run between the GEMMs, not under them, so their time adds to the
  step ("attention scores (eager)" phase): on the SDXL blog's A100 this is the 0.85 s per image
  between the eager and SDPA runs (0.85 s modelled).
* fp32: PyTorch runs fp32 convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 is True
  by default) but fp32 matmuls on CUDA cores (torch.backends.cuda.matmul.allow_tf32 is False since
  PyTorch 1.12). The denoiser's FLOPs are split accordingly; CUDA-core GEMMs are 8× slower than
  tensor-core math against the same memory, so they run nearer their peak
  (CUDA_CORE_GEMM_EFFICIENCY).

Classifier-free guidance doubles the denoiser batch, except for FLUX.1-dev, which is
guidance-distilled and runs one pass per step (guidance enters as an embedding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.estimator.efficiency import Efficiency, default_efficiency
from gpuscout.estimator.image import component_dtype
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
from gpuscout.hardware.catalog import Gpu, peak_flops_per_s
from gpuscout.workload.image import ImageComponent, ImageModelShape
from gpuscout.workload.job import ImageJob
from gpuscout.workload.shape import DTYPE_BYTES

TRANSFORMER_WEIGHTS_PER_TOKEN = 18  # × C², diffusers BasicTransformerBlock (see module docstring)
TRANSFORMER_TRAFFIC_PER_TOKEN = 20  # × C values moved per block: rough, stated in the docstring
EAGER_SCORE_PASSES = 3  # the scores are written by QKᵀ, read and written by softmax, read by ·V
# Fraction of the CUDA-core fp32 peak that fp32 GEMMs reach. ASSUMPTION: large SGEMMs are compute-bound
# (8× less math per byte than tensor cores); the SDXL blog's fp32 A100 run implies 0.79 given TF32
# convolutions at the image row's 0.4 (docs/estimator.md §2.10), an in-sample check, not an independent one.
CUDA_CORE_GEMM_EFFICIENCY = 0.8
DIT_WEIGHTS_PER_TOKEN = 12  # × D² per FLUX block, double- or single-stream
# diffusers AutoencoderKL: layers_per_block = 2 in all three presets' VAE configs; the decoder runs
# layers_per_block + 1 resnets per up block (diffusers Decoder).
VAE_DECODER_RESNETS = 3
CLIP_TOKENS = 77  # CLIP max_position_embeddings


@dataclass
class Work:
    """FLOPs and activation values moved, accumulated over the ops of one forward pass.

    `conv_flops` is the part of `flops` in convolutions (TF32 under fp32); `score_values` the eager
    attention score traffic, kept apart from `values` because its kernels do not overlap the GEMMs."""

    flops: float = 0.0
    conv_flops: float = 0.0
    values: float = 0.0
    score_values: float = 0.0

    def conv(self, c_in: float, c_out: float, pixels: float, kernel: int = 9) -> None:
        self.flops += 2 * kernel * c_in * c_out * pixels
        self.conv_flops += 2 * kernel * c_in * c_out * pixels
        self.values += (c_in + c_out) * pixels

    def resnet(self, c_in: float, c_out: float, pixels: float) -> None:
        self.conv(c_in, c_out, pixels)
        self.conv(c_out, c_out, pixels)
        if c_in != c_out:
            self.conv(c_in, c_out, pixels, kernel=1)

    def attention(self, width: float, tokens: float, keys: float, heads: int, eager: bool) -> None:
        self.flops += 4 * tokens * keys * width
        if eager:
            self.score_values += EAGER_SCORE_PASSES * heads * tokens * keys


def unet_work(model: ImageModelShape, lat_h: int, lat_w: int, eager: bool) -> Work:
    """One UNet forward at batch 1, down path, mid block and up path (see module docstring)."""
    work = Work()
    chans = model.block_out_channels
    pixels = [(lat_h / 2**i) * (lat_w / 2**i) for i in range(len(chans))]
    work.conv(model.latent_channels, chans[0], pixels[0])
    c_in: float = chans[0]
    for i, c in enumerate(chans):
        for _ in range(model.layers_per_block):
            work.resnet(c_in, c, pixels[i])
            c_in = c
            _attention_layer(work, model, i, model.transformer_layers_per_level[i], pixels[i], eager)
        if i < len(chans) - 1:
            work.conv(c, c, pixels[i + 1])
    last = len(chans) - 1
    work.resnet(chans[last], chans[last], pixels[last])
    _attention_layer(work, model, last, model.mid_transformer_layers, pixels[last], eager)
    work.resnet(chans[last], chans[last], pixels[last])
    for i in reversed(range(len(chans))):
        for _ in range(model.layers_per_block + 1):
            work.resnet(2 * chans[i], chans[i], pixels[i])
            _attention_layer(work, model, i, model.transformer_layers_per_level[i], pixels[i], eager)
        if i > 0:
            work.conv(chans[i], chans[i], pixels[i - 1])
    work.conv(chans[0], model.latent_channels, pixels[0])
    return work


def _attention_layer(work: Work, model: ImageModelShape, level: int, blocks: int, pixels: float, eager: bool) -> None:
    if blocks == 0:
        return
    c = model.block_out_channels[level]
    heads = model.attention_heads[level]
    text = model.text_tokens
    work.flops += 2 * 2 * c * c * pixels  # proj_in, proj_out
    for _ in range(blocks):
        work.flops += 2 * TRANSFORMER_WEIGHTS_PER_TOKEN * c * c * pixels
        work.flops += 2 * 2 * text * model.cross_attention_dim * c  # cross-attention K, V of the text
        work.values += TRANSFORMER_TRAFFIC_PER_TOKEN * c * pixels
        work.attention(c, pixels, pixels, heads, eager)
        work.attention(c, pixels, text, heads, eager)


def dit_work(model: ImageModelShape, lat_h: int, lat_w: int, eager: bool) -> Work:
    """One FLUX transformer forward at batch 1 (see module docstring)."""
    d = float(model.hidden_size or 0)
    blocks = (model.double_stream_blocks or 0) + (model.single_stream_blocks or 0)
    image = (lat_h / model.patch_size) * (lat_w / model.patch_size)
    tokens = image + model.text_tokens
    work = Work()
    work.flops += 2 * tokens * DIT_WEIGHTS_PER_TOKEN * d * d * blocks
    work.flops += 2 * model.text_tokens * model.cross_attention_dim * d  # context_embedder
    work.flops += 2 * 2 * image * model.latent_channels * model.patch_size**2 * d  # x_embedder, proj_out
    work.values += TRANSFORMER_TRAFFIC_PER_TOKEN * d * tokens * blocks
    for _ in range(blocks):
        work.attention(d, tokens, tokens, model.attention_heads[0], eager)
    return work


def vae_decode_work(model: ImageModelShape, lat_h: int, lat_w: int) -> Work:
    """AutoencoderKL decoder: mid block at latent size, then up blocks doubling resolution."""
    chans = list(reversed(model.vae_block_out_channels))
    work = Work()
    pixels = float(lat_h * lat_w)
    work.conv(model.latent_channels, chans[0], pixels)
    work.resnet(chans[0], chans[0], pixels)
    work.flops += 2 * 4 * chans[0] ** 2 * pixels  # single-head mid attention: Q, K, V, O
    work.attention(chans[0], pixels, pixels, 1, eager=False)
    work.resnet(chans[0], chans[0], pixels)
    c_in = chans[0]
    for j, c in enumerate(chans):
        for _ in range(VAE_DECODER_RESNETS):
            work.resnet(c_in, c, pixels)
            c_in = c
        if j < len(chans) - 1:
            pixels *= 4
            work.conv(c, c, pixels)
    work.conv(chans[-1], 3, pixels)
    return work


def estimate_image_speed(
    job: ImageJob, model: ImageModelShape, gpu: Gpu, *, efficiency: Efficiency | None
) -> SpeedEstimate:
    # DiT denoisers (FLUX) take the measured DiT factors, the "video" row (docs/video.md §3).
    eff = efficiency or default_efficiency(gpu, "video" if model.denoiser_kind == "dit" else "image")
    lat_h, lat_w = job.height // model.vae_scale_factor, job.width // model.vae_scale_factor
    eager = job.attention == "eager"
    passes = 2 if job.guidance and model.family != "flux" else 1
    phases = [
        _text_phase(job, model, gpu, eff, passes),
        _denoiser_phase(job, model, gpu, eff, passes, lat_h, lat_w, eager),
        _vae_phase(job, model, gpu, eff, lat_h, lat_w),
    ]
    counts = [1.0, float(job.steps), 1.0]
    if eager:
        phases.append(_scores_phase(job, model, gpu, eff, passes, lat_h, lat_w))
        counts.append(float(job.steps))
    if job.offload != "none":
        phases.append(_offload_phase(job, model, gpu, eff))
        counts.append(1.0)
    batch_s = sum(p.seconds * n for p, n in zip(phases, counts, strict=True))
    batches = math.ceil(job.images / job.batch)
    job_s, low, high = banded(batches * batch_s, eff)
    notes = (
        f"{passes} denoiser pass(es) per step: "
        + ("FLUX.1-dev is guidance-distilled (one pass)" if model.family == "flux"
           else "classifier-free guidance doubles the batch" if passes == 2 else "guidance off"),
        "diffusion FLOPs are derived from the shape (approximations in speed/image.py); "
        + ("DiT efficiency from FLUX.1-dev H100 measurements (efficiency.toml, video row)"
           if model.denoiser_kind == "dit"
           else "UNet efficiency from one SDXL A100 measurement (efficiency.toml, image row)"),
    )
    return SpeedEstimate(
        job_kind="image", gpu_sku=gpu.sku, gpus=1, job_s=job_s, job_low_s=low, job_high_s=high,
        bound=dominant(list(zip(phases, counts, strict=True))),
        metrics={"s_per_image": batch_s / job.batch, "images_per_s": job.batch / batch_s, "batch_s": batch_s},
        units={"images": float(job.images)}, phases=tuple(phases), efficiency=eff, notes=notes,
    )


def _rates(gpu: Gpu, dtype: str) -> Rates:
    return Rates(flops_per_s=peak_flops_per_s(gpu, dtype), memory_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                 link_bytes_per_s=gpu.pcie_bytes_per_s or gpu.memory_bandwidth_bytes_per_s)


def _component(model: ImageModelShape, role: str) -> ImageComponent:
    return next(c for c in model.components if c.role == role)


def _text_phase(job: ImageJob, model: ImageModelShape, gpu: Gpu, eff: Efficiency, prompts: int) -> PhaseTime:
    encoders = [c for c in model.components if c.role == "text_encoder"]
    flops = sum(2.0 * c.params * _text_tokens(model, c) for c in encoders) * prompts * job.batch
    moved = sum(c.params * DTYPE_BYTES[job.dtype] for c in encoders)
    return phase(
        "text encoders", flops=flops, bytes_moved=moved, rates=_rates(gpu, job.dtype), efficiency=eff,
        formula=(f"2 × params × tokens per encoder ({', '.join(f'{c.name} {_text_tokens(model, c)}' for c in encoders)}"
                 f") × {prompts} prompt(s) × batch {job.batch} = {tflop(flops)}; once per batch"),
    )


def _text_tokens(model: ImageModelShape, component: ImageComponent) -> int:
    return model.text_tokens if component.class_name.startswith("T5") else CLIP_TOKENS


def _denoiser_phase(
    job: ImageJob, model: ImageModelShape, gpu: Gpu, eff: Efficiency, passes: int, lat_h: int, lat_w: int,
    eager: bool,
) -> PhaseTime:
    forward = dit_work if model.denoiser_kind == "dit" else unet_work
    work = forward(model, lat_h, lat_w, eager)
    denoiser = _component(model, "denoiser")
    b = DTYPE_BYTES[job.dtype]
    n = passes * job.batch
    moved = denoiser.params * b + work.values * b * n
    rates, how = _rates(gpu, job.dtype), ""
    if job.dtype == "fp32" and gpu.tf32_flops_per_s is not None:
        rates, how = _fp32_rates(gpu, work, eff)
    return phase(
        "denoiser step", flops=work.flops * n, bytes_moved=moved, rates=rates, efficiency=eff,
        formula=(f"{model.denoiser_kind} forward at {lat_w}×{lat_h} latent = {tflop(work.flops)} × {passes} pass(es)"
                 f" × batch {job.batch}; bytes = weights {gib(denoiser.params * b)} + activations;"
                 f" × {job.steps} steps{how}"),
    )


def _fp32_rates(gpu: Gpu, work: Work, eff: Efficiency) -> tuple[Rates, str]:
    """One rate that times convolutions at TF32 and matmuls at the CUDA-core fp32 peak (docstring)."""
    tf32, fp32 = peak_flops_per_s(gpu, "tf32"), peak_flops_per_s(gpu, "fp32")
    gemm = work.flops - work.conv_flops
    seconds = work.conv_flops / (tf32 * eff.compute) + gemm / (fp32 * CUDA_CORE_GEMM_EFFICIENCY)
    blended = work.flops / (seconds * eff.compute)  # phase() divides by eff.compute again
    rates = _rates(gpu, "fp32").model_copy(update={"flops_per_s": blended})
    share = work.conv_flops / work.flops
    return rates, (f"; fp32: convolutions ({share:.0%}) in TF32, matmuls on CUDA cores at "
                   f"{CUDA_CORE_GEMM_EFFICIENCY:g} of the fp32 peak")


def _scores_phase(
    job: ImageJob, model: ImageModelShape, gpu: Gpu, eff: Efficiency, passes: int, lat_h: int, lat_w: int
) -> PhaseTime:
    forward = dit_work if model.denoiser_kind == "dit" else unet_work
    work = forward(model, lat_h, lat_w, True)
    b = DTYPE_BYTES[job.dtype]
    moved = work.score_values * b * passes * job.batch
    return phase(
        "attention scores (eager)", flops=0.0, bytes_moved=moved, rates=_rates(gpu, job.dtype), efficiency=eff,
        formula=(f"heads × P² scores written and re-read {EAGER_SCORE_PASSES}× per attention = {gib(moved)} per"
                 f" step, memory-bound kernels between the GEMMs; × {job.steps} steps"),
    )


def _vae_phase(job: ImageJob, model: ImageModelShape, gpu: Gpu, eff: Efficiency, lat_h: int, lat_w: int) -> PhaseTime:
    vae = _component(model, "vae")
    dtype = component_dtype(job, vae)
    # PyTorch runs fp32 convolutions on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32 = True);
    # GPUs without TF32 (V100, T4) run them on CUDA cores at the fp32 rate.
    compute = "tf32" if dtype == "fp32" and gpu.tf32_flops_per_s is not None else dtype
    work = vae_decode_work(model, lat_h, lat_w)
    b = DTYPE_BYTES[dtype]
    return phase(
        "VAE decode", flops=work.flops * job.batch, bytes_moved=vae.params * b + work.values * b * job.batch,
        rates=_rates(gpu, compute), efficiency=eff,
        formula=(f"AutoencoderKL decoder convs to {job.width}×{job.height} = {tflop(work.flops)} × batch {job.batch}"
                 f" in {compute}; once per batch" + ("; tiling adds overlap not counted" if job.vae_tiling else "")),
    )


def _offload_phase(job: ImageJob, model: ImageModelShape, gpu: Gpu, eff: Efficiency) -> PhaseTime:
    sizes = {c.name: c.params * DTYPE_BYTES[component_dtype(job, c)] for c in model.components}
    # Model offload moves each component in for its phase and back out (module.to("cpu")) when the
    # next one starts, or at the end of the call.
    moved = 2 * sum(sizes.values())
    how = f"model offload: every component's weights ({gib(moved / 2)}) in and back out once per batch"
    if job.offload == "sequential":
        # Every leaf module is moved in for each forward and dropped after (no copy back): the denoiser
        # once per step (one batched forward covers both guidance passes in the SD/SDXL pipelines), the
        # rest once per batch.
        denoiser = _component(model, "denoiser")
        moved = sum(sizes.values()) + sizes[denoiser.name] * (job.steps - 1)
        how = (f"sequential offload: denoiser weights ({gib(sizes[denoiser.name])}) × {job.steps} steps + the other "
               f"components once = {gib(moved)} per batch")
    rates = offload_rates(_rates(gpu, job.dtype), eff)
    return phase(
        "CPU offload transfers", flops=0.0, bytes_moved=0.0, comm_bytes=moved, rates=rates, efficiency=eff,
        formula=how + f", at {rates.link_bytes_per_s * eff.link / 1e9:.1f} GB/s (accelerate's pageable copies)",
    )
