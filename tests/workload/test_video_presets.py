"""Video-model presets (Wan 2.1, CogVideoX): ids, aliases, consistency with the stored configs, exact
meta-device parameter counts and largest leaf modules, the VAE FLOP count, and the size rules of the causal
VAEs."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.workload.image import image_component_configs, image_preset_ids, load_image_preset
from gpuscout.workload.video import (
    check_video_size,
    load_video_preset,
    video_component_configs,
    video_preset_ids,
)

COMPONENTS = [(p, c.name) for p in video_preset_ids() for c in load_video_preset(p).components]
IMAGE_COMPONENTS = [(p, c.name) for p in image_preset_ids() for c in load_image_preset(p).components]


def _build_on_meta(library: str, config: dict[str, Any]) -> Any:
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        if library == "diffusers":
            diffusers = pytest.importorskip("diffusers")
            return getattr(diffusers, config["_class_name"]).from_config(config)
        transformers = pytest.importorskip("transformers")
        cls = getattr(transformers, config["architectures"][0])
        return cls(cls.config_class.from_dict(config))


def _largest_leaf(model: Any) -> tuple[int, str]:
    return max((sum(p.numel() for p in m.parameters(recurse=False)), name) for name, m in model.named_modules())


def test_preset_ids() -> None:
    assert set(video_preset_ids()) == {"tiny-wan", "wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "cogvideox-2b",
                                       "cogvideox-5b", "ltx-video"}


@pytest.mark.parametrize(("alias", "preset_id"), [("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "wan2.1-t2v-1.3b"),
                                                  ("wan_14b", "wan2.1-t2v-14b"), ("WAN-TINY", "tiny-wan"),
                                                  ("THUDM/CogVideoX-5b", "cogvideox-5b"),
                                                  ("CogVideoX_2b", "cogvideox-2b")])
def test_aliases_resolve(alias: str, preset_id: str) -> None:
    assert load_video_preset(alias) == load_video_preset(preset_id)


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError, match=r"wan2\.1-t2v-1\.3b"):
        load_video_preset("wan2.1-t2v-1.3")


@pytest.mark.parametrize(("preset_id", "component"), COMPONENTS)
def test_params_equal_the_real_model_built_on_meta(preset_id: str, component: str) -> None:
    spec = next(c for c in load_video_preset(preset_id).components if c.name == component)
    model = _build_on_meta(spec.library, video_component_configs(preset_id)[component])
    assert type(model).__name__ == spec.class_name
    assert sum(p.numel() for p in model.parameters()) == spec.params
    assert _largest_leaf(model) == (spec.largest_module_params, spec.largest_module)


@pytest.mark.parametrize(("preset_id", "component"), IMAGE_COMPONENTS)
def test_image_presets_largest_module_is_the_real_one(preset_id: str, component: str) -> None:
    """Sequential offload of image jobs reads these; each is the largest leaf of the real module."""
    spec = next(c for c in load_image_preset(preset_id).components if c.name == component)
    model = _build_on_meta(spec.library, image_component_configs(preset_id)[component])
    assert _largest_leaf(model)[0] == spec.largest_module_params


def test_umt5_xxl_is_the_big_one() -> None:
    """Wan's text encoder is 5.68 B parameters: four times the 1.3B transformer."""
    shape = load_video_preset("wan2.1-t2v-1.3b")
    assert shape.component("text_encoder").params == 5_680_910_336
    assert shape.component("text_encoder").params > 4 * shape.component("denoiser").params


WAN_IDS = [p for p in video_preset_ids() if load_video_preset(p).family == "wan"]
COGVIDEOX_IDS = [p for p in video_preset_ids() if load_video_preset(p).family == "cogvideox"]


@pytest.mark.parametrize("preset_id", COGVIDEOX_IDS)
def test_cogvideox_shape_matches_its_configs(preset_id: str) -> None:
    shape = load_video_preset(preset_id)
    configs = video_component_configs(preset_id)
    dit, vae, t5 = configs["transformer"], configs["vae"], configs["text_encoder"]
    assert shape.attention_heads == dit["num_attention_heads"]
    assert shape.attention_head_dim == dit["attention_head_dim"]
    assert shape.num_layers == dit["num_layers"]
    assert shape.ffn_dim == 4 * shape.hidden_size  # diffusers FeedForward default (no ff_inner_dim)
    assert shape.text_dim == dit["text_embed_dim"] == t5["d_model"]
    assert shape.text_tokens == dit["max_text_seq_length"] == 226
    assert shape.patch_size == dit["patch_size"] and dit.get("patch_size_t") is None  # CogVideoX 1.0
    assert shape.latent_channels == dit["in_channels"] == vae["latent_channels"]
    assert shape.vae_scale_temporal == vae["temporal_compression_ratio"] == dit["temporal_compression_ratio"]
    assert shape.vae_scale_spatial == 2 ** (len(vae["block_out_channels"]) - 1)
    assert list(shape.vae_decoder_channels) == vae["block_out_channels"][::-1]
    assert shape.vae_tile == (vae["sample_width"] // 2, vae["sample_height"] // 2)
    assert shape.text_in_sequence and shape.guidance_batched


def test_cogvideox_tiling_and_batching_follow_the_real_vae() -> None:
    """Tile sizes, overlaps and the latent-frame batch the estimate uses are the real module's."""
    shape = load_video_preset("cogvideox-2b")
    vae = _build_on_meta("diffusers", video_component_configs("cogvideox-2b")["vae"])
    assert shape.vae_tile == (vae.tile_sample_min_width, vae.tile_sample_min_height)
    assert shape.vae_tile_overlap_height == vae.tile_overlap_factor_height
    assert shape.vae_tile_overlap_width == vae.tile_overlap_factor_width
    assert shape.vae_decode_latent_frames == vae.num_latent_frames_batch_size


def test_cogvideox_sequence_joins_the_text() -> None:
    """720×480, 49 frames: 13 latent frames × 30 × 45 = 17,550 video tokens + 226 text tokens."""
    shape = load_video_preset("cogvideox-2b")
    assert shape.latent_frames(49) == 13
    assert shape.tokens(720, 480, 49) == 17_550
    assert shape.sequence(720, 480, 49) == 17_550 + 226
    wan = load_video_preset("wan2.1-t2v-1.3b")
    assert wan.sequence(832, 480, 81) == wan.tokens(832, 480, 81)  # Wan's text enters by cross-attention


def test_ltx_shape_matches_its_configs() -> None:
    shape = load_video_preset("ltx-video")
    configs = video_component_configs("ltx-video")
    dit, vae = configs["transformer"], configs["vae"]
    built = _build_on_meta("diffusers", vae)
    assert shape.attention_heads == dit["num_attention_heads"] and shape.num_layers == dit["num_layers"]
    assert shape.hidden_size == dit["cross_attention_dim"] and shape.ffn_dim == 4 * shape.hidden_size
    assert shape.text_dim == dit["caption_channels"] == configs["text_encoder"]["d_model"]
    assert shape.latent_channels == dit["in_channels"] == vae["latent_channels"]
    assert (shape.patch_size, shape.patch_size_t) == (dit["patch_size"], dit["patch_size_t"]) == (1, 1)
    assert shape.vae_scale_spatial == built.spatial_compression_ratio
    assert shape.vae_scale_temporal == built.temporal_compression_ratio
    assert shape.vae_tile == (built.tile_sample_min_width, built.tile_sample_min_height)
    assert shape.vae_decode_whole_clip and not built.use_framewise_decoding
    assert shape.guidance_batched and not shape.text_in_sequence


@pytest.mark.parametrize("preset_id", WAN_IDS)
def test_shape_matches_its_configs(preset_id: str) -> None:
    shape = load_video_preset(preset_id)
    configs = video_component_configs(preset_id)
    dit, vae = configs["transformer"], configs["vae"]
    assert shape.attention_heads == dit["num_attention_heads"]
    assert shape.attention_head_dim == dit["attention_head_dim"]
    assert shape.num_layers == dit["num_layers"]
    assert shape.ffn_dim == dit["ffn_dim"]
    assert shape.text_dim == dit["text_dim"] == configs["text_encoder"]["d_model"]
    assert [shape.patch_size_t, shape.patch_size, shape.patch_size] == dit["patch_size"]
    assert shape.latent_channels == dit["in_channels"] == vae["z_dim"]
    assert shape.vae_scale_temporal == 2 ** sum(vae["temperal_downsample"])
    assert shape.vae_scale_spatial == 2 ** (len(vae["dim_mult"]) - 1)
    base, mult = vae["base_dim"], vae["dim_mult"]
    assert list(shape.vae_decoder_channels) == [base * m for m in mult[::-1]]


def test_latent_frames_and_tokens_follow_the_causal_vae() -> None:
    shape = load_video_preset("wan2.1-t2v-1.3b")
    assert shape.latent_frames(81) == 21 and shape.latent_frames(1) == 1
    assert shape.tokens(832, 480, 81) == 21 * (480 // 16) * (832 // 16) == 32_760


def test_real_decoder_has_the_temporal_and_spatial_compression() -> None:
    """A tiny real run on CPU: 3 latent frames of 8×8 decode to 9 frames of 64×64."""
    torch = pytest.importorskip("torch")
    shape = load_video_preset("tiny-wan")
    vae = _build_on_meta("diffusers", video_component_configs("tiny-wan")["vae"]).to_empty(device="cpu")
    with torch.no_grad():
        out = vae.decode(torch.zeros(1, 16, 3, 8, 8), return_dict=False)[0]
    assert tuple(out.shape) == (1, 3, 9, 8 * shape.vae_scale_spatial, 8 * shape.vae_scale_spatial)


def test_real_cogvideox_decoder_has_the_temporal_and_spatial_compression() -> None:
    """A real AutoencoderKLCogVideoX decode on CPU (zero weights): 5 latent frames of 4×4 - one batch of 3
    latent frames, then one of 2 - decode to 17 frames of 32×32."""
    torch = pytest.importorskip("torch")
    shape = load_video_preset("cogvideox-2b")
    vae = _build_on_meta("diffusers", video_component_configs("cogvideox-2b")["vae"]).to_empty(device="cpu")
    with torch.no_grad():
        out = vae.decode(torch.zeros(1, 16, 5, 4, 4), return_dict=False)[0]
    assert tuple(out.shape) == (1, 3, (5 - 1) * shape.vae_scale_temporal + 1, 32, 32)


@pytest.mark.parametrize("preset_id", ["tiny-wan", "wan2.1-t2v-1.3b", "cogvideox-2b", "ltx-video"])
def test_vae_flops_per_pixel_match_torchs_flop_counter(preset_id: str) -> None:
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from gpuscout.trace.memtrace import materialize_fake

    shape = load_video_preset(preset_id)
    vae = _build_on_meta("diffusers", video_component_configs(preset_id)["vae"])
    counted = []
    for latent_frames in (3, 5):
        with FakeTensorMode():
            materialize_fake(vae)
            z = torch.empty(1, shape.latent_channels, latent_frames, 16, 16)
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                vae.decode(z, return_dict=False)
        counted.append(counter.get_total_flops())
    per_frame = (counted[1] - counted[0]) / 2 / (16 * shape.vae_scale_spatial) ** 2
    assert per_frame == pytest.approx(shape.vae_decode_flops_per_px_frame, rel=0.01)


def test_sizes_off_the_grid_are_spec_errors() -> None:
    shape = load_video_preset("wan2.1-t2v-1.3b")
    check_video_size(shape, 832, 480, 81)
    with pytest.raises(SpecError, match="multiples of 16"):
        check_video_size(shape, 840, 480, 81)
    with pytest.raises(SpecError, match=r"frames = 77 or 81"):
        check_video_size(shape, 832, 480, 80)
    with pytest.raises(SpecError, match="past what gpuscout models"):
        check_video_size(shape, 8192, 480, 81)


def test_loading_presets_does_not_import_torch() -> None:
    code = ("import sys; from gpuscout.workload.video import load_video_preset; "
            "load_video_preset('wan2.1-t2v-14b'); load_video_preset('cogvideox-5b'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
