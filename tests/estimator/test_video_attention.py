"""Video DiT speed with its attention at the fused kernel's measured rate per architecture, and the peak of
a video job above its weights (docs/video.md §3)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.efficiency import Efficiency, attention_efficiency, calibrated, default_efficiency
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.estimator.speed.roofline import PhaseTime
from gpuscout.estimator.speed.video import dit_attention_flops, dit_forward_flops, split_attention
from gpuscout.estimator.video import component_bytes, denoiser_term, estimate_video_memory, vae_decode_term
from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.workload.job import VideoJob
from gpuscout.workload.video import load_video_preset

A100 = find_gpu("a100-sxm4-80gb")
H100 = find_gpu("h100-sxm5-80gb")
T4 = find_gpu("t4")
COG5 = load_video_preset("cogvideox-5b")
WAN14 = load_video_preset("wan2.1-t2v-14b")


def cog(**kw: Any) -> VideoJob:
    return VideoJob.model_validate({"kind": "video", "model": "cogvideox-5b", "width": 720, "height": 480,
                                    "frames": 49, "dtype": "bf16"} | kw)


def step(job: VideoJob, gpu: Gpu) -> PhaseTime:
    return next(p for p in estimate_speed(job, COG5, gpu).phases if p.name == "denoiser step")


def test_attention_is_about_half_of_a_cogvideox_step_and_grows_with_frames() -> None:
    short, long = COG5.tokens(720, 480, 9), COG5.tokens(720, 480, 49)
    share_short = dit_attention_flops(COG5, short) / dit_forward_flops(COG5, short)
    share_long = dit_attention_flops(COG5, long) / dit_forward_flops(COG5, long)
    assert 0.4 < share_long < 0.6  # S/6D = 0.96 at 49 frames: attention ≈ linears
    assert share_short < share_long


def test_ampere_runs_the_attention_share_faster_than_the_linears() -> None:
    eff = default_efficiency(A100, "video")
    split, how = split_attention(cog(), COG5, A100, eff)
    kernel = attention_efficiency(A100)
    assert kernel is not None and kernel.compute > eff.compute
    assert eff.compute < split.compute < kernel.compute
    assert "FlashAttention-2" in how
    # the same step on the same GPU takes less time than at the row's single figure
    assert step(cog(), A100).compute_s < step(cog(), A100).flops / (A100.bf16_flops_per_s * eff.compute)


def test_hopper_attention_is_flashattention2_at_35_percent() -> None:
    kernel = attention_efficiency(H100)
    assert kernel is not None and kernel.compute == pytest.approx(0.35)
    # A100 gains more from the split than H100: FlashAttention-2 does not use Hopper's wgmma/TMA
    gain = {g.sku: split_attention(cog(), COG5, g, default_efficiency(g, "video"))[0].compute
            / default_efficiency(g, "video").compute for g in (A100, H100)}
    assert gain[A100.sku] > gain[H100.sku]


def test_eager_attention_calibration_and_unknown_architectures_are_left_alone() -> None:
    eff = default_efficiency(A100, "video")
    assert split_attention(cog(attention="eager"), COG5, A100, eff)[0] == eff
    assert attention_efficiency(T4) is None
    assert split_attention(cog(dtype="fp16"), COG5, T4, default_efficiency(T4, "video"))[0].compute == \
        default_efficiency(T4, "video").compute
    measured = Efficiency(compute=0.5, bandwidth=0.7, link=0.4, overlap=0.0, band_low=0.9, band_high=1.1,
                          source="bench")

    class Measured:
        def efficiency_for(self, gpu: Gpu, phase: str, default: Efficiency) -> Efficiency:
            return measured

    with calibrated(Measured()):
        assert split_attention(cog(), COG5, A100, default_efficiency(A100, "video"))[0].compute == 0.5


def test_a_video_peak_exceeds_its_resident_weights_by_the_attention_and_decode_terms() -> None:
    spec = {"kind": "video", "model": "wan2.1-t2v-14b", "width": 1280, "height": 720, "frames": 81}
    j = VideoJob.model_validate(spec)
    memory = estimate_video_memory(j, WAN14, H100)
    above = memory.peak_bytes - bytes_by_category(memory)["weights"]
    assert above > denoiser_term(j, WAN14).bytes
    assert above > vae_decode_term(j, WAN14).bytes
    # the 3D full attention over 21 latent frames × 3,600 tokens is gigabytes, not a rounding term
    assert denoiser_term(j, WAN14).bytes > 2 * 2**30
    # model offload: each phase holds its own component and that phase's activations on top
    m = VideoJob.model_validate(spec | {"offload": "model"})
    peak = estimate_video_memory(m, WAN14, H100).peak_bytes
    assert peak > component_bytes(m, WAN14.component("denoiser")) + denoiser_term(m, WAN14).bytes
    assert peak > component_bytes(m, WAN14.component("vae")) + vae_decode_term(m, WAN14).bytes
