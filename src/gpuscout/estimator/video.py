"""Peak memory per GPU of diffusion video generation (Wan 2.1, CogVideoX) with diffusers.

The pipeline runs three phases one after another: the text encoder once, the DiT every step, the
3D causal VAE decode once. Peak = max over phases of (weights resident then + that phase's
activations), plus the CUDA context and an allocator reserve (`estimator/overhead.py`):

* offload "none" — every component stays on the GPU: all weights + max(phase activations);
* offload "model" — diffusers `enable_model_cpu_offload`: one whole component on the GPU at a
  time, so each phase holds only its own component;
* offload "sequential" — `enable_sequential_cpu_offload`: accelerate moves each leaf module onto
  the GPU for its forward only, so the weights term is the largest leaf module (for Wan, the
  UMT5-XXL token embedding: 1.05 B parameters) + the largest phase's activations.

Activations (calibrated against FakeTensor + MemTracker traces of the real diffusers models,
`gpuscout.trace.video`; torch 2.13, diffusers 0.42.1; docs/video.md §2):

* DiT — S tokens per self-attention sequence: the video tokens, N = latent frames × (H/8/2) ×
  (W/8/2) with latent frames = (frames − 1)/4 + 1, plus for CogVideoX its 226 text tokens, which
  join the sequence (CogVideoXAttnProcessor2_0). One block's working set is DIT_LIVE_D·D +
  DIT_LIVE_FFN·ffn values per token, fitted on Wan (16.0 D at 1.3B, 11.1 D at 14B traced) and an
  over-estimate for CogVideoX (12.0 D traced at 2B, 13.1 D at 5B, against 13.2 D). With SDPA there
  is no S² term; eager (math) attention adds DIT_MATH_SCORE_COPIES × heads × S² × 2 B.
  Guidance: WanPipeline runs the unconditional pass as a second, separate forward (batch as is);
  CogVideoXPipeline concatenates it to the conditional batch (`torch.cat([latents] * 2)`), so its
  activations double.
* VAE decode — both VAEs decode a few latent frames at a time with a causal cache, so the peak
  does not grow with the clip length: VAE_LIVE[family] units of (pixel frames per decoded chunk ×
  H × W × last decoder width) plus the decoded clip itself (frames × 3 × H × W). Spatial tiling
  bounds H × W to one tile (`tile_sample_min_height/width` of each VAE).
"""

from __future__ import annotations

from gpuscout.estimator import overhead
from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.job import VideoJob
from gpuscout.workload.shape import DTYPE_BYTES
from gpuscout.workload.video import VideoComponent, VideoModelShape, check_video_size

# Values of width D / ffn live per token inside one DiT block (FakeTensor traces, bf16, sdpa), the
# slope between 17 frames 256² and 33 frames 512²: Wan 1.3B (D 1536, ffn 8960) 15.9 D and 14B
# (D 5120, ffn 13824) 11.1 D per token; 7 D + 1.55 ffn fits both within 1%. CogVideoX (ffn 4 D,
# the slope over its joint text + video sequence): 2B 12.03 D, 5B 13.07 D (its fp32 rotary
# embedding adds about 1 D); the same 7 D + 1.55 ffn = 13.2 D over-estimates them by 10% and 1%,
# the safe side, so one fit serves both families.
# LTX-Video 0.9.0 (D 2048, ffn 4 D, cross-attention to 128 T5 tokens) traces 16.06 D per token
# (768 → 6,930 tokens, 16.0 D over 192 → 1,280), above 13.2 D: its own D coefficient, 9.9 (16.1 D).
DIT_LIVE_D: dict[str, float] = {"wan": 7.0, "cogvideox": 7.0, "ltx": 9.9}
DIT_LIVE_FFN = 1.55
# Fixed denoiser activations: the 512 text-token states and cross-attention K/V (traced 5.6 MiB at
# 1.3B, 19 MiB at 14B: about 3 text_tokens × (text_dim + D) values; counted as that).
DIT_TEXT_LIVE = 3
# Eager (math) attention: torch's math SDPA upcasts to fp32, so scores and softmax are 2 × 4 B =
# 4 units of 2 B per head per S². Traced 3.96 (Wan 1.3B, N 9216), 3.73 (N 1280) and 4.08
# (CogVideoX-2B under the math SDPA backend, S 1506, with that size's linear terms included).
DIT_MATH_SCORE_COPIES = 4
# VAE decode working set, in units of (pixel frames per decoded chunk × H × W × last decoder
# width), traced in the VAE's dtype:
# * AutoencoderKLWan (chunk: 1 latent frame = 4 pixel frames, 96 ch): 12.68–12.69 at 256² and
#   512², 9 and 17 frames, fp32; one 256² tile when tiled (3.18 at 512² = 12.7 / 4 tiles' area).
# * AutoencoderKLCogVideoX (chunk: num_latent_frames_batch_size 2 latent = 8 pixel frames, 128
#   ch): 22.2–22.4 at 256², 512² and 720×480, 17 to 49 frames, bf16 (the peak is in a later
#   chunk, which carries the conv cache of the one before: 9 frames, one chunk, trace 25% less);
#   tiled, 22.3 over one 360 × 240 tile at 720×480, 512² and 1024². 22.5 keeps the estimate at or
#   just above every trace.
# * AutoencoderKLLTXVideo (the whole clip in one call, 128 ch at the last level): 0.393–0.395
#   units of (frames × H × W × 128) besides the clip itself at 256², 512² (17, 33 frames) and
#   704×480×161, bf16; one 512² tile of 1024² when tiled. 0.38 + the clip stays 0.3–2% above.
VAE_LIVE: dict[str, float] = {"wan": 13.0, "cogvideox": 22.5, "ltx": 0.38}


def estimate_video_memory(job: VideoJob, model: VideoModelShape, gpu: Gpu) -> MemoryBreakdown:
    check_video_size(model, job.width, job.height, job.frames)
    phases = phase_peaks(job, model)
    name, allocated = max(phases.items(), key=lambda kv: kv[1])
    weights = weight_terms(job, model)
    acts = [denoiser_term(job, model), vae_decode_term(job, model), conv_workspace_term(job, model)]
    fixed = [
        term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES, overhead.CUDA_CONTEXT_SOURCE),
        term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION, overhead.ALLOCATOR_SOURCE),
    ]
    return MemoryBreakdown(
        job_kind="video", gpu_sku=gpu.sku, gpus=1, usable_bytes=usable_memory_bytes(gpu),
        terms=(*weights, *acts, *fixed), peak_bytes=allocated + total_bytes(fixed),
        notes=(_peak_note(job), f"{name} is the largest phase here"),
    )


def component_dtype(job: VideoJob, component: VideoComponent) -> str:
    """The job's dtype, except a VAE the pipeline runs in fp32 (the Wan examples load it so)."""
    return "fp32" if component.role == "vae" and component.default_dtype == "fp32" else job.dtype


def component_bytes(job: VideoJob, component: VideoComponent) -> float:
    return component.params * DTYPE_BYTES[component_dtype(job, component)]


def largest_module_bytes(job: VideoJob, model: VideoModelShape) -> tuple[float, VideoComponent]:
    """The largest leaf module's bytes (sequential offload holds one at a time) and its component."""
    part = max(model.components, key=lambda c: c.largest_module_params * DTYPE_BYTES[component_dtype(job, c)])
    return part.largest_module_params * DTYPE_BYTES[component_dtype(job, part)], part


def phase_peaks(job: VideoJob, model: VideoModelShape) -> dict[str, float]:
    """Allocated bytes at the peak of each phase: resident weights + the phase's activations."""
    acts = {"text encoding": 0.0, "denoising": denoiser_term(job, model).bytes,
            "VAE decode": vae_decode_term(job, model).bytes + conv_workspace_term(job, model).bytes}
    roles = {"text encoding": "text_encoder", "denoising": "denoiser", "VAE decode": "vae"}
    if job.offload == "none":
        resident = sum(component_bytes(job, c) for c in model.components)
        return {name: resident + a for name, a in acts.items()}
    if job.offload == "sequential":
        leaf, _ = largest_module_bytes(job, model)
        return {name: leaf + a for name, a in acts.items()}
    return {name: sum(component_bytes(job, c) for c in model.components if c.role == roles[name]) + a
            for name, a in acts.items()}


def weight_terms(job: VideoJob, model: VideoModelShape) -> list[MemoryTerm]:
    if job.offload == "sequential":
        nbytes, part = largest_module_bytes(job, model)
        return [term(f"weights (sequential offload: largest module, {part.name}.{part.largest_module})", "weights",
                     nbytes, f"{part.largest_module_params:,} params × {DTYPE_BYTES[component_dtype(job, part)]:g} B;"
                     " every other module waits in CPU memory")]
    if job.offload == "model":
        big = max(model.components, key=lambda c: component_bytes(job, c))
        return [term(f"weights (model offload: largest component, {big.name})", "weights", component_bytes(job, big),
                     f"{big.params:,} params × {DTYPE_BYTES[component_dtype(job, big)]:g} B; one component on the "
                     "GPU at a time")]
    return [term(f"weights: {c.name}", "weights", component_bytes(job, c),
                 f"{c.params:,} params × {DTYPE_BYTES[component_dtype(job, c)]:g} B ({component_dtype(job, c)})")
            for c in model.components]


def denoiser_batch(job: VideoJob, model: VideoModelShape) -> int:
    """Clips' worth of sequences in one transformer forward: doubled where guidance is batched."""
    return job.batch * (2 if job.guidance and model.guidance_batched else 1)


def denoiser_term(job: VideoJob, model: VideoModelShape) -> MemoryTerm:
    ab = DTYPE_BYTES[job.dtype]
    s = model.sequence(job.width, job.height, job.frames)
    live_d = DIT_LIVE_D[model.family]
    per_token = live_d * model.hidden_size + DIT_LIVE_FFN * model.ffn_dim
    # Cross-attention keeps the text states and their K/V; text in the sequence is already in S.
    text = 0.0 if model.text_in_sequence else DIT_TEXT_LIVE * model.text_tokens * (model.text_dim + model.hidden_size)
    scores = DIT_MATH_SCORE_COPIES * model.attention_heads * s * s if job.attention == "eager" else 0.0
    batch = denoiser_batch(job, model)
    nbytes = batch * (s * per_token + text + scores) * ab
    joined = f" ({model.text_tokens} text + video)" if model.text_in_sequence else ""
    how = f"{s:,} tokens{joined} × ({live_d:g}·D + {DIT_LIVE_FFN:g}·ffn)"
    if scores:
        how += f" + eager scores {DIT_MATH_SCORE_COPIES}·{model.attention_heads}·S²"
    if model.guidance_batched:
        why = "guidance doubles the batch" if job.guidance else "no guidance: no doubled batch"
    else:
        why = "guidance runs a second, separate pass"
    return term("denoiser activations", "activations", nbytes,
                f"batch {batch} ({why}) × {how} × {ab:g} B (fitted to FakeTensor traces)")


def decode_side(job: VideoJob, model: VideoModelShape) -> tuple[int, int]:
    """(width, height) the VAE decodes at once: the clip, or one tile of it under tiling."""
    if not job.vae_tiling:
        return job.width, job.height
    tile_w, tile_h = model.vae_tile
    return min(job.width, tile_w), min(job.height, tile_h)


def _decode_working(job: VideoJob, model: VideoModelShape) -> float:
    """Bytes of the decoder's traced working set for one clip, besides the decoded frames."""
    ab = DTYPE_BYTES[component_dtype(job, model.component("vae"))]
    side_w, side_h = decode_side(job, model)
    chunk = model.decode_chunk_frames(job.frames)  # pixel frames the decoder holds at once
    return VAE_LIVE[model.family] * chunk * side_w * side_h * model.vae_decoder_channels[-1] * ab


def conv_workspace_term(job: VideoJob, model: VideoModelShape) -> MemoryTerm:
    """cuDNN workspace of the decode's largest convolution (overhead.CONV_WORKSPACE_INPUTS). The 3D decoders'
    layer sizes are not modelled one by one, so the largest input is taken as a third of the traced working
    set, its share in the 2D decoder (2 of the 6 live tensors, estimator/image.py)."""
    nbytes = overhead.CONV_WORKSPACE_INPUTS * job.batch * _decode_working(job, model) / 3
    return term("cuDNN workspace (VAE decode)", "activations", nbytes,
                f"batch {job.batch} × a third of the decode working set: {overhead.CONV_WORKSPACE_SOURCE}")


def vae_decode_term(job: VideoJob, model: VideoModelShape) -> MemoryTerm:
    ab = DTYPE_BYTES[component_dtype(job, model.component("vae"))]
    side_w, side_h = decode_side(job, model)
    width = model.vae_decoder_channels[-1]
    chunk = model.decode_chunk_frames(job.frames)  # pixel frames the decoder holds at once
    live = VAE_LIVE[model.family]
    working = _decode_working(job, model)
    clip = job.frames * 3 * job.width * job.height * ab
    nbytes = job.batch * (working + clip)
    tiled = " (one tile)" if job.vae_tiling else ""
    return term("VAE decode activations", "activations", nbytes,
                f"batch {job.batch} × ({live:g} × {chunk} frames × {side_w}×{side_h}{tiled} × "
                f"{width} ch + the decoded {job.frames} frames × 3 ch) × {ab:g} B; chunked causal decode, so "
                "frames add only the output")


def _peak_note(job: VideoJob) -> str:
    return {
        "none": "peak = all weights + the largest phase's activations + overheads",
        "model": "model offload: peak = the largest (component + its phase's activations) + overheads",
        "sequential": "sequential offload: peak = largest leaf module + the largest phase's activations + overheads",
    }[job.offload]
