"""Video memory and speed: the analytic terms against FakeTensor traces of the real diffusers Wan and
CogVideoX modules, the offload modes, guidance (separate passes in Wan, a doubled batch in CogVideoX), the
fixes (task-keeping vs task-changing), the job spec's offload spellings, and FLUX image jobs taking the
measured DiT efficiency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.efficiency import EFFICIENCY_KINDS, default_efficiency
from gpuscout.estimator.fit import candidates, limits, suggest_changes
from gpuscout.estimator.image import estimate_image_memory
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.estimator.speed.video import dit_forward_flops
from gpuscout.estimator.video import (
    conv_workspace_term,
    denoiser_batch,
    denoiser_term,
    estimate_video_memory,
    phase_peaks,
    vae_decode_term,
)
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import ImageJob, VideoJob, load_job, parse_job
from gpuscout.workload.video import load_video_preset

H100 = find_gpu("h100")
RTX4090 = find_gpu("rtx-4090")
WAN13 = load_video_preset("wan2.1-t2v-1.3b")
WAN14 = load_video_preset("wan2.1-t2v-14b")
COG2 = load_video_preset("cogvideox-2b")
COG5 = load_video_preset("cogvideox-5b")
EXAMPLES = Path(__file__).parents[2] / "examples"


def job(**kw: Any) -> VideoJob:
    return VideoJob.model_validate({"kind": "video", "model": "wan2.1-t2v-1.3b"} | kw)


def cog_job(**kw: Any) -> VideoJob:
    """CogVideoX-2b at its native 720×480, 49 frames, fp16 (the diffusers docs' settings)."""
    return VideoJob.model_validate({"kind": "video", "model": "cogvideox-2b", "width": 720, "height": 480,
                                    "frames": 49, "dtype": "fp16"} | kw)


# --- the job spec ------------------------------------------------------------------------------


def test_examples_parse_and_estimate() -> None:
    for name in ("tiny-video.toml", "wan-t2v-480p.toml"):
        spec = load_job(EXAMPLES / name)
        assert isinstance(spec, VideoJob)
        assert estimate_memory(spec, load_video_preset(spec.model), H100).peak_bytes > 0


def test_old_cpu_offload_spelling_means_model_offload() -> None:
    assert parse_job({"kind": "image", "model": "sdxl", "cpu_offload": True}).offload == "model"  # type: ignore[union-attr]
    assert parse_job({"kind": "image", "model": "sdxl", "cpu_offload": False}).offload == "none"  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="disagree"):
        parse_job({"kind": "image", "model": "sdxl", "cpu_offload": True, "offload": "sequential"})
    with pytest.raises(SpecError, match="offload"):
        parse_job({"kind": "video", "model": "wan-1.3b", "offload": "layers"})


def test_frames_off_the_causal_grid_are_refused() -> None:
    with pytest.raises(SpecError, match="frames = 77 or 81"):
        estimate_video_memory(job(frames=80), WAN13, H100)


def test_a_video_job_cannot_use_an_image_model() -> None:
    with pytest.raises(SpecError, match="cannot run"):
        estimate_memory(job(), load_image_preset("sdxl"), H100)


# --- memory ------------------------------------------------------------------------------------


def test_weights_are_every_component_at_its_run_dtype() -> None:
    weights = bytes_by_category(estimate_video_memory(job(), WAN13, H100))["weights"]
    expected = sum(c.params * (4 if c.role == "vae" else 2) for c in WAN13.components)  # Wan VAE runs in fp32
    assert weights == pytest.approx(expected, abs=8)


def test_offload_modes_order_the_peak() -> None:
    peaks = {o: estimate_video_memory(job(offload=o), WAN14, H100).peak_bytes
             for o in ("none", "model", "sequential")}
    assert peaks["none"] > peaks["model"] > peaks["sequential"]


def test_model_offload_holds_one_component_per_phase() -> None:
    """Each phase holds its own component only: at 480p the UMT5-XXL text encoder (11.4 GB) outweighs the
    1.3B transformer and its activations; the fp32 VAE decode with its cuDNN workspace is larger still."""
    j = job(offload="model")
    phases = phase_peaks(j, WAN13)
    text_encoder = WAN13.component("text_encoder").params * 2
    assert phases["text encoding"] == text_encoder
    assert phases["denoising"] == WAN13.component("denoiser").params * 2 + denoiser_term(j, WAN13).bytes
    assert phases["denoising"] < phases["text encoding"]
    decode = vae_decode_term(j, WAN13).bytes + conv_workspace_term(j, WAN13).bytes
    assert phases["VAE decode"] == pytest.approx(WAN13.component("vae").params * 4 + decode)


def test_sequential_offload_holds_the_largest_leaf_module() -> None:
    """The umt5 token embedding (256,384 × 4096) is the largest module Wan ever moves in at once."""
    b = estimate_video_memory(job(offload="sequential"), WAN13, H100)
    weights = [t for t in b.terms if t.category == "weights"]
    assert len(weights) == 1 and "text_encoder.shared" in weights[0].name
    assert weights[0].bytes == 256_384 * 4096 * 2


def test_frames_add_tokens_but_the_decode_working_set_is_per_chunk() -> None:
    short, long = job(frames=41), job(frames=81)
    assert denoiser_term(long, WAN13).bytes > 1.85 * denoiser_term(short, WAN13).bytes  # 21 vs 11 latent frames
    clip = (81 - 41) * 3 * 832 * 480 * 4  # only the decoded frames themselves grow
    assert vae_decode_term(long, WAN13).bytes - vae_decode_term(short, WAN13).bytes == pytest.approx(clip, abs=2)


def test_tiling_bounds_the_decode_to_a_tile() -> None:
    plain, tiled = vae_decode_term(job(), WAN13).bytes, vae_decode_term(job(vae_tiling=True), WAN13).bytes
    assert tiled < plain / 4


def test_eager_attention_adds_the_score_matrix_sdpa_does_not() -> None:
    n = WAN13.tokens(832, 480, 81)
    extra = denoiser_term(job(attention="eager"), WAN13).bytes - denoiser_term(job(), WAN13).bytes
    assert extra == pytest.approx(4 * WAN13.attention_heads * n * n * 2, rel=1e-6)


def test_guidance_does_not_double_the_activations() -> None:
    """WanPipeline runs the unconditional pass as a second forward, not a doubled batch."""
    assert denoiser_term(job(guidance=True), WAN13).bytes == denoiser_term(job(guidance=False), WAN13).bytes


def test_cogvideox_guidance_doubles_the_activations() -> None:
    """CogVideoXPipeline batches the unconditional pass: torch.cat([latents] * 2)."""
    guided, plain = cog_job(), cog_job(guidance=False)
    assert denoiser_batch(guided, COG2) == 2 and denoiser_batch(plain, COG2) == 1
    assert denoiser_term(guided, COG2).bytes == pytest.approx(2 * denoiser_term(plain, COG2).bytes)
    assert vae_decode_term(guided, COG2).bytes == vae_decode_term(plain, COG2).bytes  # the decode is per clip


def test_cogvideox_eager_scores_cover_the_joint_sequence() -> None:
    s = COG2.sequence(720, 480, 49)  # 226 text tokens join the video tokens
    extra = (denoiser_term(cog_job(attention="eager", guidance=False), COG2).bytes
             - denoiser_term(cog_job(guidance=False), COG2).bytes)
    assert extra == pytest.approx(4 * COG2.attention_heads * s * s * 2, rel=1e-6)


def test_cogvideox_tiling_decodes_one_360_by_240_tile() -> None:
    plain, tiled = vae_decode_term(cog_job(), COG2).bytes, vae_decode_term(cog_job(vae_tiling=True), COG2).bytes
    clip = 49 * 3 * 720 * 480 * 2
    assert (tiled - clip) == pytest.approx((plain - clip) * (360 * 240) / (720 * 480))


def test_cogvideox_sizes_follow_its_grid() -> None:
    with pytest.raises(SpecError, match="frames = 45 or 49"):
        estimate_video_memory(cog_job(frames=48), COG2, H100)
    with pytest.raises(SpecError, match="multiples of 16"):
        estimate_video_memory(cog_job(width=728), COG2, H100)


# Analytic activations against the trace of the real modules (calibration held within ±25%). The
# trace runs the transformer at the batch the pipeline would (CogVideoX with guidance: 2 per clip).
TRACE_CASES = [
    ("wan2.1-t2v-1.3b", 512, 512, 33, "sdpa", False),
    ("wan2.1-t2v-1.3b", 256, 256, 17, "eager", False),
    ("wan2.1-t2v-1.3b", 512, 512, 17, "sdpa", True),
    ("wan2.1-t2v-14b", 256, 256, 17, "sdpa", False),
    ("cogvideox-2b", 720, 480, 49, "sdpa", False),
    ("cogvideox-2b", 720, 480, 49, "sdpa", True),
    ("cogvideox-2b", 256, 256, 17, "eager", False),
    ("cogvideox-2b", 1024, 1024, 17, "sdpa", True),
    ("cogvideox-5b", 512, 512, 33, "sdpa", False),
    ("ltx-video", 704, 480, 161, "sdpa", False),
    ("ltx-video", 1024, 1024, 17, "sdpa", True),
]


@pytest.mark.parametrize(("preset_id", "w", "h", "frames", "attention", "tiled"), TRACE_CASES)
def test_analytic_activations_match_the_trace(preset_id: str, w: int, h: int, frames: int, attention: str,
                                              tiled: bool) -> None:
    pytest.importorskip("diffusers")
    from gpuscout.trace.video import trace_video_step

    spec = job(model=preset_id, width=w, height=h, frames=frames, attention=attention, vae_tiling=tiled)
    shape = load_video_preset(preset_id)
    batch = denoiser_batch(spec, shape)  # the transformer's real batch; the trace decodes that many clips too
    traced = trace_video_step(preset_id, width=w, height=h, frames=frames, attention=attention,  # type: ignore[arg-type]
                              vae_tiling=tiled, batch=batch)
    decode = vae_decode_term(spec.model_copy(update={"batch": batch}), shape).bytes
    assert denoiser_term(spec, shape).bytes == pytest.approx(traced.denoiser_peak_bytes, rel=0.25)
    assert decode == pytest.approx(traced.vae_decode_peak_bytes, rel=0.25)
    # Never under the trace by more than a few percent: under-estimating memory costs users an OOM.
    assert decode >= 0.97 * traced.vae_decode_peak_bytes


# --- fixes -------------------------------------------------------------------------------------


def test_fixes_keep_or_change_the_task_as_marked() -> None:
    pool = {c.change: c for c in candidates(job(), WAN13, RTX4090)}
    keeps = {k for k, c in pool.items() if c.keeps_task}
    assert {"VAE tiling", "model CPU offload (one component on the GPU at a time)",
            "sequential CPU offload (one module on the GPU at a time)"} <= keeps
    changes = {k for k, c in pool.items() if not c.keeps_task}
    assert changes == {"81 → 41 frames", "832×480 → 416×240"}


def test_480p_on_a_4090_fits_after_a_task_keeping_fix() -> None:
    spec = job()
    assert not estimate_memory(spec, WAN13, RTX4090).fits
    fitting = [s for s in suggest_changes(spec, WAN13, RTX4090) if s.fits and s.keeps_task]
    assert fitting and fitting[0].change == "VAE tiling"


def test_frame_limit_lands_on_the_causal_grid() -> None:
    frames = limits(job(), WAN14, H100).values["frames"]
    assert frames >= 81 and (frames - 1) % 4 == 0


# --- speed -------------------------------------------------------------------------------------


def test_dit_flops_cover_the_transformer_weights() -> None:
    """Per token, the linear layers of the blocks do 2 FLOPs per weight (cross K/V act on the text only)."""
    d, ffn, layers = WAN13.hidden_size, WAN13.ffn_dim, WAN13.num_layers
    per_token_weights = layers * (6 * d * d + 2 * d * ffn)
    assert per_token_weights == pytest.approx(WAN13.component("denoiser").params - layers * 2 * d * d, rel=0.03)
    n = 10_000
    linear = dit_forward_flops(WAN13, n) - WAN13.num_layers * (4 * n * n * d + 4 * n * WAN13.text_tokens * d)
    assert linear == pytest.approx(2 * n * per_token_weights, rel=0.02)


@pytest.mark.parametrize("preset_id", ["cogvideox-2b", "cogvideox-5b"])
def test_cogvideox_flops_cover_its_transformer_weights(preset_id: str) -> None:
    """Per token of the joint sequence, Q, K, V, O and the feed-forward do 2 FLOPs per weight; the rest of
    the parameters are the per-block AdaLN linears (time_embed_dim → 6 D, twice), which see one vector
    per clip, and the embedders."""
    from gpuscout.workload.video import video_component_configs

    shape, config = load_video_preset(preset_id), video_component_configs(preset_id)
    d, ffn, layers = shape.hidden_size, shape.ffn_dim, shape.num_layers
    per_token_weights = layers * (4 * d * d + 2 * d * ffn)
    adaln = layers * 2 * config["transformer"]["time_embed_dim"] * 6 * d
    assert per_token_weights == pytest.approx(shape.component("denoiser").params - adaln, rel=0.02)
    n = 10_000
    seq = n + shape.text_tokens
    linear = dit_forward_flops(shape, n) - layers * 4 * seq * seq * d
    assert linear == pytest.approx(2 * seq * per_token_weights, rel=0.02)


def test_cogvideox_guidance_doubles_flops_but_reads_the_weights_once() -> None:
    plain = estimate_speed(cog_job(guidance=False), COG2, H100)
    cfg = estimate_speed(cog_job(), COG2, H100)
    step = {p.name: p for p in plain.phases}["denoiser step"], {p.name: p for p in cfg.phases}["denoiser step"]
    assert step[1].flops == pytest.approx(2 * step[0].flops)
    # One call at batch 2: activations' traffic doubles, the weights (fp16) are read once, not twice.
    weights = COG2.component("denoiser").params * 2
    assert 2 * step[0].bytes - step[1].bytes == pytest.approx(weights, rel=1e-6)
    wan = [{p.name: p for p in estimate_speed(job(guidance=g), WAN13, H100).phases}["denoiser step"]
           for g in (False, True)]
    assert wan[1].bytes == pytest.approx(2 * wan[0].bytes)  # Wan: a second, separate forward


def test_guidance_doubles_the_step_time_and_offload_adds_transfers() -> None:
    plain = estimate_speed(job(guidance=False), WAN13, H100).metrics["denoiser_step_s"]
    cfg = estimate_speed(job(), WAN13, H100).metrics["denoiser_step_s"]
    assert cfg == pytest.approx(2 * plain, rel=0.01)
    clip = {o: estimate_speed(job(offload=o), WAN13, H100).metrics["s_per_clip"]
            for o in ("none", "model", "sequential")}
    assert clip["none"] < clip["model"] < clip["sequential"]


def test_per_frame_and_per_clip_agree() -> None:
    m = estimate_speed(job(), WAN13, H100).metrics
    assert m["s_per_frame"] * 81 == pytest.approx(m["s_per_clip"])


def test_video_efficiency_is_a_kind_and_flux_images_use_it() -> None:
    assert "video" in EFFICIENCY_KINDS
    dit = default_efficiency(H100, "video")
    assert dit.compute == pytest.approx(0.33)
    flux = ImageJob(kind="image", model="flux-dev", dtype="bf16", steps=28)
    assert estimate_speed(flux, load_image_preset("flux-dev"), H100).efficiency == dit
    sdxl = ImageJob(kind="image", model="sdxl")
    assert estimate_speed(sdxl, load_image_preset("sdxl"), H100).efficiency == default_efficiency(H100, "image")


def test_flux_dev_time_lands_on_the_published_h100_figure() -> None:
    """xDiT: FLUX.1-dev 1024², 28 steps, one H100, plain PyTorch: 6.71 s (and 6.27 s in xDiT#378)."""
    flux = ImageJob(kind="image", model="flux-dev", dtype="bf16", steps=28, images=1)
    s = estimate_speed(flux, load_image_preset("flux-dev"), find_gpu("h100-sxm5-80gb")).metrics["s_per_image"]
    assert 6.27 * 0.95 < s < 6.71 * 1.05


def test_image_sequential_offload_holds_a_module_not_a_component() -> None:
    flux = load_image_preset("flux-dev")
    base = {"kind": "image", "model": "flux-dev", "dtype": "bf16"}
    model = estimate_image_memory(ImageJob.model_validate(base | {"offload": "model"}), flux, H100)
    seq = estimate_image_memory(ImageJob.model_validate(base | {"offload": "sequential"}), flux, H100)
    assert bytes_by_category(seq)["weights"] == 131_596_288 * 2  # T5's token embedding
    assert seq.peak_bytes < model.peak_bytes


def test_host_ram_holds_the_whole_pipeline_and_disk_the_frames() -> None:
    from gpuscout.estimator.host import estimate_host

    spec = job(offload="sequential", clips=10)
    needs = estimate_host(spec, WAN13)
    ram = {t.name: t.bytes for t in needs.ram}
    assert ram["pipeline weights"] == pytest.approx(sum(c.params * (4 if c.role == "vae" else 2)
                                                        for c in WAN13.components), abs=8)
    outputs = {t.name: t.bytes for t in needs.disk}["outputs"]
    assert outputs == 10 * 81 * 832 * 480 * 3
