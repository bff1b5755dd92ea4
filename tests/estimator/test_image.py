"""Image generation memory: weights per component, guidance, tiling, offload, resolution."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.image import estimate_image_memory
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import ImageJob

H100 = find_gpu("h100")


def job(**kw: object) -> ImageJob:
    return ImageJob.model_validate({"kind": "image", "model": "sdxl"} | kw)


def test_weights_are_every_component_at_the_job_dtype() -> None:
    sdxl = load_image_preset("sdxl")
    weights = bytes_by_category(estimate_image_memory(job(dtype="fp16"), sdxl, H100))["weights"]
    vae = next(c for c in sdxl.components if c.role == "vae")
    # SDXL's pipeline upcasts its VAE to fp32 (force_upcast); everything else is at the job's fp16.
    assert weights == (sdxl.params_total - vae.params) * 2 + vae.params * 4


def test_offload_keeps_only_the_largest_component() -> None:
    flux = load_image_preset("flux-dev")
    b = estimate_image_memory(job(model="flux-dev", offload="model", dtype="bf16"), flux, H100)
    assert bytes_by_category(b)["weights"] == max(c.params for c in flux.components) * 2


def test_guidance_doubles_the_denoiser_batch_and_tiling_caps_decode() -> None:
    sd = load_image_preset("sd15")
    def term(name: str, **kw: object) -> int:
        b = estimate_image_memory(job(model="sd15", width=512, height=512, **kw), sd, H100)
        return next(t.bytes for t in b.terms if t.name == name)
    assert term("denoiser activations", guidance=True) == 2 * term("denoiser activations", guidance=False)
    big = {"width": 2048, "height": 2048}
    tiled = estimate_image_memory(job(model="sd15", vae_tiling=True, **big), sd, H100)
    plain = estimate_image_memory(job(model="sd15", **big), sd, H100)
    assert tiled.peak_bytes < plain.peak_bytes


def test_flux_is_guidance_distilled_so_guidance_does_not_double_its_batch() -> None:
    flux = load_image_preset("flux-dev")
    def denoiser(guidance: bool) -> str:
        b = estimate_image_memory(job(model="flux-dev", dtype="bf16", guidance=guidance), flux, H100)
        return next(f"{t.bytes} {t.formula}" for t in b.terms if t.name == "denoiser activations")
    # FluxPipeline runs one pass per step and feeds the guidance scale as an embedding.
    assert denoiser(True) == denoiser(False)
    assert "×2" not in denoiser(True)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 16), side=st.integers(16, 200).map(lambda n: n * 8),
       model=st.sampled_from(["sd15", "sdxl", "flux-dev"]), eager=st.booleans())
def test_memory_never_shrinks_as_batch_or_resolution_grow(batch: int, side: int, model: str, eager: bool) -> None:
    shape = load_image_preset(model)
    attn = "eager" if eager else "sdpa"
    def peak(b: int, s: int) -> int:
        return estimate_image_memory(job(model=model, batch=b, width=s, height=s, attention=attn),
                                     shape, H100).peak_bytes
    assert peak(batch + 1, side) >= peak(batch, side)
    assert peak(batch, side + 8) >= peak(batch, side)


def test_vae_slicing_decodes_one_image_of_the_batch_at_a_time() -> None:
    sdxl = load_image_preset("sdxl")

    def decode(**kw: object) -> int:
        b = estimate_image_memory(job(**({"batch": 4} | kw)), sdxl, H100)
        return next(t.bytes for t in b.terms if t.name == "VAE decode activations")

    assert decode(vae_slicing=True) * 4 == decode()
    assert decode(vae_slicing=True, batch=1) == decode(batch=1)  # nothing to slice


def test_vae_slicing_is_offered_for_batches() -> None:
    from gpuscout.estimator.fit import candidates

    sdxl = load_image_preset("sdxl")
    edits = [c.edits for c in candidates(job(batch=4), sdxl, H100)]
    assert {"vae_slicing": True} in edits
    assert {"vae_slicing": True} not in [c.edits for c in candidates(job(batch=1), sdxl, H100)]
