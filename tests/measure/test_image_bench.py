"""Image slice of bench on the tiny-sd test model (CPU, seconds), the passes-per-step rule without
building FLUX, and the tiny-sd preset's exactness against diffusers/transformers on the meta device."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError, UnsupportedHere
from gpuscout.measure.harness import BenchSettings, classify_failure, run_isolated
from gpuscout.measure.image_bench import (
    measures_text_encoders,
    passes_per_step,
    plan_image_cases,
    run_image_case,
)
from gpuscout.measure.startup import startup_seconds
from gpuscout.results.schema import Case
from gpuscout.workload.image import image_component_configs, load_image_preset
from gpuscout.workload.job import ImageJob, load_job

pytest.importorskip("torch")
pytest.importorskip("diffusers", reason="diffusers is in the bench extra")

EXAMPLE = Path(__file__).parents[2] / "examples" / "tiny-image.toml"
SETTINGS = BenchSettings(device="cpu", warmup=1, repeats=3)
TINY_PARAMS = {"unet": 1_106_212, "text_encoder": 51_616, "vae": 1_399_879}


def tiny_job(**overrides: Any) -> ImageJob:
    return ImageJob.model_validate({"kind": "image", "model": "tiny-sd", "width": 64, "height": 64, "steps": 2,
                                    "batch": 1, "dtype": "fp32", "images": 10} | overrides)


@pytest.fixture(scope="module")
def tiny_case() -> Case:
    job = load_job(EXAMPLE)
    assert isinstance(job, ImageJob)
    [planned] = plan_image_cases(job, SETTINGS, "cpu")
    result: Case = planned.fn(*planned.args)
    return result


# --- the tiny-sd preset --------------------------------------------------------------------------


def test_tiny_sd_loads_by_id_and_alias() -> None:
    shape = load_image_preset("tiny-sd")
    assert load_image_preset("Tiny_SD") == shape == load_image_preset("tiny-stable-diffusion")
    assert "test model" in shape.name
    assert {c.name: c.params for c in shape.components} == TINY_PARAMS
    assert shape.params_total == sum(TINY_PARAMS.values())


@pytest.mark.parametrize("component", sorted(TINY_PARAMS))
def test_tiny_sd_params_equal_the_real_model_built_on_meta(component: str) -> None:
    import torch

    spec = next(c for c in load_image_preset("tiny-sd").components if c.name == component)
    config = image_component_configs("tiny-sd")[component]
    with torch.device("meta"):
        if spec.library == "diffusers":
            import diffusers

            model = getattr(diffusers, config["_class_name"]).from_config(config)
        else:
            import transformers

            model_class = getattr(transformers, config["architectures"][0])
            model = model_class(model_class.config_class.from_dict(config))
    assert type(model).__name__ == spec.class_name
    assert sum(p.numel() for p in model.parameters()) == spec.params


def test_tiny_sd_shape_matches_its_configs() -> None:
    shape = load_image_preset("tiny-sd")
    configs = image_component_configs("tiny-sd")
    unet, vae, clip = configs["unet"], configs["vae"], configs["text_encoder"]
    assert shape.block_out_channels == tuple(unet["block_out_channels"])
    assert shape.layers_per_block == unet["layers_per_block"]
    assert shape.attention_heads == (unet["attention_head_dim"],) * len(unet["block_out_channels"])
    assert shape.transformer_layers_per_level == tuple(int("CrossAttn" in b) for b in unet["down_block_types"])
    assert shape.cross_attention_dim == unet["cross_attention_dim"] == clip["hidden_size"]
    assert shape.latent_channels == unet["in_channels"] == vae["latent_channels"]
    assert shape.vae_block_out_channels == tuple(vae["block_out_channels"])
    assert shape.vae_scale_factor == 2 ** (len(vae["block_out_channels"]) - 1)
    assert shape.native_resolution_px == vae["sample_size"] == shape.vae_tile_px
    assert shape.text_tokens == clip["max_position_embeddings"]


# --- passes per step (no FLUX built) ---------------------------------------------------------------


@pytest.mark.parametrize(("preset", "guidance", "passes"), [
    ("sd15", True, 2), ("sd15", False, 1), ("sdxl", True, 2), ("tiny-sd", True, 2),
    ("flux-dev", True, 1), ("flux-dev", False, 1),
])
def test_passes_per_step(preset: str, guidance: bool, passes: int) -> None:
    job = tiny_job(model=preset, guidance=guidance)
    assert passes_per_step(job, load_image_preset(preset)) == passes


def test_text_encoders_are_timed_only_when_cheap() -> None:
    assert measures_text_encoders(load_image_preset("tiny-sd"))
    assert measures_text_encoders(load_image_preset("sdxl"))  # CLIP-L + OpenCLIP bigG, 0.8 B
    assert not measures_text_encoders(load_image_preset("flux-dev"))  # T5-XXL, 4.8 B


# --- the tiny case ---------------------------------------------------------------------------------


def test_plan_is_one_picklable_case_at_the_jobs_sizes() -> None:
    [planned] = plan_image_cases(tiny_job(batch=2), SETTINGS, "cpu")
    assert planned.size == {"model": "tiny-sd", "width": 64, "height": 64, "batch": 2, "steps": 2,
                            "guidance": True, "dtype": "fp32"}
    assert pickle.loads(pickle.dumps(planned.fn)) is run_image_case  # spawn pickles it by reference
    pickle.dumps(planned.args)


def test_tiny_case_reports_every_metric_with_raw_samples(tiny_case: Case) -> None:
    metrics = {m.name: m for m in tiny_case.metrics}
    assert set(metrics) == {"s_per_image", "images_per_s", "denoiser_step_s", "vae_decode_s", "text_encode_s",
                            "job_s"}
    repeats, steps = SETTINGS.repeats, 2
    assert len(metrics["denoiser_step_s"].samples) == repeats * steps
    for name in ("s_per_image", "images_per_s", "vae_decode_s", "text_encode_s", "job_s"):
        assert len(metrics[name].samples) == repeats
    for metric in metrics.values():
        assert metric.value > 0 and all(s > 0 for s in metric.samples)
        assert metric.summary is not None and metric.summary.n == len(metric.samples)
    assert metrics["images_per_s"].higher_is_better and not metrics["s_per_image"].higher_is_better
    # One batch = text encode + steps × denoiser step + VAE decode (batch 1), per repeat.
    for i in range(repeats):
        parts = (metrics["text_encode_s"].samples[i] + metrics["vae_decode_s"].samples[i]
                 + sum(metrics["denoiser_step_s"].samples[i * steps:(i + 1) * steps]))
        assert metrics["s_per_image"].samples[i] == pytest.approx(parts, rel=1e-9)
        assert metrics["images_per_s"].samples[i] == pytest.approx(1 / parts)
        # 100 images, batch 1, plus the case's own start-up (workload/jobtime.py)
        assert metrics["job_s"].samples[i] == pytest.approx(100 * parts + startup_seconds(tiny_case.startup))
    assert "2 pass(es)" in metrics["denoiser_step_s"].note


def test_tiny_case_records_params_memory_and_startup(tiny_case: Case) -> None:
    assert tiny_case.failure is None
    assert tiny_case.params["denoiser_batch"] == 2  # guidance doubles the batch
    assert tiny_case.params["vae_dtype"] == "fp32" and tiny_case.params["text_encoders_timed"] is True
    assert tiny_case.peak_memory.process_rss_bytes and tiny_case.peak_memory.process_rss_bytes > 0
    assert tiny_case.peak_memory.torch_allocated_bytes is None  # CPU: no CUDA counters
    phases = [p.name for p in tiny_case.startup]
    assert {"imports", "model_build", "first_step"} <= set(phases)
    assert phases.index("model_build") < phases.index("first_step")


def test_flash_attention_is_noted_as_sdpa() -> None:
    case = run_image_case(tiny_job(attention="flash", guidance=False, steps=1), BenchSettings(warmup=0, repeats=1),
                          "cpu", "flash")
    assert case.params["attention"] == "sdpa" and case.params["denoiser_batch"] == 1
    assert any("flash" in note for note in case.notes)
    assert "guidance off" in next(m.note for m in case.metrics if m.name == "denoiser_step_s")


def test_offload_is_unsupported_not_a_crash() -> None:
    with pytest.raises(UnsupportedHere, match="offload") as info:
        run_image_case(tiny_job(offload="model"), SETTINGS, "cpu", "offload")
    assert classify_failure(info.value) == "unsupported"


def test_size_not_a_multiple_of_the_latent_patch_is_a_spec_error() -> None:
    with pytest.raises(SpecError):
        run_image_case(tiny_job(model="flux-dev", width=72, height=72), SETTINGS, "cpu", "odd")  # 72/16 not whole


def test_runs_in_its_own_process() -> None:
    [planned] = plan_image_cases(tiny_job(steps=1), BenchSettings(warmup=0, repeats=1), "cpu")
    case = run_isolated(planned.fn, *planned.args, case=planned.name, size=planned.size, timeout_s=300)
    assert case.failure is None, case.failure
    assert {m.name for m in case.metrics} >= {"s_per_image", "denoiser_step_s", "vae_decode_s"}


def test_importing_the_slice_does_not_import_torch() -> None:
    code = "import sys, gpuscout.measure.image_bench, gpuscout.measure.probes; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_vae_slicing_runs_and_is_recorded() -> None:
    case = run_image_case(tiny_job(batch=2, guidance=False, steps=1, vae_slicing=True),
                          BenchSettings(warmup=0, repeats=1), "cpu", "sliced")
    assert case.failure is None
    assert case.params["vae_slicing"] is True
