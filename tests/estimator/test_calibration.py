"""Calibration: fitting per GPU and phase, the file, merging, and the calibrated speed estimate.

No catalog has a CPU, so a real `bench --device cpu` result is used where the answer is "no GPU to
calibrate". The GPU path reads result files built from the schema (tests/results: an H100 fingerprint
and the measured samples written into the file); each test compares the calibrated estimate with the
time the file records, never with a clock.
"""

from __future__ import annotations

import math
import statistics
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.calibration import (
    MIN_SD,
    SKU_VARIATION,
    Observation,
    active_calibration,
    calibration_toml,
    default_calibration_path,
    fit_calibration,
    load_calibration,
    merge_calibration,
    save_calibration,
)
from gpuscout.estimator.efficiency import EFFICIENCY_KINDS, calibrated, default_efficiency
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.hardware.catalog import find_gpu
from gpuscout.measure.bench import run_bench
from gpuscout.measure.harness import BenchSettings
from gpuscout.results.calibration_inputs import denoiser_kind, read_observations, result_gpu
from gpuscout.results.schema import BenchResult, Case, Fingerprint
from gpuscout.results.store import load_result, save_result
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob
from gpuscout.workload.jobs import load_job_ref, resolve_job_model
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.resolve import resolve_image
from results import FINETUNE_JOB, bench_result, metric, runs_case, train_case, write

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
H100 = "h100-sxm5-80gb"


def obs(ratio: float, *, phase: str = "training", sku: str = H100, source: str = "sha256:a", case: str = "c",
        noise: float | None = 0.02, samples: int = 5, day: date = date(2026, 11, 1)) -> Observation:
    return Observation(gpu_sku=sku, phase=phase, measured_s=ratio * 0.1, estimated_s=0.1, machine="NVIDIA H100",
                       date=day, source=source, case=case, noise_sd=noise, samples=samples, gpuscout_version="0.1.0")


# ---------------------------------------------------------------- fitting ----------------------

def test_factor_is_the_geometric_mean_and_the_spread_is_the_log_sd() -> None:
    ratios = [1.8, 2.0, 2.3, 2.1]
    cal = fit_calibration([obs(r, source=f"sha256:{i}") for i, r in enumerate(ratios)])
    [entry] = cal.entries
    logs = [math.log(r) for r in ratios]
    assert entry.factor == pytest.approx(math.exp(statistics.fmean(logs)))
    assert entry.sd == pytest.approx(statistics.stdev(logs))  # above the runs' own 2% noise
    assert entry.runs == 4 and len(cal.observations) == 4
    # The band: a 95% prediction interval with t(3) = 3.182, inside the default band (-25%/+60%).
    half = 3.182 * statistics.stdev(logs) * math.sqrt(1 + 1 / 4)
    default = default_efficiency(find_gpu(H100), "training")
    assert entry.band_high == pytest.approx(min(math.exp(half), default.band_high))
    assert entry.band_low == pytest.approx(max(math.exp(-half), default.band_low))


def test_one_run_takes_its_spread_from_its_repeats_and_never_zero() -> None:
    [noisy] = fit_calibration([obs(2.0, noise=0.05, samples=6)]).entries
    assert noisy.sd == pytest.approx(0.05) and noisy.runs == 1
    assert noisy.band_high == pytest.approx(math.exp(2.571 * 0.05 * math.sqrt(2)))  # t(5): 6 repeats
    [steady] = fit_calibration([obs(2.0, noise=0.0, samples=6)]).entries
    assert steady.sd == MIN_SD
    # Never narrower than GPUs of one SKU differ (8%, Sinha et al. SC22).
    assert steady.band_high == pytest.approx(1 + SKU_VARIATION)
    assert steady.band_low == pytest.approx(1 / (1 + SKU_VARIATION))


def test_a_single_sample_keeps_the_default_band() -> None:
    [entry] = fit_calibration([obs(2.0, noise=None, samples=1)]).entries
    default = default_efficiency(find_gpu(H100), "training")
    assert (entry.band_low, entry.band_high) == (default.band_low, default.band_high)


def test_phases_and_gpus_are_fitted_apart() -> None:
    cal = fit_calibration([obs(2.0, phase="prefill"), obs(0.9, phase="decode"), obs(3.0, sku="a100-sxm4-80gb")])
    assert {(e.gpu_sku, e.phase): round(e.factor, 6) for e in cal.entries} == {
        (H100, "prefill"): 2.0, (H100, "decode"): 0.9, ("a100-sxm4-80gb", "training"): 3.0}


def test_calibrated_efficiency_is_default_over_factor() -> None:
    gpu = find_gpu(H100)
    default = default_efficiency(gpu, "training")
    cal = fit_calibration([obs(2.0)])
    eff = cal.efficiency_for(gpu, "training", default)
    assert eff.compute == pytest.approx(default.compute / 2.0)
    assert eff.bandwidth == pytest.approx(default.bandwidth / 2.0)
    assert (eff.link, eff.overlap) == (default.link, default.overlap)
    assert "calibrated" in eff.source
    assert cal.efficiency_for(gpu, "decode", default_efficiency(gpu, "decode")) == default_efficiency(gpu, "decode")
    assert cal.efficiency_for(find_gpu("a100"), "training", default) == default


def test_faster_than_the_roofline_allows_is_clamped_at_one_and_says_so() -> None:
    gpu = find_gpu(H100)
    default = default_efficiency(gpu, "training")  # compute 0.5, bandwidth 0.9
    cal = fit_calibration([obs(0.4)])
    [entry] = cal.entries
    eff = cal.efficiency_for(gpu, "training", default)
    assert entry.clamped and eff.compute == pytest.approx(1.0) and eff.bandwidth == pytest.approx(1.0)
    assert "clamped" in eff.source and eff.band_low == default.band_low


def test_bad_observations_are_refused() -> None:
    with pytest.raises(SpecError, match="not an efficiency kind"):
        fit_calibration([obs(2.0, phase="warp")])
    with pytest.raises(SpecError, match="positive time"):
        fit_calibration([Observation(gpu_sku=H100, phase="training", measured_s=0.0, estimated_s=1.0, machine="m",
                                     date=date(2026, 1, 1), source="s")])


def test_the_denoiser_kind_follows_efficiency_toml() -> None:
    unet = resolve_image("sdxl")
    assert denoiser_kind("image", unet) == "image"
    dit = resolve_image("flux-dev")
    assert denoiser_kind("image", dit) == ("video" if "video" in EFFICIENCY_KINDS else "image")


# ---------------------------------------------------------------- results → calibrated estimate ---

def test_a_calibrated_training_estimate_matches_the_recorded_step(tmp_path: Path) -> None:
    path = write(bench_result("A"), tmp_path)  # llama-3-8b LoRA on an H100, ~0.51 s steps recorded
    recorded = load_result(path).cases[0].metrics[0]
    assert recorded.name == "step_s"
    observations, skipped = read_observations([path])
    assert not skipped and [o.phase for o in observations] == ["training"]
    cal = fit_calibration(observations)
    job = FinetuneJob.model_validate(FINETUNE_JOB)
    model, gpu = load_llm_preset("llama-3-8b"), find_gpu(H100)
    plain = estimate_speed(job, model, gpu).metrics["step_s"]
    tuned = estimate_speed(job, model, gpu, calibration=cal).metrics["step_s"]
    assert abs(math.log(plain / recorded.value)) > 1.0  # the defaults are far off for this record
    assert abs(math.log(tuned / recorded.value)) < 0.01  # the geometric mean of one run: its mean, nearly
    # Calibration is per GPU: the A100 estimate does not move.
    a100 = find_gpu("a100-sxm4-80gb")
    assert estimate_speed(job, model, a100, calibration=cal).job_s == estimate_speed(job, model, a100).job_s


def test_the_calibrated_band_is_the_fitted_one(tmp_path: Path) -> None:
    cal = fit_calibration(read_observations([write(bench_result("A"), tmp_path)])[0])
    job, model, gpu = FinetuneJob.model_validate(FINETUNE_JOB), load_llm_preset("llama-3-8b"), find_gpu(H100)
    speed = estimate_speed(job, model, gpu, calibration=cal)
    [entry] = cal.entries
    assert speed.job_low_s / speed.job_s == pytest.approx(entry.band_low)
    assert speed.job_high_s / speed.job_s == pytest.approx(entry.band_high)
    assert entry.band_high < default_efficiency(gpu, "training").band_high


def inference_result(ttft: dict[int, list[float]], tpot: dict[int, list[float]]) -> BenchResult:
    job: dict[str, Any] = {"kind": "inference", "name": "serve 8b", "model": "llama-3-8b", "weights": "bf16",
                           "prompt_tokens": 512, "output_tokens": 64, "concurrency": 8, "engine": "hf",
                           "requests": 1000}
    cases = [Case(name=f"concurrency {c}", params={"concurrency": c, "prompt_tokens": 512, "output_tokens": 64},
                  metrics=(metric("ttft_s", ttft[c], "s", higher=False), metric("tpot_s", tpot[c], "s", higher=False)))
             for c in ttft]
    return bench_result("serve", kind="inference", job=job, cases=cases)


def test_ttft_calibrates_prefill_and_tpot_calibrates_decode(tmp_path: Path) -> None:
    # Recorded: TTFT and TPOT at concurrency 1 and 8 (HF generate on an H100, as a bench writes them).
    result = inference_result({1: [0.052, 0.050, 0.051], 8: [0.30, 0.31, 0.29]},
                              {1: [0.031, 0.030, 0.032], 8: [0.036, 0.035, 0.037]})
    path = write(result, tmp_path)
    observations, _ = read_observations([path])
    assert sorted((o.phase, o.case) for o in observations) == [
        ("decode", "concurrency 1"), ("decode", "concurrency 8"), ("prefill", "concurrency 1"),
        ("prefill", "concurrency 8")]
    cal = fit_calibration(observations)
    model, gpu = load_llm_preset("llama-3-8b"), find_gpu(H100)
    job = InferenceJob.model_validate(result.job)
    for case in result.cases:
        sized = job.model_copy(update={"concurrency": case.params["concurrency"]})
        plain, tuned = estimate_speed(sized, model, gpu), estimate_speed(sized, model, gpu, calibration=cal)
        for name in ("ttft_s", "tpot_s"):
            measured = next(m.value for m in case.metrics if m.name == name)
            assert abs(math.log(tuned.metrics[name] / measured)) < abs(math.log(plain.metrics[name] / measured))
            assert abs(math.log(tuned.metrics[name] / measured)) < 0.35  # two sizes, one factor


def test_the_denoiser_step_calibrates_the_image_phase(tmp_path: Path) -> None:
    job, _ = load_job_ref(EXAMPLES / "sdxl-1024.toml")
    assert isinstance(job, ImageJob)
    steps = [0.21, 0.2, 0.22, 0.205]
    case = Case(name="image", params={"batch": job.batch},
                metrics=(metric("denoiser_step_s", steps, "s", higher=False),))
    path = write(bench_result("img", kind="image", job=job.model_dump(mode="json"), cases=[case]), tmp_path)
    observations, _ = read_observations([path])
    [o] = observations
    model, gpu = resolve_job_model(job, None), find_gpu(H100)
    assert o.phase == denoiser_kind("image", model)
    cal = fit_calibration(observations)
    tuned = estimate_speed(job, model, gpu, calibration=cal)
    step = next(p for p in tuned.phases if p.name.startswith("denoiser")).seconds
    assert step == pytest.approx(statistics.fmean(steps), rel=0.01)


def test_disturbed_and_failed_cases_are_skipped_with_the_reason(tmp_path: Path) -> None:
    throttled = runs_case([[1000.0, 1004.0], [998.0, 1001.0]], throttled_run=2)
    path = write(bench_result("hot", cases=[throttled, train_case([990.0, 1000.0], name="cool")]), tmp_path)
    observations, skipped = read_observations([path])
    assert [o.case for o in observations] == ["cool"]
    assert any("'train'" in s and "thermal_throttle" in s for s in skipped)


def test_a_load_result_is_skipped_and_alone_it_is_an_error(tmp_path: Path) -> None:
    no_gpu: dict[str, Any] = {"gpu_sku": None, "gpu_name": None}
    load = bench_result("load", kind="load", device="remote", job={"url": "http://x", "model": "m"}, gpu=no_gpu)
    load_path = write(load, tmp_path)
    with pytest.raises(SpecError, match="None of the results") as err:
        read_observations([load_path])
    assert "client machine" in err.value.why
    found, skipped = read_observations([load_path, write(bench_result("A"), tmp_path)])
    assert len(found) == 1 and "client machine" in skipped[0]


@pytest.fixture(scope="module")
def cpu_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `gpuscout bench` of the tiny fine-tune on this machine's CPU."""
    job, base = load_job_ref(EXAMPLES / "tiny-finetune.toml")
    result = run_bench(job, base_dir=base, settings=BenchSettings(device="cpu", warmup=1, repeats=3, runs=1),
                       progress=None)
    path = tmp_path_factory.mktemp("cpu") / "tiny-ft.json"
    save_result(result, path)
    return path


def test_a_cpu_result_names_what_it_found_and_why_it_cannot_be_calibrated(cpu_result: Path) -> None:
    result = load_result(cpu_result)
    assert result.fixed.device == "cpu" and result.fingerprint.gpu_sku is None
    assert any(m.name == "step_s" and m.value > 0 for m in result.cases[0].metrics)
    with pytest.raises(SpecError) as err:
        read_observations([cpu_result])
    assert "device 'cpu'" in err.value.what and result.fingerprint.cpu_model[:20] in err.value.what
    assert "no CPU entry" in err.value.why and "gpuscout gpus" in err.value.fix


def test_an_unknown_gpu_is_an_error_listing_what_was_found(tmp_path: Path) -> None:
    unknown: dict[str, Any] = {"gpu_sku": None, "gpu_name": "NVIDIA Mystery 7000", "driver": "1", "cuda": "1"}
    odd = bench_result("odd", gpu=unknown)
    with pytest.raises(SpecError, match="NVIDIA Mystery 7000"):
        result_gpu(odd, tmp_path / "odd.json")
    named = odd.model_copy(update={"fingerprint": Fingerprint.model_validate(
        {**odd.fingerprint.model_dump(), "gpu_name": "NVIDIA H100 80GB HBM3"})})
    assert result_gpu(named, tmp_path / "n.json").sku == H100  # the name alone finds the catalog GPU


# ---------------------------------------------------------------- the file ---------------------

def test_the_file_round_trips_and_is_toml(tmp_path: Path) -> None:
    cal = fit_calibration([obs(2.0), obs(1.5, phase="decode", case='quote " and \\ and \x7f')])
    path = tmp_path / "cal.toml"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    text = path.read_text()
    assert text.count("[[entry]]") == 2 and text.count("[[observation]]") == 2 and "version = 1" in text
    assert calibration_toml(cal) == text


def test_merging_refits_over_old_and_new_and_counts_a_file_once(tmp_path: Path) -> None:
    first = fit_calibration([obs(2.0, source="sha256:1")])
    merged = merge_calibration(first, [obs(3.0, source="sha256:2"), obs(2.0, source="sha256:1")])
    [entry] = merged.entries
    assert entry.runs == 2 and entry.factor == pytest.approx(math.sqrt(6.0))
    assert set(entry.sources) == {"sha256:1", "sha256:2"}
    later = merge_calibration(merged, [obs(2.5, source="sha256:3", day=date(2026, 11, 20))])
    assert later.entries[0].runs == 3 and later.entries[0].last_date == date(2026, 11, 20)


@pytest.mark.parametrize(("text", "match"), [
    ("version = 1\n[[entry]\n", "not valid TOML"),
    ("[[entry]]\ngpu_sku = 'x'\n", "version"),
    ("version = 7\n", "version 7"),
    ("version = 1\n[[entry]]\ngpu_sku = 'h100'\n", "not a valid calibration file"),
    ("version = 1\n[[observation]]\ngpu_sku = 'h100'\nphase = 'warp'\nmeasured_s = 1.0\nestimated_s = 1.0\n"
     "machine = 'm'\ndate = 2026-01-01\nsource = 's'\n", "unknown phase"),
])
def test_a_malformed_or_newer_file_is_a_spec_error(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_calibration(path)


def test_the_default_location_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_calibration_path() == tmp_path / "gpuscout" / "calibration.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_calibration_path() == tmp_path / "home" / ".config" / "gpuscout" / "calibration.toml"


def test_no_default_file_means_no_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert active_calibration().calibration is None
    cal = fit_calibration([obs(2.0)])
    save_calibration(cal, default_calibration_path())
    assert active_calibration().calibration == cal and active_calibration().path == default_calibration_path()
    assert active_calibration(use=False).calibration is None
    with pytest.raises(SpecError):
        active_calibration(tmp_path / "missing.toml")


def test_calibrated_none_inside_an_active_calibration_gives_the_defaults() -> None:
    gpu = find_gpu(H100)
    cal = fit_calibration([obs(2.0)])
    plain = default_efficiency(gpu, "training")
    with calibrated(cal):
        assert default_efficiency(gpu, "training").compute == pytest.approx(plain.compute / 2)
        with calibrated(None):
            assert default_efficiency(gpu, "training") == plain
    assert default_efficiency(gpu, "training") == plain

