"""Video-generation models (Wan 2.1 T2V 1.3B / 14B, CogVideoX 2B / 5B, LTX-Video) as the estimators see them.

A preset is a TOML file in `video_presets/` holding a `VideoModelShape`, plus one copy of each
component's diffusers/transformers `config.json` next to it (`<id>.<component>.json`), as for the
image presets (`workload/image.py`). Parameter counts and each component's largest leaf module were
computed by building those configs on the meta device (diffusers 0.42.1, transformers 5.24.0);
`tests/workload/test_video_presets.py` rebuilds them and keeps them honest.

Sizes along time: a causal video VAE compresses `frames` pixel frames into
(frames − 1) / temporal_compression + 1 latent frames (the first frame is encoded alone), and the
DiT cuts each latent frame into (H / 8 / patch) × (W / 8 / patch) tokens (docs/video.md §1).
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import model_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.workload.preset_names import PresetFolder
from gpuscout.workload.shape import DTYPE_BYTES


class VideoComponent(Frozen):
    """One model of a diffusers video pipeline, named by its pipeline subfolder."""

    name: str  # transformer, text_encoder, vae
    role: Literal["denoiser", "text_encoder", "vae"]
    library: Literal["diffusers", "transformers"]
    class_name: str  # e.g. WanTransformer3DModel, UMT5EncoderModel, AutoencoderKLWan
    params: int  # exact, from the class built on the meta device from the stored config
    # Parameters of the largest leaf module (one without children): what sequential CPU offload
    # (accelerate hooks on every leaf) must hold on the GPU at once. Also from the meta device.
    largest_module_params: int
    largest_module: str  # its dotted name, for the report
    # Dtype the weights occupy on the GPU in the reference diffusers example (a DTYPE_BYTES key);
    # "fp32" on a VAE means the pipeline runs it in fp32 whatever the job's dtype.
    default_dtype: str
    config_source: str  # URL of the config.json stored with the preset


class VideoModelShape(Frozen):
    """Every number a video-generation memory/speed estimate needs; no torch required."""

    name: str
    # The diffusers pipeline family: it decides how text meets video tokens, how guidance batches
    # and how the VAE decodes (the per-family calibration lives in estimator/video.py).
    family: Literal["wan", "cogvideox", "ltx"]
    source: str  # hub URL of the pipeline repository
    components: tuple[VideoComponent, ...]
    # VAE compression: pixels per latent pixel along each side, pixel frames per latent frame.
    vae_scale_spatial: int
    vae_scale_temporal: int
    latent_channels: int
    # DiT patching: latent pixels per token along each side and latent frames per token.
    patch_size: int
    patch_size_t: int
    text_tokens: int  # the pipeline's max_sequence_length (WanPipeline 512, CogVideoXPipeline 226)
    text_dim: int  # width of the text encoder states (UMT5-XXL and T5-XXL d_model 4096)
    # True where the text tokens join the video tokens in one self-attention sequence (CogVideoX:
    # CogVideoXAttnProcessor2_0 concatenates them); False where the text enters by cross-attention.
    text_in_sequence: bool = False
    # True where the pipeline batches the unconditional pass with the conditional one
    # (CogVideoXPipeline: torch.cat([latents] * 2)); False where it runs a second forward (Wan).
    guidance_batched: bool = False
    # DiT: token width, blocks, heads, feed-forward width.
    hidden_size: int
    num_layers: int
    attention_heads: int
    attention_head_dim: int
    ffn_dim: int
    # VAE decoder channels by up level, lowest resolution first (diffusers WanDecoder3d `dims`,
    # reversed block_out_channels for CogVideoX); the last runs at full resolution and sets the
    # decode activation peak.
    vae_decoder_channels: tuple[int, ...]
    # Decoder FLOPs per output pixel (H × W) per latent frame: torch's FlopCounterMode over the real
    # decode (fake tensors), the slope between two latent-frame counts.
    vae_decode_flops_per_px_frame: float
    # Latent frames the VAE decodes at once: AutoencoderKLWan 1 (frame by frame with a causal
    # cache), AutoencoderKLCogVideoX num_latent_frames_batch_size = 2 (the first batch also takes
    # the odd frame: 3). vae_decode_whole_clip: one call over every latent frame instead
    # (AutoencoderKLLTXVideo, whose framewise decoding is off by default).
    vae_decode_latent_frames: int = 1
    vae_decode_whole_clip: bool = False
    # Spatial tile of vae.enable_tiling(), tile_sample_min_height (and _width where it differs):
    # AutoencoderKLWan 256 × 256; AutoencoderKLCogVideoX sample_height / 2 × sample_width / 2.
    vae_tile_px: int
    vae_tile_width_px: int | None = None
    # Tile overlap of the tiled decode, as a fraction of the tile (AutoencoderKLWan: stride 192 of
    # 256 = 0.25; AutoencoderKLCogVideoX tile_overlap_factor_height 1/6, _width 1/5).
    vae_tile_overlap_height: float = 0.25
    vae_tile_overlap_width: float = 0.25
    native_width: int
    native_height: int
    native_frames: int
    max_resolution_px: int  # sanity bound on a requested side
    max_frames: int  # sanity bound on frames per clip

    @property
    def params_total(self) -> int:
        return sum(c.params for c in self.components)

    @property
    def vae_tile(self) -> tuple[int, int]:
        """(width, height) in pixels of one tile of the tiled VAE decode."""
        return (self.vae_tile_width_px or self.vae_tile_px, self.vae_tile_px)

    def sequence(self, width: int, height: int, frames: int) -> int:
        """Tokens in one self-attention sequence: the video tokens, plus the text where it joins them."""
        return self.tokens(width, height, frames) + (self.text_tokens if self.text_in_sequence else 0)

    def decode_chunk_frames(self, frames: int) -> int:
        """Pixel frames the VAE decoder works on at once: one chunk, or the whole clip."""
        if self.vae_decode_whole_clip:
            return frames
        return self.vae_scale_temporal * self.vae_decode_latent_frames

    def component(self, role: str) -> VideoComponent:
        return next(c for c in self.components if c.role == role)

    def latent_frames(self, frames: int) -> int:
        """(frames − 1) / temporal compression + 1: the causal VAE encodes the first frame alone."""
        return (frames - 1) // self.vae_scale_temporal + 1

    def tokens(self, width: int, height: int, frames: int) -> int:
        """DiT tokens of one clip: latent frames × (H / 8 / patch) × (W / 8 / patch)."""
        per_frame = (height // self.vae_scale_spatial // self.patch_size) * (
            width // self.vae_scale_spatial // self.patch_size)
        return self.latent_frames(frames) // self.patch_size_t * per_frame

    @model_validator(mode="after")
    def _check_consistent(self) -> Self:
        roles = [c.role for c in self.components]
        if roles.count("denoiser") != 1 or roles.count("vae") != 1:
            raise ValueError("a video model needs exactly one denoiser and one VAE")
        if len({c.name for c in self.components}) != len(self.components):
            raise ValueError("component names must be unique")
        if any(c.default_dtype not in DTYPE_BYTES for c in self.components):
            raise ValueError(f"component dtypes must be among {sorted(DTYPE_BYTES)}")
        if self.attention_heads * self.attention_head_dim != self.hidden_size:
            raise ValueError("attention_heads × attention_head_dim must equal hidden_size")
        if any(c.largest_module_params > c.params for c in self.components):
            raise ValueError("a component's largest module cannot exceed the component")
        return self


class VideoPreset(Frozen):
    """A preset file: its id, the names users may type for it, and the shape."""

    id: str
    aliases: tuple[str, ...]
    shape: VideoModelShape


_PRESETS = PresetFolder("video_presets", VideoPreset, "video", "'wan2.1-t2v-1.3b-diffusers'")


def video_preset_ids() -> tuple[str, ...]:
    """Canonical ids of the bundled video-model presets."""
    return _PRESETS.ids()


def load_video_preset(preset_id: str) -> VideoModelShape:
    """The shape of a bundled video model, by id or alias (case-insensitive)."""
    return _PRESETS.find(preset_id).shape


def video_component_configs(preset_id: str) -> dict[str, dict[str, Any]]:
    """The stored config.json of each component, keyed by component name (a fresh copy per call)."""
    preset = _PRESETS.find(preset_id)
    return _PRESETS.configs(preset.id, preset.shape.components)


def check_video_size(shape: VideoModelShape, width: int, height: int, frames: int) -> None:
    """Refuse sizes the pipeline cannot run: sides not divisible by VAE × patch, frames off the 4k+1 grid."""
    side = shape.vae_scale_spatial * shape.patch_size
    if width % side or height % side:
        raise SpecError(
            f"{width}×{height} does not suit {shape.name}.",
            f"Width and height must be multiples of {side} (VAE {shape.vae_scale_spatial}× × patch "
            f"{shape.patch_size}).",
            f"Use e.g. {width // side * side or side}×{height // side * side or side}.",
        )
    if (frames - 1) % shape.vae_scale_temporal:
        k = shape.vae_scale_temporal
        lower = (frames - 1) // k * k + 1
        raise SpecError(
            f"frames = {frames} does not suit {shape.name}.",
            f"Its causal VAE turns {k}·n + 1 frames into n + 1 latent frames; diffusers would round "
            f"{frames} down to {lower}.",
            f"Use frames = {lower} or {lower + k}.",
        )
    if max(width, height) > shape.max_resolution_px or frames > shape.max_frames:
        raise SpecError(
            f"{width}×{height} × {frames} frames is past what gpuscout models for {shape.name}.",
            f"Sides up to {shape.max_resolution_px} px and up to {shape.max_frames} frames are modelled "
            f"(trained at {shape.native_width}×{shape.native_height}, {shape.native_frames} frames).",
            "Lower width, height or frames.",
        )
