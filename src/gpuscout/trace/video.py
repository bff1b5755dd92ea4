"""Trace mode for video models: one transformer forward and one VAE decode on fake tensors.

Wan 2.1 (WanTransformer3DModel, AutoencoderKLWan), CogVideoX (CogVideoXTransformer3DModel,
AutoencoderKLCogVideoX) and LTX-Video (LTXVideoTransformer3DModel, AutoencoderKLLTXVideo) take
their inputs in different layouts; `_denoiser_inputs` builds what each pipeline passes
(WanPipeline / CogVideoXPipeline / LTXPipeline in diffusers 0.42.1).

The real diffusers modules are built on the meta device from the preset's stored configs, made
fake (`trace.memtrace.materialize_fake`) and run under FakeTensorMode with MemTracker, as
`trace.image` does for image models. Each phase reports its peak beyond its own weights. These
traces calibrated the activation coefficients of `estimator.video`; tests hold the two together.

torch and diffusers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from gpuscout.frozen import Frozen
from gpuscout.torchmodel.image import ImageAttention, build_image_model
from gpuscout.torchmodel.video import ltx_transformer_inputs
from gpuscout.trace.image import _as_module, _phase_peak, weight_bytes
from gpuscout.trace.memtrace import explain_fake_failures, import_trace_stack, materialize_fake, require_positive
from gpuscout.workload.job import ImageDtype
from gpuscout.workload.video import VideoModelShape, check_video_size, load_video_preset, video_component_configs


class VideoTraceResult(Frozen):
    """Peak bytes of one transformer forward and one VAE decode (at `batch`), each beyond its weights."""


    denoiser_peak_bytes: int
    vae_decode_peak_bytes: int
    weights_bytes: dict[str, int]
    wall_s: float


def trace_video_step(preset_id: str, *, width: int, height: int, frames: int, dtype: ImageDtype = "bf16",
                     attention: ImageAttention = "sdpa", vae_tiling: bool = False,
                     batch: int = 1) -> VideoTraceResult:
    """Trace one transformer forward and one VAE decode of `batch` clips at these sizes.

    `batch` is the transformer's input batch: CogVideoXPipeline concatenates the unconditional
    latents with the conditional ones, so a guided CogVideoX step runs at batch 2 per clip.
    """
    shape = load_video_preset(preset_id)
    require_positive(width=width, height=height, frames=frames, batch=batch)
    check_video_size(shape, width, height, frames)
    torch = import_trace_stack("diffusers")
    from torch._subclasses.fake_tensor import FakeTensorMode

    configs = video_component_configs(preset_id)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    vae_part = shape.component("vae")
    vae_dtype = torch.float32 if vae_part.default_dtype == "fp32" else dtypes[dtype]
    start = time.perf_counter()
    # CogVideoX's attention processor joins text and video tokens itself; diffusers' plain
    # AttnProcessor would treat the text as cross-attention. Its "eager" is SDPA on the math
    # backend instead (scores materialized, as with diffusers' math fallback).
    joint = shape.family == "cogvideox"
    build_attention: ImageAttention = "sdpa" if joint else attention
    transformer = build_image_model(configs[shape.component("denoiser").name], dtypes[dtype], build_attention)
    vae = build_image_model(configs[vae_part.name], vae_dtype, build_attention)
    if vae_tiling:
        vae.enable_tiling()
    lat = (shape.latent_frames(frames), height // shape.vae_scale_spatial, width // shape.vae_scale_spatial)
    with explain_fake_failures("Video trace mode could not run this model on fake CPU tensors.",
                               "use the analytic estimate."), FakeTensorMode():
        materialize_fake(transformer)
        materialize_fake(vae)
        inputs = _denoiser_inputs(torch, shape, configs[shape.component("denoiser").name], lat, batch, dtypes[dtype])
        with _math_attention(torch, joint and attention == "eager"):
            dit_peak = _phase_peak(transformer, lambda: transformer(**inputs, return_dict=False),
                                   _tensor_inputs(torch, inputs))
        latents = torch.empty(batch, shape.latent_channels, *lat, dtype=vae_dtype)
        decode = _as_module(vae.decode)
        vae_peak = _phase_peak(decode, lambda: decode(latents, return_dict=False), {"z": latents})
    return VideoTraceResult(
        denoiser_peak_bytes=dit_peak, vae_decode_peak_bytes=vae_peak,
        weights_bytes={"transformer": weight_bytes(transformer), "vae": weight_bytes(vae)},
        wall_s=time.perf_counter() - start,
    )


def _denoiser_inputs(torch: Any, shape: VideoModelShape, config: dict[str, Any], lat: tuple[int, int, int],
                     batch: int, dtype: Any) -> dict[str, Any]:
    """The transformer's forward arguments as the family's diffusers pipeline passes them."""
    text = torch.empty(batch, shape.text_tokens, shape.text_dim, dtype=dtype)
    timestep = torch.empty(batch, dtype=torch.long)
    if shape.family == "ltx":
        return ltx_transformer_inputs(torch, shape, lat, batch, dtype, "cpu", torch.empty)
    if shape.family != "cogvideox":
        return {"hidden_states": torch.empty(batch, shape.latent_channels, *lat, dtype=dtype),
                "timestep": timestep, "encoder_hidden_states": text}
    # CogVideoXPipeline: latents are (batch, frames, channels, H, W); with rotary embeddings (5B) it
    # passes (cos, sin) of shape (video tokens, head_dim) in fp32 (get_3d_rotary_pos_embed).
    inputs: dict[str, Any] = {"hidden_states": torch.empty(batch, lat[0], shape.latent_channels, lat[1], lat[2],
                                                           dtype=dtype),
                              "timestep": timestep, "encoder_hidden_states": text}
    if config.get("use_rotary_positional_embeddings"):
        n = shape.tokens(lat[2] * shape.vae_scale_spatial, lat[1] * shape.vae_scale_spatial,
                         (lat[0] - 1) * shape.vae_scale_temporal + 1)
        rope = (torch.empty(n, shape.attention_head_dim), torch.empty(n, shape.attention_head_dim))
        inputs["image_rotary_emb"] = rope
    return inputs


def _tensor_inputs(torch: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The tensors among the forward arguments (MemTracker tracks tensors, not the grid sizes)."""
    found: dict[str, Any] = {}
    for name, value in inputs.items():
        parts = value if isinstance(value, tuple) else (value,)
        found.update({f"{name}.{i}": t for i, t in enumerate(parts) if isinstance(t, torch.Tensor)})
    return found


@contextlib.contextmanager
def _math_attention(torch: Any, on: bool) -> Iterator[None]:
    """Force torch's math SDPA (scores and softmax materialized) when `on`."""
    if not on:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield
