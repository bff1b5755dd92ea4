"""Image trace mode: the memory oracle for diffusion image generation with the real diffusers models.

The preset's denoiser (`UNet2DConditionModel` or `FluxTransformer2DModel`) and `AutoencoderKL` are
built from the stored configs on the meta device and made fake (no memory, nothing downloaded).
Then, under PyTorch's `FakeTensorMode` and MemTracker (`memtrace`), one denoiser forward runs at
the job's latent size (inference, `torch.no_grad`), and one VAE decode of the job's latents.
Each phase reports its peak beyond the model's resident weights; the phase's inputs (latents,
text states) count as part of that peak, as they are live on the GPU.

Like `trace`, it runs on the CPU device: SDPA takes PyTorch's CPU flash kernel, which, like the
CUDA flash / memory-efficient kernels, keeps no N² score matrix. GPU-only memory (CUDA context,
cuBLAS workspace, allocator rounding) is not traced. Text encoders are not built or traced.

torch and diffusers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuscout.errors import SpecError
from gpuscout.measure.memtrace import (
    category_peak_tracker,
    explain_fake_failures,
    import_trace_stack,
    materialize_fake,
    peak_total,
    require_positive,
)
from gpuscout.workload.image import ImageComponent, ImageModelShape, image_component_configs, load_image_preset

ImageDtype = Literal["fp32", "bf16", "fp16"]
ImageAttention = Literal["sdpa", "eager"]

_TIMESTEP = 999  # the first denoising step; values are never read by fake tensors
_GUIDANCE_SCALE = 3.5  # FluxPipeline's default guidance_scale (an embedding input, not a batch)


class ImageTraceResult(BaseModel):
    """Peak memory of one denoiser forward and one VAE decode, each beyond its resident weights."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    denoiser_peak_bytes: int
    vae_decode_peak_bytes: int
    weights_bytes: dict[str, int]  # per component built (denoiser and VAE), at the dtype it ran in
    wall_s: float
    notes: tuple[str, ...]


def trace_image_step(
    preset_id: str,
    *,
    width: int,
    height: int,
    batch: int,
    guidance: bool,
    dtype: ImageDtype,
    attention: ImageAttention = "sdpa",
    vae_tiling: bool = False,
) -> ImageTraceResult:
    """Trace one denoiser forward and one VAE decode of a diffusers image pipeline's real models."""
    shape = load_image_preset(preset_id)
    require_positive(width=width, height=height, batch=batch)
    require_divisible(shape, width, height)
    torch = import_trace_stack("torch", "diffusers")
    from torch._subclasses.fake_tensor import FakeTensorMode

    configs = image_component_configs(preset_id)
    denoiser, vae = image_component(shape, "denoiser"), image_component(shape, "vae")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    vae_dtype = dtypes[vae_run_dtype(vae, dtype)]
    start_s = time.perf_counter()
    unet_or_dit = build_image_model(configs[denoiser.name], dtypes[dtype], attention)
    decoder = build_image_model(configs[vae.name], vae_dtype, attention)
    if vae_tiling:
        decoder.enable_tiling()
    passes = denoiser_passes(shape, guidance)
    with explain_fake_failures("Image trace mode could not run this model on fake CPU tensors.",
                               "use the analytic estimate (drop --trace), or try attention='sdpa' and another "
                               "dtype."), FakeTensorMode():
        materialize_fake(unet_or_dit)
        materialize_fake(decoder)
        inputs = denoiser_inputs(shape, configs[denoiser.name], width, height, batch * passes, dtypes[dtype])
        denoiser_peak = _phase_peak(unet_or_dit, lambda: unet_or_dit(**inputs, return_dict=False), inputs)
        latents = torch.empty(batch, shape.latent_channels, *latent_hw(shape, width, height), dtype=vae_dtype)
        decode = _as_module(decoder.decode)
        vae_peak = _phase_peak(decode, lambda: decode(latents, return_dict=False), {"z": latents})
    weights = {denoiser.name: weight_bytes(unet_or_dit), vae.name: weight_bytes(decoder)}
    return ImageTraceResult(
        denoiser_peak_bytes=denoiser_peak,
        vae_decode_peak_bytes=vae_peak,
        weights_bytes=weights,
        wall_s=time.perf_counter() - start_s,
        notes=_notes(shape, passes, guidance, vae_run_dtype(vae, dtype), attention, vae_tiling),
    )


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


# --- building (shared with the image benchmark, `image_bench`) --------------------------------------


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


# --- tracing ---------------------------------------------------------------------------------------


def _phase_peak(model: Any, run: Any, inputs: dict[str, Any]) -> int:
    """Peak bytes while `run()` executes under a fresh tracker, minus the model's weights."""
    import torch

    tracker = category_peak_tracker()
    tracker.track_external(model, *_tensors(inputs))
    with tracker, torch.no_grad():
        run()
    return peak_total(tracker) - weight_bytes(model)


def _as_module(method: Any) -> Any:
    """Wrap a bound model method as a module's forward.

    MemTracker refuses a second root-level forward of one module (tiled decode calls the decoder
    once per tile); under a wrapper root those calls are nested and allowed.
    """
    import torch

    class _Method(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.owner = method.__self__

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

    return _Method()


def _tensors(inputs: dict[str, Any]) -> list[Any]:
    found: list[Any] = []
    for value in inputs.values():
        found.extend(_tensors(value) if isinstance(value, dict) else [value])
    return found


def weight_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers (shared tensors once)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(int(t.numel() * t.element_size()) for t in tensors.values())


def _notes(
    shape: ImageModelShape, passes: int, guidance: bool, vae_dtype: str, attention: str, tiling: bool
) -> tuple[str, ...]:
    notes = [
        "GPU-only parts (CUDA context, cuBLAS workspace, caching-allocator rounding and fragmentation) "
        "are not traced; add them from the analytic estimate",
        "each peak is beyond that model's resident weights and includes its inputs; text encoders "
        "are not built",
        f"denoiser batch = job batch × {passes}"
        + (" (guidance-distilled: one pass; guidance is an embedding)" if guidance and passes == 1 else ""),
        f"VAE decoded in {vae_dtype}" + (" with tiling" if tiling else ""),
    ]
    if attention == "eager":
        notes.append("eager attention (no SDPA) in both the denoiser and the VAE's mid-block attention")
    return tuple(notes)
