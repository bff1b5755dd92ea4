"""`gpuscout calibrate` learns the serving simulator's step costs from `load` results, as it learns the
efficiency factors from bench results: the fit is stored per GPU in the calibration file and every later
simulation on that GPU (the next load's prediction here; pick and estimate likewise) uses it.

Real components: a real load run against the fake OpenAI server on 127.0.0.1 (fixed TTFT and token gap,
tests/loadgen/fake_openai.py), real result and calibration files, the real fit and simulator, and the CLI as
a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from fake_openai import FakeServer

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.estimator.calibration import load_calibration
from gpuscout.estimator.efficiency import calibrated
from gpuscout.estimator.serving.from_speed import sim_config, step_costs
from gpuscout.estimator.serving.model import Arrivals
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.hardware.catalog import find_gpu
from gpuscout.loadgen.plan import make_plan
from gpuscout.report.load_prediction import error, measured_value
from gpuscout.results.schema import BenchResult
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import load_llm_preset

Server = Callable[..., AbstractContextManager[FakeServer]]
H100 = find_gpu("h100-sxm5-80gb")
TTFT = "ttft_from_intended_s"  # the measured TTFT the simulator's is held against
LLAMA8 = load_llm_preset("llama-3-8b")
JOB_TOML = 'kind = "inference"\nmodel = "llama-3-8b"\nprompt_tokens = 128\noutput_tokens = 16\nconcurrency = 2\n'


def run_load(url: str, out: Path | None, **kw: object) -> BenchResult:
    plan = make_plan(url=url, model="m", runs=1, sweep=(1.0, 2.0), requests=30, output_tokens=16,
                     prompt_tokens=128, server_gpu="h100")
    return api.load(plan, output=out, **kw).result  # type: ignore[arg-type]


def errors(result: BenchResult, field: str, metric: str, summary: str | None) -> list[float]:
    assert result.prediction is not None
    out = []
    for level, case in zip(result.prediction.levels, result.cases, strict=True):
        found = error(getattr(level, field), measured_value(next(m for m in case.metrics if m.name == metric),
                                                             summary))
        assert found is not None
        out.append(abs(found))
    return out


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "served.toml"
    path.write_text(JOB_TOML)
    return path


def test_calibrate_fits_step_costs_to_a_load_and_the_next_prediction_uses_them(fake_server: Server, job_file: Path,
                                                                            tmp_path: Path) -> None:
    measured, cal = tmp_path / "load.json", tmp_path / "calibration.toml"
    # 200 ms to the first token and 5 ms a token: far from what an 8B model on an H100 does (~45 ms to the
    # first token), so the speed model's estimate misses by a lot and the fit has something to learn.
    with fake_server(ttft_s=0.2, token_delay_s=0.005) as srv:
        before = run_load(srv.url, measured, job=job_file, use_calibration=False)
        report = api.calibrate([measured], output=cal)
        after = run_load(srv.url, None, job=job_file, calibration=cal)
    assert report.added == () and len(report.serving) == 1
    entry = report.serving[0]
    assert (entry.gpu_sku, entry.model, entry.points) == (H100.sku, "llama-3-8b", 2)
    assert entry.source.startswith("sha256:")
    assert set(entry.residuals) == {"ttft_p50_s", "itl_p50_s", "output_tokens_per_s"}  # what the fit used
    assert load_calibration(cal).serving == (entry,)
    assert after.prediction is not None and after.prediction.costs_source.startswith("calibrated from 1 load result")
    # The next prediction simulates with the fitted costs: the speed model's prior at the default factors,
    # device terms times the entry's factors, host terms the entry's seconds.
    job = InferenceJob.model_validate(after.prediction.job)
    with calibrated(None):
        prior = step_costs(job, LLAMA8, H100)
    fitted = after.prediction.costs_source
    with calibrated(load_calibration(cal)):
        config = sim_config(job, LLAMA8, H100)
    assert config.costs.source == fitted
    for term, factor in entry.factors.items():
        assert getattr(config.costs, term) == pytest.approx(getattr(prior, term) * factor, rel=1e-12)
    for term, seconds in entry.seconds.items():
        assert getattr(config.costs, term) == seconds
    for level, case in zip(after.prediction.levels, after.cases, strict=True):
        sim = simulate(config, Arrivals(kind="concurrency", concurrency=case.params["concurrency"], requests=30,
                                        prompt_tokens=128, output_tokens=16, seed=after.fixed.seed))
        assert (level.ttft_p50_s, level.itl_p95_s, level.requests_per_s) == (
            sim.ttft_s.p50, sim.itl_s.p95, sim.requests_per_s)
    # The fit learned the server's time to first token: its request overhead is what the simulated lone
    # request adds to the step costs, and it takes the calibrated TTFT P50 at one user closer to the
    # measured one than the estimate's.
    assert entry.seconds["request_overhead_s"] > prior.request_overhead_s
    one_before, one_after = errors(before, "ttft_p50_s", TTFT, "p50")[0], errors(after, "ttft_p50_s", TTFT,
                                                                                       "p50")[0]
    assert one_after < one_before, (one_after, one_before)


def test_a_load_without_the_served_job_is_skipped_with_the_fix(fake_server: Server, tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        run_load(srv.url, plain, use_calibration=False)
    with pytest.raises(SpecError, match="None of the results holds a measured phase time or a load") as err:
        api.calibrate([plain], output=tmp_path / "cal.toml")
    assert "does not record the served job and GPU" in err.value.why and "--job SPEC.toml" in err.value.why


def test_the_command_line_shows_the_serving_fit(fake_server: Server, job_file: Path, tmp_path: Path) -> None:
    measured, cal = tmp_path / "load.json", tmp_path / "cal.toml"
    with fake_server(ttft_s=0.02, token_delay_s=0.004) as srv:
        run_load(srv.url, measured, job=job_file, use_calibration=False)
    done = subprocess.run([sys.executable, "-m", "gpuscout", "calibrate", str(measured), "-o", str(cal)],
                          capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "Serving simulator: 1 new load result(s), 1 in all" in done.stdout
    assert "h100-sxm5-80gb" in done.stdout and "llama-3-8b" in done.stdout and "written to" in done.stdout
    assert "0 new measured phase" not in done.stdout  # no bench result given: no phase table
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert "[[serving]]" in cal.read_text()
