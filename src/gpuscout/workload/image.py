"""Image-generation models (Stable Diffusion 1.5, SDXL, FLUX.1-dev) as the estimators see them.

A preset is a TOML file in `image_presets/` holding an `ImageModelShape`, plus one verbatim copy of
each component's diffusers/transformers `config.json` next to it (`<id>.<component>.json`), so that
real-model builders (meta-device parameter counts, FakeTensor traces, benchmarks) use exactly the
published configs. Parameter counts in the TOML were computed once by building those configs on the
meta device; `tests/workload/test_image.py` rebuilds them and keeps them honest.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import model_validator

from gpuscout.frozen import Frozen
from gpuscout.workload.preset_names import PresetFolder
from gpuscout.workload.shape import DTYPE_BYTES


class ImageComponent(Frozen):
    """One model of a diffusers pipeline, named by its pipeline subfolder."""

    name: str  # unet, transformer, text_encoder, text_encoder_2, vae
    role: Literal["denoiser", "text_encoder", "vae"]
    library: Literal["diffusers", "transformers"]
    class_name: str  # UNet2DConditionModel, FluxTransformer2DModel, CLIPTextModel, T5EncoderModel …
    params: int  # exact, from the class built on the meta device from the stored config
    # Parameters of the largest leaf module, what sequential CPU offload holds on the GPU at once
    # (meta device, like `params`); None: unknown, and the estimate takes the whole component.
    largest_module_params: int | None = None
    # Dtype the weights occupy on the GPU in the reference diffusers pipeline (a DTYPE_BYTES key).
    default_dtype: str
    config_source: str  # hub URL of the config.json stored with the preset


class ImageModelShape(Frozen):
    """Every number an image-generation memory/speed estimate needs; no torch required.

    UNet fields are empty for a DiT and DiT fields are None for a UNet. Per-level tuples run from the
    highest resolution (latent size) down, matching diffusers' `down_block_types` order.
    """

    name: str
    family: Literal["sd15", "sdxl", "flux"]
    source: str  # hub URL of the pipeline repository
    components: tuple[ImageComponent, ...]
    denoiser_kind: Literal["unet", "dit"]
    # Pixels per latent pixel along each side: 2 ** (len(VAE block_out_channels) - 1) = 8 for all three.
    vae_scale_factor: int
    latent_channels: int  # 4 (SD1.5, SDXL) or 16 (FLUX)
    # Latent pixels per token along each side: 1 for a UNet (convolutions see every latent pixel);
    # 2 for FLUX, whose pipeline packs 2×2 latent patches into one 64-channel token
    # (FluxPipeline._pack_latents; the transformer config's own patch_size is 1 after packing).
    patch_size: int
    # Text conditioning.
    cross_attention_dim: int  # width of the text states the denoiser attends to (FLUX: joint_attention_dim)
    text_tokens: int  # text sequence length: 77 for CLIP; 512 for FLUX.1-dev's T5 (max_sequence_length)
    # UNet: channels, resnets and transformer blocks per resolution level.
    block_out_channels: tuple[int, ...] = ()
    layers_per_block: int = 0  # resnets per down level; each up level has one more
    transformer_layers_per_level: tuple[int, ...] = ()  # blocks per attention layer; 0 = no attention
    mid_transformer_layers: int = 0  # transformer blocks in the mid block (at the lowest resolution)
    # Attention heads and head width per level (UNet) or of the single token width (DiT, one entry).
    # diffusers' UNet config calls the head *count* `attention_head_dim` (a known misnomer,
    # diffusers issue #2011); these fields hold what the names say.
    attention_heads: tuple[int, ...]
    attention_head_dim: tuple[int, ...]
    # DiT: token width and block counts. FLUX has double-stream (MMDiT) blocks with separate text and
    # image weights, then single-stream blocks over the concatenated sequence.
    hidden_size: int | None = None
    double_stream_blocks: int | None = None
    single_stream_blocks: int | None = None
    # VAE decoder channels, lowest resolution last; the last up block runs at full image resolution
    # with block_out_channels[0] channels, which sets the decode activation peak.
    vae_block_out_channels: tuple[int, ...]
    native_resolution_px: int  # side length the model was trained at
    # diffusers' AutoencoderKL tiles decoding at its config's sample_size: 512 px for SD 1.5,
    # 1024 px for SDXL and FLUX (`tile_sample_min_size`).
    vae_tile_px: int = 512
    max_resolution_px: int  # sanity bound on requested sizes: 4 × native side, beyond any trained range

    @property
    def params_total(self) -> int:
        return sum(c.params for c in self.components)

    @model_validator(mode="after")
    def _check_consistent(self) -> Self:
        denoisers = [c for c in self.components if c.role == "denoiser"]
        if len(denoisers) != 1 or len({c.name for c in self.components}) != len(self.components):
            raise ValueError("an image model needs exactly one denoiser and unique component names")
        if any(c.default_dtype not in DTYPE_BYTES for c in self.components):
            raise ValueError(f"component dtypes must be among {sorted(DTYPE_BYTES)}")
        widths = self.block_out_channels if self.denoiser_kind == "unet" else (self.hidden_size or 0,)
        per_level = (self.transformer_layers_per_level,) if self.denoiser_kind == "unet" else ()
        if any(len(t) != len(widths) for t in (self.attention_heads, self.attention_head_dim, *per_level)):
            raise ValueError("per-level tuples must have one entry per level (DiT: exactly one)")
        if any(
            h * d != w for h, d, w in zip(self.attention_heads, self.attention_head_dim, widths, strict=True)
        ):
            raise ValueError("attention_heads × attention_head_dim must equal the width at every level")
        if self.native_resolution_px > self.max_resolution_px:
            raise ValueError("native_resolution_px exceeds max_resolution_px")
        return self


class ImagePreset(Frozen):
    """A preset file: its id, the names users may type for it, and the shape."""

    id: str
    aliases: tuple[str, ...]
    shape: ImageModelShape


_PRESETS = PresetFolder("image_presets", ImagePreset, "image", "'sdxl-base-1.0', 'flux.1-dev'")


def image_preset_ids() -> tuple[str, ...]:
    """Canonical ids of the bundled image-model presets."""
    return _PRESETS.ids()


def load_image_preset(preset_id: str) -> ImageModelShape:
    """The shape of a bundled image model, by id or alias (case-insensitive)."""
    return _PRESETS.find(preset_id).shape


def image_component_configs(preset_id: str) -> dict[str, dict[str, Any]]:
    """The stored config.json of each component, keyed by component name (a fresh copy per call)."""
    preset = _PRESETS.find(preset_id)
    return _PRESETS.configs(preset.id, preset.shape.components)
