"""calibrate on a result a million times off the estimate: a clear error naming it, never a traceback."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.estimator.calibration import MAX_FACTOR, Observation, fit_calibration
from gpuscout.results.store import load_result, save_result
from results import bench_result

H100 = "h100-sxm5-80gb"


def obs(ratio: float, *, source: str = "sha256:a", noise: float | None = 0.02) -> Observation:
    return Observation(gpu_sku=H100, phase="training", measured_s=ratio * 0.1, estimated_s=0.1, machine="NVIDIA H100",
                       date=date(2026, 11, 1), source=source, case="c", noise_sd=noise, samples=5)


@pytest.mark.parametrize("ratio", [MAX_FACTOR, 1e7, 1 / MAX_FACTOR, 1e-9])
def test_a_factor_past_a_millionfold_is_refused_with_the_ratio(ratio: float) -> None:
    with pytest.raises(SpecError, match=f"Cannot calibrate {H100} training: measured / estimated time is") as err:
        fit_calibration([obs(ratio)])
    assert "another unit" in err.value.why and "calibrate without the odd result" in err.value.fix


def test_a_spread_that_would_overflow_the_band_is_refused_or_bounded() -> None:
    [entry] = fit_calibration([obs(5e5, source="sha256:a"), obs(2e-5, source="sha256:b")]).entries
    assert 0 < entry.band_low <= 1 <= entry.band_high <= 1e6  # exp(t · sd) would overflow: held in bounds
    with pytest.raises(SpecError, match="log-space spread"):
        fit_calibration([obs(2.0, noise=150.0)])


def test_calibrate_on_a_result_a_million_times_slower_than_estimated_is_a_clear_error(tmp_path: Path) -> None:
    result = bench_result("A")
    slow = [c.model_copy(update={"metrics": tuple(m.model_copy(update={
        "value": m.value * 1e6, "samples": tuple(s * 1e6 for s in m.samples)}) if m.name == "step_s" else m
        for m in c.metrics)}) for c in result.cases]
    path = tmp_path / "slow.json"
    save_result(result.model_copy(update={"cases": tuple(slow)}), path)
    load_result(path)  # a valid result file: the refusal is calibrate's, not the reader's
    with pytest.raises(SpecError, match="Cannot calibrate"):
        api.calibrate([path], output=tmp_path / "cal.toml")
    assert not (tmp_path / "cal.toml").exists()
