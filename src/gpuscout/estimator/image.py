"""Peak memory per GPU of diffusion image generation (SD 1.5, SDXL, FLUX) with diffusers.

Peak = resident weights + max(denoising activations, VAE-decode activations) + overheads.
Inference keeps no activations for backward, so each phase's working set is the largest set of
tensors alive at once:

* UNet — the skip connections saved on the way down (every resnet/attention output per level)
  plus the largest transient at one level: a resnet (input, norm, conv), attention (Q, K, V,
  out; with eager attention also the heads · N² score matrix and its softmax), or the GEGLU
  feed-forward block (projection to 2 · 4C, GELU of the gate 4C, product 4C, plus the block's
  residual-stream tensors: 21 C per token, fitted).
* DiT (FLUX) — the image and text token streams plus one block's transient (QKV, normed and
  rotated Q/K, attention output, the single-stream block's 4D MLP computed before attention):
  15 D per token, fitted. Eager (math) attention adds heads · N² scores and softmax in fp32.
* VAE decode — 6 live full-resolution tensors of the decoder's last block width (fitted; the
  peak is in the last up block's first resnet, whose input, GroupNorm output and SiLU output
  have twice that width). Tiling bounds it to one tile: diffusers tiles at the VAE config's
  sample_size, 512 px for SD 1.5 and 1024 px for SDXL and FLUX (`ImageModelShape.vae_tile_px`).

Calibration. The fitted coefficients (UNET_FF_LIVE, DIT_BLOCK_LIVE, DIT_MATH_SCORE_COPIES,
VAE_LIVE_TENSORS) come from FakeTensor + MemTracker traces of the real diffusers models
(`gpuscout.trace.image`; torch 2.13, diffusers 0.42.1, CPU kernels). Traced peaks beyond
the weights (whole denoiser batch B; one image decoded), and what the coefficients imply:

| case (fp16; FLUX bf16)      | denoiser traced | fitted coefficient            | VAE decode traced |
|-----------------------------|-----------------|-------------------------------|-------------------|
| sd15 512², B 2, sdpa        | 130.3 MiB       | skips + 20.6 C/token (→ 21)   | 384 MiB (6.00)    |
| sd15 512², B 2, eager       | 1079.3 MiB      | skips + 1.03 × 2·h·N²·2 B     | 384 MiB           |
| sdxl 1024², B 2, sdpa       | 315.9 MiB       | skips + 21.1 C/token (→ 21)   | 3072 MiB fp32 (6.00) |
| flux-dev 1024², B 1, sdpa   | 468.1 MiB       | 17.3 D/token (→ 2 + 15)       | 1536 MiB (6.00)   |
| flux-dev 1024², B 1, eager  | 4383 MiB        | 16 D + 2.03 × 2·h·N²·2 B      | 2145 MiB (†)      |

With these coefficients the analytic terms land at 0.95–1.02× the traced denoiser peaks (sd15,
sdxl, flux-dev; sdpa and eager; 256² to 2048²; batch 1–4) and 1.00× the untiled VAE decode (the
traced count is exactly 6.0 untiled; 6.1–6.6 tiled, as decoded tiles accumulate). Before this
calibration the model gave 0.67× (sd15), 0.71× (sdxl) and 1.62× (flux, which also doubled its
batch for guidance) of the traced denoiser peaks, and 3.0× the VAE peaks (18 tensors, the sd2R
fit of one real FLUX OOM, docs/estimator.md §2.10). The trace excludes GPU-only memory —
cuDNN convolution workspaces and allocator fragmentation, which the sd2R observation included —
so a real decode can run above 6 tensors; tests/trace/test_image_trace.py holds the ±25%
agreement with the trace.
(†) With eager attention the VAE's mid-block attention (one head over all latent pixels) also
materializes N² scores, which this model does not count (it matters from about 1024²).

Classifier-free guidance doubles the denoiser batch (the conditional and unconditional passes
run as one batch in diffusers' SD/SDXL pipelines), except for FLUX.1-dev: it is guidance-distilled,
so FluxPipeline runs one pass and feeds the guidance scale as an embedding.
"""

from __future__ import annotations

from gpuscout.estimator import overhead
from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.image import ImageComponent, ImageModelShape
from gpuscout.workload.job import ImageJob
from gpuscout.workload.shape import DTYPE_BYTES
from gpuscout.workload.validate import validate_image_job

# Fitted to FakeTensor traces (see the module docstring); the sd2R figure of 18
# (docs/estimator.md §2.10, one real FLUX OOM) was 3× the traced 6.0 at every size and dtype.
VAE_LIVE_TENSORS = 6
# Tensors of width C live per token around a UNet GEGLU feed-forward (2·4C projection, 4C GELU
# gate, 4C product = 16 C, plus ~5 C of the block's residual stream). Traced: 20.6 (sd15), 21.1
# (sdxl) from 256² to 2048²; was 3 × 4 = 12 (diffusers FeedForward's default mult=4).
UNET_FF_LIVE = 21
# Tensors of width D live per token inside one FLUX block, on top of the 2 token streams. Traced:
# 17.2–17.6 D in all (512²–2048²), at the single-stream block's attention; was 12.
DIT_BLOCK_LIVE = 15
# Copies of the heads · N² score matrix, in units of the job's dtype, under eager (math) attention
# in a DiT: diffusers' native math backend runs torch's math SDPA, which upcasts 16-bit inputs to
# fp32 (scores and softmax at 4 B). Traced: 2.03–2.11 × (2 · heads · N² · 2 B); was 2.
DIT_MATH_SCORE_COPIES = 4


def estimate_image_memory(job: ImageJob, model: ImageModelShape, gpu: Gpu) -> MemoryBreakdown:
    validate_image_job(job, model.native_resolution_px, model.max_resolution_px)
    weights = weight_terms(job, model)
    denoise = denoiser_term(job, model)
    decode = vae_decode_term(job, model)
    workspace = conv_workspace_term(job, model)
    allocated = total_bytes(weights) + max(denoise.bytes, decode.bytes + workspace.bytes)
    fixed = [
        term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES, overhead.CUDA_CONTEXT_SOURCE),
        term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION, overhead.ALLOCATOR_SOURCE),
    ]
    phase = "denoising" if denoise.bytes >= decode.bytes + workspace.bytes else "VAE decode"
    return MemoryBreakdown(
        job_kind="image", gpu_sku=gpu.sku, gpus=1, usable_bytes=usable_memory_bytes(gpu),
        terms=(*weights, denoise, decode, workspace, *fixed), peak_bytes=allocated + total_bytes(fixed),
        notes=(f"peak = weights + max(denoising, VAE decode with its workspace) + overheads; {phase} is larger "
               "here",),
    )


def component_dtype(job: ImageJob, component: ImageComponent) -> str:
    """The job's dtype, except a VAE that the pipeline upcasts to fp32 (SDXL's force_upcast)."""
    return "fp32" if component.role == "vae" and component.default_dtype == "fp32" else job.dtype


def weight_terms(job: ImageJob, model: ImageModelShape) -> list[MemoryTerm]:
    if job.offload == "sequential":
        # enable_sequential_cpu_offload: one leaf module on the GPU at a time (None: the whole component).
        part = max(model.components, key=lambda c: _largest_module(c) * DTYPE_BYTES[component_dtype(job, c)])
        b = DTYPE_BYTES[component_dtype(job, part)]
        return [term(f"weights (sequential offload: largest module, in {part.name})", "weights",
                     _largest_module(part) * b, f"{_largest_module(part):,} params × {b:g} B; every other module "
                     "waits in CPU memory")]
    if job.offload == "model":
        big = max(model.components, key=lambda c: c.params)
        b = DTYPE_BYTES[component_dtype(job, big)]
        return [term(f"weights (offload: largest component, {big.name})", "weights", big.params * b,
                     f"{big.params:,} params × {b:g} B; the others wait in CPU memory")]
    return [term(f"weights: {c.name}", "weights", c.params * DTYPE_BYTES[component_dtype(job, c)],
                 f"{c.params:,} params × {DTYPE_BYTES[component_dtype(job, c)]:g} B ({component_dtype(job, c)})")
            for c in model.components]


def _largest_module(component: ImageComponent) -> int:
    return component.largest_module_params or component.params


def denoiser_batch(job: ImageJob, model: ImageModelShape) -> int:
    """Images per denoiser forward: ×2 under classifier-free guidance, except FLUX.

    FLUX.1-dev is guidance-distilled: FluxPipeline feeds guidance_scale as an embedding and runs one
    pass per step (a second, separate pass only with true_cfg_scale > 1 and a negative prompt).
    """
    return job.batch * (2 if job.guidance and model.family != "flux" else 1)


def denoiser_term(job: ImageJob, model: ImageModelShape) -> MemoryTerm:
    ab = DTYPE_BYTES[job.dtype]
    latent_w = job.width // model.vae_scale_factor
    latent_h = job.height // model.vae_scale_factor
    batch = denoiser_batch(job, model)
    eager = job.attention == "eager"
    if model.denoiser_kind == "unet":
        per_image, how = unet_bytes(model, latent_w, latent_h, ab, eager), "skips + largest level transient"
    else:
        per_image, how = dit_bytes(model, latent_w, latent_h, ab, eager), (
            f"token streams + one block ({DIT_BLOCK_LIVE}·D/token)")
    cfg = " (×2 for guidance)" if batch > job.batch else ""
    return term("denoiser activations", "activations", batch * per_image,
                f"batch {batch}{cfg} × {per_image:,.0f} B: {how}")


def unet_bytes(model: ImageModelShape, latent_w: int, latent_h: int, ab: float, eager: bool) -> float:
    skips, peak = 0.0, 0.0
    for level, channels in enumerate(model.block_out_channels):
        tokens = (latent_w >> level) * (latent_h >> level)
        blocks = model.transformer_layers_per_level[level]
        skips += (model.layers_per_block + 1) * tokens * channels * ab
        resnet = 4 * tokens * channels * ab
        attention = 4 * tokens * channels * ab if blocks else 0.0
        if blocks and eager:
            attention += 2 * model.attention_heads[level] * tokens * tokens * ab
        feed_forward = UNET_FF_LIVE * tokens * channels * ab if blocks else 0.0
        peak = max(peak, resnet, attention, feed_forward)
    return skips + peak


def dit_bytes(model: ImageModelShape, latent_w: int, latent_h: int, ab: float, eager: bool) -> float:
    width = model.hidden_size or 0
    image_tokens = (latent_w // model.patch_size) * (latent_h // model.patch_size)
    tokens = image_tokens + model.text_tokens
    scores = DIT_MATH_SCORE_COPIES * model.attention_heads[0] * tokens * tokens * ab if eager else 0.0
    return tokens * width * ab * (2 + DIT_BLOCK_LIVE) + scores


def _decode_extent(job: ImageJob, model: ImageModelShape) -> tuple[int, int, int, float]:
    """(images, width px, height px, bytes per value) the VAE decodes at once."""
    vae = next(c for c in model.components if c.role == "vae")
    tile = model.vae_tile_px
    side_w, side_h = (min(job.width, tile), min(job.height, tile)) if job.vae_tiling else (
        job.width, job.height)
    # Tiling decodes one tile of one image at a time; slicing one whole image at a time.
    images = 1 if job.vae_tiling or job.vae_slicing else job.batch
    return images, side_w, side_h, DTYPE_BYTES[component_dtype(job, vae)]


def conv_workspace_term(job: ImageJob, model: ImageModelShape) -> MemoryTerm:
    """cuDNN workspace of the decode's largest convolution (overhead.CONV_WORKSPACE_INPUTS)."""
    images, side_w, side_h, ab = _decode_extent(job, model)
    channels = 2 * model.vae_block_out_channels[0]
    nbytes = overhead.CONV_WORKSPACE_INPUTS * images * side_w * side_h * channels * ab
    return term("cuDNN workspace (VAE decode)", "activations", nbytes,
                f"{images} × {side_w}×{side_h} × {channels} ch × {ab:g} B: {overhead.CONV_WORKSPACE_SOURCE}")


def vae_decode_term(job: ImageJob, model: ImageModelShape) -> MemoryTerm:
    images, side_w, side_h, ab = _decode_extent(job, model)
    width = model.vae_block_out_channels[0]
    nbytes = images * VAE_LIVE_TENSORS * side_w * side_h * width * ab
    tiled = " (one tile)" if job.vae_tiling else " (sliced: one image)" if job.vae_slicing and job.batch > 1 else ""
    return term("VAE decode activations", "activations", nbytes,
                f"{images} × {VAE_LIVE_TENSORS} live tensors × {side_w}×{side_h}{tiled} × {width} ch × {ab:g} B "
                "(fitted to FakeTensor traces)")
