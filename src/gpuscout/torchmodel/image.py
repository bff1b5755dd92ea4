"""A diffusion job's real `diffusers` models: denoiser and VAE built from stored configs, and their inputs.

Used by the memory trace (`gpuscout.trace.image`, on the meta device) and the image bench
(`gpuscout.measure.image_bench`, on the CPU or a GPU with diffusers' own random initialisation):
both build the same models with the same attention and feed the same input shapes. Nothing is
downloaded. torch and diffusers are imported inside functions only.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuscout.errors import SpecError
from gpuscout.workload.image import ImageComponent, ImageModelShape

ImageDtype = Literal["fp32", "bf16", "fp16"]
ImageAttention = Literal["sdpa", "eager"]

_TIMESTEP = 999  # the first denoising step; values are never read by fake tensors
_GUIDANCE_SCALE = 3.5  # FluxPipeline's default guidance_scale (an embedding input, not a batch)


def denoiser_passes(shape: ImageModelShape, guidance: bool) -> int:
    """Batch multiplier of one denoiser forward: 2 with classifier-free guidance, except for FLUX.

    SD/SDXL pipelines run the conditional and unconditional passes as one doubled batch. FLUX.1-dev
    is guidance-distilled: FluxPipeline feeds `guidance_scale` as an embedding and runs one pass
    (a second, separate pass only with `true_cfg_scale > 1` and a negative prompt).
    """
    return 2 if guidance and shape.family != "flux" else 1


def vae_run_dtype(vae: ImageComponent, dtype: ImageDtype) -> ImageDtype:
    """The job's dtype, except a VAE that the pipeline upcasts to fp32 (SDXL's force_upcast)."""
    return "fp32" if vae.default_dtype == "fp32" else dtype


def image_component(shape: ImageModelShape, role: str) -> ImageComponent:
    return next(c for c in shape.components if c.role == role)


def require_divisible(shape: ImageModelShape, width: int, height: int, *, action: str = "trace") -> None:
    step = shape.vae_scale_factor * shape.patch_size
    if width % step or height % step:
        raise SpecError(
            f"Cannot {action} {shape.name} at {width}×{height}.",
            f"its latents are 1/{shape.vae_scale_factor} of the image"
            + (f", packed in {shape.patch_size}×{shape.patch_size} patches" if shape.patch_size > 1 else "")
            + f", so both sides must be multiples of {step}.",
            f"round width and height to multiples of {step}.",
        )


def build_image_model(config: dict[str, Any], dtype: Any, attention: ImageAttention, device: Any = "meta") -> Any:
    """Build a diffusers model from its config on `device`, cast it, and set its attention.

    On "meta" (the trace) nothing is allocated; on a real device the weights are diffusers' own
    random initialisation (the benchmark: nothing is downloaded). `from_config` ignores
    `torch_dtype`, and diffusers' `ModelMixin.to(dtype)` logs a warning about fp32-kept modules
    (none in these classes), so the plain `nn.Module.to` casts it — as
    `from_pretrained(torch_dtype=...)` would. "eager" is attention without SDPA: diffusers'
    `AttnProcessor` (scores and softmax materialized) for `Attention` modules, and the native math
    backend for models that dispatch attention (FLUX).
    """
    import diffusers
    import torch

    with torch.device(device):
        model = getattr(diffusers, config["_class_name"]).from_config(config)
    torch.nn.Module.to(model, dtype)
    model.eval()
    if attention == "eager":
        _use_eager_attention(model)
    return model


def _use_eager_attention(model: Any) -> None:
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_dispatch import AttentionBackendName
    from diffusers.models.attention_processor import Attention, AttnProcessor

    for module in model.modules():
        if isinstance(module, Attention):
            module.set_processor(AttnProcessor())
        elif isinstance(module, AttentionModuleMixin) and hasattr(module.processor, "_attention_backend"):
            # Per processor, as ModelMixin.set_attention_backend does, without its global side effect.
            module.processor._attention_backend = AttentionBackendName._NATIVE_MATH


def latent_hw(shape: ImageModelShape, width: int, height: int) -> tuple[int, int]:
    return height // shape.vae_scale_factor, width // shape.vae_scale_factor


def denoiser_inputs(
    shape: ImageModelShape, config: dict[str, Any], width: int, height: int, batch: int, dtype: Any,
    *, device: Any = None, random: bool = False,
) -> dict[str, Any]:
    """Inputs shaped as the diffusers pipeline passes them to the denoiser for one step.

    `random=False` makes uninitialised tensors (enough for fake tensors, whose values are never
    read); `random=True` draws standard-normal values on `device` (a real benchmark step: text
    states stand in for the text encoders' output, position ids are arbitrary but finite).
    """
    import torch

    def make(*size: int, dtype: Any = dtype) -> Any:
        return torch.randn(*size, dtype=dtype, device=device) if random else torch.empty(*size, dtype=dtype)

    latent_h, latent_w = latent_hw(shape, width, height)
    text = make(batch, shape.text_tokens, shape.cross_attention_dim)
    if shape.denoiser_kind == "unet":
        inputs: dict[str, Any] = {
            "sample": make(batch, shape.latent_channels, latent_h, latent_w),
            "timestep": torch.tensor(_TIMESTEP, device=device),
            "encoder_hidden_states": text,
        }
        if config.get("addition_embed_type") == "text_time":  # SDXL: pooled text + size/crop ids
            pooled = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
            inputs["added_cond_kwargs"] = {"text_embeds": make(batch, pooled), "time_ids": make(batch, 6)}
        return inputs
    tokens = (latent_h // shape.patch_size) * (latent_w // shape.patch_size)
    inputs = {
        "hidden_states": make(batch, tokens, config["in_channels"]),
        "encoder_hidden_states": text,
        "pooled_projections": make(batch, config["pooled_projection_dim"]),
        "timestep": torch.full((batch,), _TIMESTEP / 1000, dtype=dtype, device=device),
        "img_ids": make(tokens, 3),
        "txt_ids": make(shape.text_tokens, 3),
    }
    if config.get("guidance_embeds"):
        inputs["guidance"] = torch.full((batch,), _GUIDANCE_SCALE, dtype=torch.float32, device=device)
    return inputs
