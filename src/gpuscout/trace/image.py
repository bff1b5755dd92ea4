"""Image trace mode: the memory oracle for diffusion image generation with the real diffusers models.

The preset's denoiser (`UNet2DConditionModel` or `FluxTransformer2DModel`) and `AutoencoderKL` are
built from the stored configs on the meta device by `torchmodel.image` and made fake (no memory,
nothing downloaded). Then, under PyTorch's `FakeTensorMode` and MemTracker (`trace.memtrace`),
one denoiser forward runs at the job's latent size (inference, `torch.no_grad`), and one VAE
decode of the job's latents. Each phase reports its peak beyond the model's resident weights; the
phase's inputs (latents, text states) count as part of that peak, as they are live on the GPU.

Like the language-model trace (`trace.llm`), it runs on the CPU device: SDPA takes PyTorch's CPU
flash kernel, which, like the CUDA flash / memory-efficient kernels, keeps no N² score matrix.
GPU-only memory (CUDA context, cuBLAS workspace, allocator rounding) is not traced. Text encoders
are not built or traced.

torch and diffusers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import time
from typing import Any

from gpuscout.frozen import Frozen
from gpuscout.torchmodel.image import (
    ImageAttention,
    ImageDtype,
    build_image_model,
    denoiser_inputs,
    denoiser_passes,
    image_component,
    latent_hw,
    require_divisible,
    vae_run_dtype,
)
from gpuscout.trace.memtrace import (
    category_peak_tracker,
    explain_fake_failures,
    import_trace_stack,
    materialize_fake,
    peak_total,
    require_positive,
)
from gpuscout.workload.image import ImageModelShape, image_component_configs, load_image_preset


class ImageTraceResult(Frozen):
    """Peak memory of one denoiser forward and one VAE decode, each beyond its resident weights."""


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
    torch = import_trace_stack("diffusers")
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
