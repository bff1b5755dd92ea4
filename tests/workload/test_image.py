"""Image-model presets: ids, consistency with the stored configs, and exact meta-device parameter counts."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pydantic
import pytest

from gpuscout.errors import UnknownNameError
from gpuscout.workload.image import (
    ImageModelShape,
    image_component_configs,
    image_preset_ids,
    load_image_preset,
)

# Known published figures the stored counts must reproduce (SD UNets and CLIP are widely quoted;
# the others are the meta-device builds recorded in the presets).
EXPECTED_PARAMS = {
    ("sd15", "unet"): 859_520_964,
    ("sd15", "text_encoder"): 123_060_480,
    ("sd15", "vae"): 83_653_863,
    ("sdxl", "unet"): 2_567_463_684,
    ("sdxl", "text_encoder"): 123_060_480,
    ("sdxl", "text_encoder_2"): 694_659_840,
    ("sdxl", "vae"): 83_653_863,
    ("flux-dev", "transformer"): 11_901_408_320,
    ("flux-dev", "text_encoder"): 123_060_480,
    ("flux-dev", "text_encoder_2"): 4_762_310_656,
    ("flux-dev", "vae"): 83_819_683,
    # tiny-sd: a deliberately tiny SD-style test model (for benches and demos on a CPU)
    ("tiny-sd", "unet"): 1_106_212,
    ("tiny-sd", "text_encoder"): 51_616,
    ("tiny-sd", "vae"): 1_399_879,
}


def test_preset_ids() -> None:
    assert set(image_preset_ids()) == {"sd15", "sdxl", "flux-dev", "tiny-sd"}


@pytest.mark.parametrize(
    ("alias", "preset_id"),
    [
        ("sd15", "sd15"),
        ("sd-1.5", "sd15"),
        ("stable-diffusion-v1-5", "sd15"),
        ("runwayml/stable-diffusion-v1-5", "sd15"),
        ("sdxl", "sdxl"),
        ("SDXL-Base-1.0", "sdxl"),
        ("stabilityai/stable-diffusion-xl-base-1.0", "sdxl"),
        ("flux-dev", "flux-dev"),
        ("FLUX.1-dev", "flux-dev"),
        (" flux_dev ", "flux-dev"),
        ("black-forest-labs/FLUX.1-dev", "flux-dev"),
    ],
)
def test_aliases_resolve(alias: str, preset_id: str) -> None:
    assert load_image_preset(alias) == load_image_preset(preset_id)


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'sdxl'") as info:
        load_image_preset("sdx1")
    assert "flux-dev, sd15, sdxl" in info.value.why
    with pytest.raises(UnknownNameError, match="Unknown image model preset 'midjourney'"):
        image_component_configs("midjourney")


def test_stored_counts_match_the_published_figures() -> None:
    stored = {(p, c.name): c.params for p in image_preset_ids() for c in load_image_preset(p).components}
    assert stored == EXPECTED_PARAMS
    assert load_image_preset("sd15").params_total == 1_066_235_307
    assert load_image_preset("sdxl").params_total == 3_468_837_867
    assert load_image_preset("flux-dev").params_total == 16_870_599_139


def _build_on_meta(library: str, config: dict[str, Any]) -> Any:
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        if library == "diffusers":
            diffusers = pytest.importorskip("diffusers", reason="diffusers is in the bench extra")
            return getattr(diffusers, config["_class_name"]).from_config(config)
        transformers = pytest.importorskip("transformers")
        model_class = getattr(transformers, config["architectures"][0])
        return model_class(model_class.config_class.from_dict(config))


@pytest.mark.parametrize(("preset_id", "component"), sorted(EXPECTED_PARAMS))
def test_params_equal_the_real_model_built_on_meta(preset_id: str, component: str) -> None:
    spec = next(c for c in load_image_preset(preset_id).components if c.name == component)
    model = _build_on_meta(spec.library, image_component_configs(preset_id)[component])
    assert type(model).__name__ == spec.class_name
    assert sum(p.numel() for p in model.parameters()) == spec.params


@pytest.mark.parametrize("preset_id", ["sd15", "sdxl"])
def test_unet_shape_matches_its_config(preset_id: str) -> None:
    shape = load_image_preset(preset_id)
    configs = image_component_configs(preset_id)
    unet, vae = configs["unet"], configs["vae"]
    assert shape.block_out_channels == tuple(unet["block_out_channels"])
    assert shape.layers_per_block == unet["layers_per_block"]
    assert shape.cross_attention_dim == unet["cross_attention_dim"]
    assert shape.latent_channels == unet["in_channels"] == vae["latent_channels"]
    heads = unet["attention_head_dim"]  # the head count, see diffusers issue #2011
    levels = len(unet["block_out_channels"])
    assert shape.attention_heads == (tuple(heads) if isinstance(heads, list) else (heads,) * levels)
    layers = unet.get("transformer_layers_per_block", 1)
    layers = layers if isinstance(layers, list) else [layers] * levels
    with_attention = ["CrossAttn" in block for block in unet["down_block_types"]]
    assert shape.transformer_layers_per_level == tuple(
        n * a for n, a in zip(layers, with_attention, strict=True)
    )
    assert shape.mid_transformer_layers == layers[-1]
    assert shape.text_tokens == configs["text_encoder"]["max_position_embeddings"]
    encoder_width = sum(configs[c.name]["hidden_size"] for c in shape.components if c.role == "text_encoder")
    assert shape.cross_attention_dim == encoder_width


def test_flux_shape_matches_its_config() -> None:
    shape = load_image_preset("flux-dev")
    configs = image_component_configs("flux-dev")
    transformer = configs["transformer"]
    assert shape.attention_heads == (transformer["num_attention_heads"],)
    assert shape.attention_head_dim == (transformer["attention_head_dim"],)
    assert shape.hidden_size == 24 * 128
    assert shape.double_stream_blocks == transformer["num_layers"]
    assert shape.single_stream_blocks == transformer["num_single_layers"]
    assert (
        shape.cross_attention_dim
        == transformer["joint_attention_dim"]
        == configs["text_encoder_2"]["d_model"]
    )
    # Packing 2×2 patches of the 16 latent channels gives the transformer's 64 input channels.
    assert transformer["in_channels"] == shape.latent_channels * shape.patch_size**2
    assert shape.latent_channels == configs["vae"]["latent_channels"]


@pytest.mark.parametrize("preset_id", ["sd15", "sdxl", "flux-dev"])
def test_vae_fields_match_the_vae_config(preset_id: str) -> None:
    shape = load_image_preset(preset_id)
    vae = image_component_configs(preset_id)["vae"]
    assert shape.vae_block_out_channels == tuple(vae["block_out_channels"])
    # diffusers pipelines: vae_scale_factor = 2 ** (len(vae.config.block_out_channels) - 1)
    assert shape.vae_scale_factor == 2 ** (len(vae["block_out_channels"]) - 1) == 8
    assert shape.native_resolution_px == vae["sample_size"]
    assert shape.source in shape.components[0].config_source


def test_component_configs_are_fresh_copies() -> None:
    image_component_configs("sd15")["unet"]["block_out_channels"].append(9)
    assert image_component_configs("sd15")["unet"]["block_out_channels"] == [320, 640, 1280, 1280]


def test_shape_round_trips_and_is_strict() -> None:
    shape = load_image_preset("sdxl")
    data = shape.model_dump()
    assert ImageModelShape.model_validate(data) == shape
    with pytest.raises(pydantic.ValidationError):
        ImageModelShape.model_validate({**data, "num_steps": 30})
    with pytest.raises(pydantic.ValidationError, match="attention_heads"):
        ImageModelShape.model_validate({**data, "attention_heads": (5, 10, 10)})
    with pytest.raises(pydantic.ValidationError, match="exactly one denoiser"):
        ImageModelShape.model_validate({**data, "components": data["components"][1:]})
    with pytest.raises(pydantic.ValidationError):
        shape.latent_channels = 16  # type: ignore[misc]


def test_loading_presets_does_not_import_torch() -> None:
    code = "import sys, gpuscout.workload.image as m; "
    code += "m.load_image_preset('flux-dev'); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
