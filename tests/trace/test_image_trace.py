"""Image trace mode on the real diffusers models, and the analytic image model against it (the oracle).

Weights are exact byte counts (parameters × dtype bytes, against the presets' meta-device counts).
Activation tests compare traces with each other (guidance, attention, tiling). The oracle holds
the analytic "denoiser activations" and "VAE decode activations" terms within ±25% of the traced
peaks; observed when this was written (torch 2.13, diffusers 0.42.1): 0.96–1.05 for the denoiser
(sd15, sdxl, flux-dev; sdpa and eager) and 1.00 for the VAE decode, from 256² to 2048².
Small resolutions keep each trace to a few seconds (models are full size, on meta and fake).
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from gpuscout.errors import GpuscoutError, MissingDependencyError, SpecError, UnknownNameError
from gpuscout.estimator.image import estimate_image_memory
from gpuscout.hardware.catalog import find_gpu
from gpuscout.trace.image import ImageTraceResult, trace_image_step
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import ImageJob

pytest.importorskip("torch")
pytest.importorskip("diffusers", reason="diffusers is in the bench extra")

ORACLE_TOL = 0.25
H100 = find_gpu("h100")


@functools.cache
def trace(
    preset_id: str, side: int, *, batch: int = 1, guidance: bool = True, dtype: str = "fp16",
    attention: str = "sdpa", vae_tiling: bool = False,
) -> ImageTraceResult:
    return trace_image_step(preset_id, width=side, height=side, batch=batch, guidance=guidance,
                            dtype=dtype, attention=attention, vae_tiling=vae_tiling)  # type: ignore[arg-type]


def params(preset_id: str, role: str) -> int:
    return next(c.params for c in load_image_preset(preset_id).components if c.role == role)


def test_weights_are_the_built_components_at_their_dtypes() -> None:
    result = trace("sd15", 256)
    assert result.weights_bytes == {"unet": 2 * params("sd15", "denoiser"), "vae": 2 * params("sd15", "vae")}
    assert result.denoiser_peak_bytes > 0
    assert result.vae_decode_peak_bytes > 0
    assert result.wall_s > 0
    assert any("not traced" in note for note in result.notes)


def test_sdxl_vae_is_decoded_in_fp32() -> None:
    result = trace("sdxl", 512)
    assert result.weights_bytes["unet"] == 2 * params("sdxl", "denoiser")
    assert result.weights_bytes["vae"] == 4 * params("sdxl", "vae")  # force_upcast
    assert any("VAE decoded in fp32" in note for note in result.notes)


def test_guidance_doubles_the_unet_batch() -> None:
    with_cfg = trace("sd15", 256).denoiser_peak_bytes
    without = trace("sd15", 256, guidance=False).denoiser_peak_bytes
    assert with_cfg == pytest.approx(2 * without, rel=0.01)


def test_flux_runs_one_pass_with_guidance() -> None:
    with_cfg = trace("flux-dev", 512, dtype="bf16")
    without = trace("flux-dev", 512, dtype="bf16", guidance=False)
    # Guidance-distilled: the guidance scale is an embedding input, not a second batch.
    assert with_cfg.denoiser_peak_bytes == pytest.approx(without.denoiser_peak_bytes, rel=0.01)
    assert with_cfg.weights_bytes["transformer"] == 2 * params("flux-dev", "denoiser")
    assert any("guidance-distilled" in note for note in with_cfg.notes)


def test_batch_scales_the_vae_decode() -> None:
    one = trace("sd15", 256, guidance=False).vae_decode_peak_bytes
    two = trace("sd15", 256, batch=2, guidance=False).vae_decode_peak_bytes
    assert two == pytest.approx(2 * one, rel=0.01)


def test_eager_attention_holds_the_score_matrix() -> None:
    assert trace("sd15", 256, attention="eager").denoiser_peak_bytes > 2 * trace("sd15", 256).denoiser_peak_bytes


def test_tiling_bounds_the_vae_decode() -> None:
    # SD 1.5's VAE tiles at its sample_size, 512 px: a 640² decode runs as overlapping 512² tiles.
    plain = trace("sd15", 640, guidance=False).vae_decode_peak_bytes
    tiled = trace("sd15", 640, guidance=False, vae_tiling=True).vae_decode_peak_bytes
    assert tiled < plain
    assert tiled == pytest.approx(trace("sd15", 512, guidance=False).vae_decode_peak_bytes, rel=0.05)


def test_sizes_must_fit_the_latent_grid() -> None:
    with pytest.raises(SpecError, match="multiples of 16"):
        trace_image_step("flux-dev", width=1000, height=1024, batch=1, guidance=True, dtype="bf16")
    with pytest.raises(SpecError):
        trace_image_step("sd15", width=512, height=512, batch=0, guidance=True, dtype="fp16")


def test_unknown_preset_is_a_name_error() -> None:
    with pytest.raises(UnknownNameError):
        trace_image_step("midjourney", width=512, height=512, batch=1, guidance=True, dtype="fp16")


def test_missing_diffusers_is_a_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "diffusers", None)  # makes `import diffusers` raise ImportError
    with pytest.raises(MissingDependencyError) as info:
        trace_image_step("sd15", width=256, height=256, batch=1, guidance=True, dtype="fp16")
    assert "gpuscout[bench]" in info.value.fix


def test_ops_fake_tensors_cannot_run_become_user_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscout.trace import image as image_trace

    def fail(model: object) -> None:
        raise RuntimeError("aten._local_scalar_dense.default: data-dependent")

    monkeypatch.setattr(image_trace, "materialize_fake", fail)
    with pytest.raises(GpuscoutError) as info:
        trace_image_step("sd15", width=256, height=256, batch=1, guidance=True, dtype="fp16")
    assert "data-dependent" in info.value.why
    assert isinstance(info.value.__cause__, RuntimeError)


def test_result_is_frozen() -> None:
    with pytest.raises(ValueError):
        trace("sd15", 256).wall_s = 0.0  # type: ignore[misc]


def test_importing_image_trace_does_not_import_torch() -> None:
    code = "import sys, gpuscout.trace.image; print(sorted({'torch', 'diffusers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the oracle ----------------------------------------------------------------------------------

ORACLE_CASES = [
    ("sd15", 256, {}),
    ("sd15", 256, {"attention": "eager"}),
    ("sd15", 256, {"batch": 2, "guidance": False, "dtype": "fp32"}),
    ("sd15", 640, {"guidance": False, "vae_tiling": True}),
    ("sdxl", 512, {}),
    ("sdxl", 1280, {"guidance": False, "vae_tiling": True}),
    ("flux-dev", 512, {"dtype": "bf16"}),
    ("flux-dev", 256, {"dtype": "bf16", "attention": "eager"}),
]


@pytest.mark.parametrize(("preset_id", "side", "kw"), ORACLE_CASES,
                         ids=[f"{p}-{s}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for p, s, kw in ORACLE_CASES])
def test_analytic_activations_match_the_trace(preset_id: str, side: int, kw: dict[str, object]) -> None:
    job = ImageJob.model_validate({"kind": "image", "model": preset_id, "width": side, "height": side} | kw)
    terms = {t.name: t.bytes for t in estimate_image_memory(job, load_image_preset(preset_id), H100).terms}
    traced = trace(preset_id, side, **kw)  # type: ignore[arg-type]
    assert terms["denoiser activations"] == pytest.approx(traced.denoiser_peak_bytes, rel=ORACLE_TOL)
    assert terms["VAE decode activations"] == pytest.approx(traced.vae_decode_peak_bytes, rel=ORACLE_TOL)
