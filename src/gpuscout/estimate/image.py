"""Peak memory per GPU of diffusion image generation (SD 1.5, SDXL, FLUX) with diffusers.

Peak = resident weights + max(denoising activations, VAE-decode activations) + overheads.
Inference keeps no activations for backward, so each phase's working set is the largest set of
tensors alive at once:

* UNet — the skip connections saved on the way down (every resnet/attention output per level)
  plus the largest transient at one level: a resnet (input, norm, conv), attention (Q, K, V,
  out; with eager attention also the heads · N² score matrix and its softmax), or the GEGLU
  feed-forward (projection to 2 · 4C, gated 4C).
* DiT (FLUX) — the image and text token streams plus one block's transient: QKV (3D), the
  attention output (D) and the MLP (4D in, 4D activated), i.e. 12 D per token.
* VAE decode — about 18 live full-resolution tensors of the decoder's last block width
  (reference/estimators.md §2.8: the sd2R estimate, fitted to one observed FLUX OOM at 4 B per
  value; gpuscout scales it by the job's dtype). Tiling bounds it to one 512 × 512 tile.

Classifier-free guidance doubles the denoiser batch (the conditional and unconditional passes
run as one batch in diffusers' pipelines).
"""

from __future__ import annotations

from gpuscout.estimate import overhead
from gpuscout.estimate.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.estimate.validate import validate_image_job
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.image import ImageComponent, ImageModelShape
from gpuscout.workload.job import ImageJob
from gpuscout.workload.shape import DTYPE_BYTES

VAE_LIVE_TENSORS = 18  # sd2R fit, reference/estimators.md §2.8 (second-hand; one observation)
VAE_TILE_PX = 512  # diffusers AutoencoderKL tile_sample_min_size for SD-class VAEs
GEGLU_FF_MULT = 4  # diffusers FeedForward default mult=4, GEGLU projects to 2 × 4C


def estimate_image_memory(job: ImageJob, model: ImageModelShape, gpu: Gpu) -> MemoryBreakdown:
    validate_image_job(job, model.native_resolution_px, model.max_resolution_px)
    weights = weight_terms(job, model)
    denoise = denoiser_term(job, model)
    decode = vae_decode_term(job, model)
    allocated = total_bytes(weights) + max(denoise.bytes, decode.bytes)
    fixed = [
        term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES, overhead.CUDA_CONTEXT_SOURCE),
        term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION, overhead.ALLOCATOR_SOURCE),
    ]
    phase = "denoising" if denoise.bytes >= decode.bytes else "VAE decode"
    return MemoryBreakdown(
        job_kind="image", gpu_sku=gpu.sku, gpus=1, usable_bytes=usable_memory_bytes(gpu),
        terms=(*weights, denoise, decode, *fixed), peak_bytes=allocated + total_bytes(fixed),
        notes=(f"peak = weights + max(denoising, VAE decode) + overheads; {phase} is larger here",),
    )


def component_dtype(job: ImageJob, component: ImageComponent) -> str:
    """The job's dtype, except a VAE that the pipeline upcasts to fp32 (SDXL's force_upcast)."""
    return "fp32" if component.role == "vae" and component.default_dtype == "fp32" else job.dtype


def weight_terms(job: ImageJob, model: ImageModelShape) -> list[MemoryTerm]:
    if job.cpu_offload:
        big = max(model.components, key=lambda c: c.params)
        b = DTYPE_BYTES[component_dtype(job, big)]
        return [term(f"weights (offload: largest component, {big.name})", "weights", big.params * b,
                     f"{big.params:,} params × {b:g} B; the others wait in CPU memory")]
    return [term(f"weights: {c.name}", "weights", c.params * DTYPE_BYTES[component_dtype(job, c)],
                 f"{c.params:,} params × {DTYPE_BYTES[component_dtype(job, c)]:g} B ({component_dtype(job, c)})")
            for c in model.components]


def denoiser_batch(job: ImageJob) -> int:
    return job.batch * (2 if job.guidance else 1)


def denoiser_term(job: ImageJob, model: ImageModelShape) -> MemoryTerm:
    ab = DTYPE_BYTES[job.dtype]
    latent_w = job.width // model.vae_scale_factor
    latent_h = job.height // model.vae_scale_factor
    batch = denoiser_batch(job)
    eager = job.attention == "eager"
    if model.denoiser_kind == "unet":
        per_image, how = unet_bytes(model, latent_w, latent_h, ab, eager), "skips + largest level transient"
    else:
        per_image, how = dit_bytes(model, latent_w, latent_h, ab, eager), "token streams + one block (12·D/token)"
    cfg = " (×2 for guidance)" if job.guidance else ""
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
        feed_forward = 3 * GEGLU_FF_MULT * tokens * channels * ab if blocks else 0.0
        peak = max(peak, resnet, attention, feed_forward)
    return skips + peak


def dit_bytes(model: ImageModelShape, latent_w: int, latent_h: int, ab: float, eager: bool) -> float:
    width = model.hidden_size or 0
    image_tokens = (latent_w // model.patch_size) * (latent_h // model.patch_size)
    tokens = image_tokens + model.text_tokens
    scores = 2 * model.attention_heads[0] * tokens * tokens * ab if eager else 0.0
    return tokens * width * ab * (2 + 12) + scores


def vae_decode_term(job: ImageJob, model: ImageModelShape) -> MemoryTerm:
    vae = next(c for c in model.components if c.role == "vae")
    ab = DTYPE_BYTES[component_dtype(job, vae)]
    width = model.vae_block_out_channels[0]
    side_w, side_h = (min(job.width, VAE_TILE_PX), min(job.height, VAE_TILE_PX)) if job.vae_tiling else (
        job.width, job.height)
    images = 1 if job.vae_tiling else job.batch
    nbytes = images * VAE_LIVE_TENSORS * side_w * side_h * width * ab
    tiled = " (one tile)" if job.vae_tiling else ""
    return term("VAE decode activations", "activations", nbytes,
                f"{images} × 18 live tensors × {side_w}×{side_h}{tiled} × {width} ch × {ab:g} B (sd2R fit)")
