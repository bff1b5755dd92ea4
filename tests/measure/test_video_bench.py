"""Video slice of bench on the tiny-wan test model: a real diffusers Wan transformer and AutoencoderKLWan
with random weights, run on the CPU in seconds; and the bench's dispatch of video jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import UnsupportedHere
from gpuscout.measure.bench import plan_cases
from gpuscout.measure.harness import BenchSettings
from gpuscout.measure.video_bench import (
    measures_text_encoder,
    passes_per_step,
    plan_video_cases,
    run_video_case,
)
from gpuscout.results.schema import Case
from gpuscout.workload.job import VideoJob, load_job
from gpuscout.workload.video import load_video_preset

pytest.importorskip("torch")
pytest.importorskip("diffusers", reason="diffusers is in the bench extra")

EXAMPLE = Path(__file__).parents[2] / "examples" / "tiny-video.toml"
SETTINGS = BenchSettings(device="cpu", warmup=1, repeats=2)


def tiny_job(**overrides: Any) -> VideoJob:
    return VideoJob.model_validate({"kind": "video", "model": "tiny-wan", "width": 64, "height": 64, "frames": 9,
                                    "steps": 2, "dtype": "fp32", "clips": 10} | overrides)


@pytest.fixture(scope="module")
def tiny_case() -> Case:
    job = load_job(EXAMPLE)
    assert isinstance(job, VideoJob)
    [planned] = plan_video_cases(job, SETTINGS, "cpu")
    result: Case = planned.fn(*planned.args)
    return result


def _metric(case: Case, name: str) -> Any:
    return next(m for m in case.metrics if m.name == name)


def test_the_tiny_case_times_every_phase(tiny_case: Case) -> None:
    names = {m.name for m in tiny_case.metrics}
    assert {"s_per_clip", "s_per_frame", "clips_per_s", "denoiser_step_s", "vae_decode_s", "text_encode_s",
            "job_s"} <= names
    for m in tiny_case.metrics:
        assert m.value > 0 and all(s > 0 for s in m.samples)


def test_one_step_sample_per_step_per_repeat(tiny_case: Case) -> None:
    assert len(_metric(tiny_case, "denoiser_step_s").samples) == SETTINGS.repeats * 2
    assert len(_metric(tiny_case, "vae_decode_s").samples) == SETTINGS.repeats


def test_a_clip_is_its_phases(tiny_case: Case) -> None:
    steps = _metric(tiny_case, "denoiser_step_s").samples
    vae = _metric(tiny_case, "vae_decode_s").samples
    text = _metric(tiny_case, "text_encode_s").samples
    clips = _metric(tiny_case, "s_per_clip").samples
    for i, clip in enumerate(clips):
        assert clip == pytest.approx(text[i] + sum(steps[2 * i:2 * i + 2]) + vae[i], rel=1e-9)
    assert _metric(tiny_case, "s_per_frame").value == pytest.approx(_metric(tiny_case, "s_per_clip").value / 9)


def test_params_and_memory_are_recorded(tiny_case: Case) -> None:
    assert tiny_case.params["transformer_passes"] == 2  # guidance: a separate unconditional forward
    assert tiny_case.params["vae_dtype"] == "fp32" and tiny_case.params["text_encoder_timed"] is True
    assert tiny_case.peak_memory.process_rss_bytes and tiny_case.peak_memory.process_rss_bytes > 0


def test_tiling_and_no_guidance_run_too() -> None:
    case = run_video_case(tiny_job(guidance=False, vae_tiling=True, steps=1), SETTINGS, "cpu", "tiled")
    assert case.params["transformer_passes"] == 1 and case.params["vae_tiling"] is True
    assert _metric(case, "vae_decode_s").value > 0


def test_offload_is_unsupported_not_a_crash() -> None:
    with pytest.raises(UnsupportedHere, match="offload"):
        run_video_case(tiny_job(offload="model"), SETTINGS, "cpu", "offload")


def test_passes_and_text_encoder_rules() -> None:
    assert passes_per_step(tiny_job()) == 2 and passes_per_step(tiny_job(guidance=False)) == 1
    assert measures_text_encoder(load_video_preset("tiny-wan"))
    assert not measures_text_encoder(load_video_preset("wan2.1-t2v-1.3b"))  # UMT5-XXL: 5.7 B


def test_bench_dispatches_video_jobs() -> None:
    from gpuscout.measure.bench import _ModelRef

    job = tiny_job()
    plan = plan_cases(job, _ModelRef.of(job, None), settings=SETTINGS, device="cpu", probe=False, gpu_sku=None)
    assert [p.fn for p in plan] == [run_video_case]
    assert plan[0].size["frames"] == 9
