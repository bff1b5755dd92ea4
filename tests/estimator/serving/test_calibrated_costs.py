"""Step costs calibrated from load results: the calibration file's serving factors reach every simulation.

`gpuscout calibrate` stores, per GPU, factors over the speed model's step costs (fitted / estimated).
Inside `efficiency.calibrated(calibration)` (as estimate, pick and load run) `step_costs` multiplies the
default-factor costs by them; bench-calibrated prefill/decode efficiencies are not stacked on top (the
serving factors were fitted over the defaults), and a GPU without a serving entry is untouched.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuscout.estimator.calibration import (
    Calibration,
    CalibrationEntry,
    ServingEntry,
    load_calibration,
    merge_serving,
    save_calibration,
)
from gpuscout.estimator.efficiency import calibrated
from gpuscout.estimator.serving.from_speed import sim_config, step_costs
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import load_llm_preset

LLAMA8 = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100-sxm5-80gb")
A100 = find_gpu("a100-sxm4-80gb")
JOB = InferenceJob.model_validate({"kind": "inference", "model": "llama-3-8b", "prompt_tokens": 512,
                                   "output_tokens": 128, "concurrency": 4})


def serving(factors: dict[str, float], *, source: str = "sha256:aa", model: str = "llama-3-8b",
            day: int = 1, seconds: dict[str, float] | None = None) -> ServingEntry:
    return ServingEntry(gpu_sku=H100.sku, model=model, factors=factors, seconds=seconds or {}, points=3,
                        residuals={"ttft_p95_s": 0.04}, machine="NVIDIA H100 80GB HBM3", date=date(2026, 12, day),
                        source=source)


def test_serving_factors_multiply_the_default_costs_on_their_gpu_only() -> None:
    plain = step_costs(JOB, LLAMA8, H100)
    cal = Calibration(serving=(serving({"compute_s_per_token": 2.0}, seconds={"request_overhead_s": 0.02,
                                                                              "overhead_s": 0.003}),))
    with calibrated(cal):
        scaled = step_costs(JOB, LLAMA8, H100)
        other = step_costs(JOB, LLAMA8, A100)
        config = sim_config(JOB, LLAMA8, H100)
    assert scaled.compute_s_per_token == pytest.approx(2 * plain.compute_s_per_token, rel=1e-12)
    assert (scaled.request_overhead_s, scaled.overhead_s) == (0.02, 0.003)  # host terms: fitted seconds
    assert scaled.weights_s == plain.weights_s and scaled.kv_read_s_per_token == plain.kv_read_s_per_token
    assert scaled.source.startswith("calibrated from 1 load result on NVIDIA H100 80GB HBM3, 2026-12-01")
    assert config.costs == scaled
    assert other == step_costs(JOB, LLAMA8, A100)  # no entry for the A100: its estimate as it was


def test_bench_efficiency_entries_do_not_stack_on_serving_factors() -> None:
    """A decode entry (bench-calibrated bandwidth ×0.5) changes the uncalibrated costs, but not costs that
    carry serving factors: those were fitted over the default factors."""
    decode = CalibrationEntry(gpu_sku=H100.sku, phase="decode", factor=2.0, sd=0.05, runs=2, band_low=0.9,
                              band_high=1.2, first_date=date(2026, 11, 1), last_date=date(2026, 11, 1))
    plain = step_costs(JOB, LLAMA8, H100)
    with calibrated(Calibration(entries=(decode,))):
        bench_only = step_costs(JOB, LLAMA8, H100)
    with calibrated(Calibration(entries=(decode,), serving=(serving({"weights_s": 1.25}),))):
        both = step_costs(JOB, LLAMA8, H100)
    assert bench_only.weights_s > plain.weights_s * 1.5  # the decode entry slows the memory side
    assert both.weights_s == pytest.approx(1.25 * plain.weights_s, rel=1e-12)


def test_several_load_results_combine_as_a_geometric_mean_and_a_reread_replaces_its_twin() -> None:
    first = serving({"weights_s": 2.0}, source="sha256:aa", seconds={"overhead_s": 0.001})
    second = serving({"weights_s": 8.0}, source="sha256:bb", model="qwen3-30b-a3b", day=2,
                     seconds={"overhead_s": 0.004})
    cal = Calibration(serving=merge_serving(None, [first, second]))
    found = cal.serving_factors(H100.sku)
    assert found is not None and found.factors["weights_s"] == pytest.approx(4.0)
    assert found.seconds["overhead_s"] == pytest.approx(0.002)
    assert "2 load results" in found.note and "2026-12-02" in found.note
    assert cal.serving_factors(A100.sku) is None
    again = merge_serving(cal, [serving({"weights_s": 3.0}, source="sha256:aa")])
    assert len(again) == 2 and {e.factors["weights_s"] for e in again} == {3.0, 8.0}


def test_the_file_round_trips_and_old_files_still_load(tmp_path: Path) -> None:
    cal = Calibration(serving=(serving({"compute_s_per_token": 1.3, "kv_read_s_per_token": 0.9},
                                       seconds={"overhead_s": 0.0021}),))
    path = tmp_path / "calibration.toml"
    save_calibration(cal, path)
    assert "[[serving]]" in path.read_text() and load_calibration(path) == cal
    old = tmp_path / "old.toml"
    old.write_text("version = 1\n")  # written before serving entries existed
    assert load_calibration(old).serving == ()


def test_unknown_terms_and_absurd_factors_are_refused() -> None:
    with pytest.raises(ValidationError, match="unknown step-cost factor 'warp_s'"):
        serving({"warp_s": 1.0})
    with pytest.raises(ValidationError, match="unknown step-cost factor 'overhead_s'"):
        serving({"overhead_s": 2.0})  # a host term is kept in seconds
    with pytest.raises(ValidationError, match="outside"):
        serving({"weights_s": 1e9})
    with pytest.raises(ValidationError, match="outside 0 to 3600 s"):
        serving({}, seconds={"request_overhead_s": -1.0})


def test_pick_simulates_with_the_calibrated_step_costs() -> None:
    """pick runs its simulations inside the calibration in force: a load-calibrated GPU's verdict uses the
    fitted costs (a 2 s request overhead misses a 1 s TTFT target that the estimate meets)."""
    from gpuscout.cost.simulated import simulate_layout

    served = JOB.model_copy(update={"slo": JOB.slo.model_copy(update={"ttft_p95_s": 1.0})})
    plain = simulate_layout(served, served, LLAMA8, H100, 1, None)
    slow_host = Calibration(serving=(serving({}, seconds={"request_overhead_s": 2.0}),))
    with calibrated(slow_host):
        fitted = simulate_layout(served, served, LLAMA8, H100, 1, None)
    assert not isinstance(plain, str) and not isinstance(fitted, str)
    assert plain.costs_source.startswith("estimate") and not plain.misses
    assert fitted.costs_source.startswith("calibrated from 1 load result")
    assert any("TTFT" in miss for miss in fitted.misses)


def test_estimate_and_pick_name_a_gpu_whose_step_costs_are_calibrated() -> None:
    from gpuscout.report.calibration import calibration_lines

    cal = Calibration(serving=(serving({"weights_s": 1.1}),))
    assert calibration_lines(cal, [H100.sku, A100.sku]) == [
        "h100-sxm5-80gb: serving step costs calibrated from 1 load result on NVIDIA H100 80GB HBM3, 2026-12-01 "
        "(llama-3-8b)"]
