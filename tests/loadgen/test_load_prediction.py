"""Every load run is also a check of the serving simulator: `load --job SPEC --server-gpu GPU` stores, per
measured level, the simulator's prediction of the same arrivals beside what was measured.

Real components: the fake OpenAI server on 127.0.0.1 (tests/loadgen/fake_openai.py), real result files,
the real simulator. The fake server is not a continuous-batching engine, so these tests hold the wiring
(the prediction is the simulation of the level's own arrivals and lengths, stored, shown, its error the
ratio of the stored numbers), not the model's accuracy (tests/estimator/serving and validation/ do that).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from fake_openai import FakeServer

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.estimator.calibration import Calibration, ServingEntry, save_calibration
from gpuscout.estimator.efficiency import calibrated
from gpuscout.estimator.serving.from_speed import sim_config
from gpuscout.estimator.serving.model import Arrivals
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.hardware.catalog import find_gpu
from gpuscout.loadgen.plan import make_plan
from gpuscout.report.load import load_screen
from gpuscout.report.load_prediction import prediction_errors
from gpuscout.report.payload import load_payload
from gpuscout.results.store import load_result, save_result
from gpuscout.workload.job import InferenceJob, Slo
from gpuscout.workload.presets import load_llm_preset
from report.screens import render

Server = Callable[..., AbstractContextManager[FakeServer]]
H100 = find_gpu("h100-sxm5-80gb")
JOB_TOML = """kind = "inference"
model = "llama-3-8b"
prompt_tokens = 128
output_tokens = 16
concurrency = 2
"""


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "served.toml"
    path.write_text(JOB_TOML)
    return path


def plan(url: str, **kw: object) -> object:
    base: dict[str, object] = {"url": url, "model": "m", "runs": 1, "concurrency": 2, "requests": 12,
                               "output_tokens": 16, "prompt_tokens": 128, "server_gpu": "h100"}
    return make_plan(**base | kw)


def screen_text(report: api.LoadReport, width: int = 80) -> str:
    return render(load_screen(report.result, output=None, costs=(), search=report.search), width)


def test_each_level_is_simulated_with_its_own_arrivals_and_stored(fake_server: Server, job_file: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with fake_server(ttft_s=0.004, token_delay_s=0.002) as srv:
        report = api.load(plan(srv.url, concurrency=None, sweep=(1.0, 2.0)), output=out, job=job_file,
                          use_calibration=False)
    stored = load_result(out)
    prediction = stored.prediction
    assert prediction is not None and prediction.unavailable is None and prediction == report.result.prediction
    assert prediction.gpu == H100.sku and prediction.job["model"] == "llama-3-8b"
    assert prediction.costs_source.startswith("estimate: h100-sxm5-80gb")
    assert [lv.case for lv in prediction.levels] == [c.name for c in stored.cases]
    # The prediction is the simulation of that level's arrivals at its measured lengths, nothing else.
    job = InferenceJob.model_validate({"kind": "inference", "model": "llama-3-8b", "prompt_tokens": 128,
                                       "output_tokens": 16, "concurrency": 2})
    config = sim_config(job, load_llm_preset("llama-3-8b"), H100)
    for level, case in zip(prediction.levels, stored.cases, strict=True):
        metrics = {m.name: m for m in case.metrics}
        output = round(metrics["output_tokens_per_s"].value / metrics["requests_per_s"].value)
        assert level.output_tokens == output == 16  # the fake server sends max_tokens
        sim = simulate(config, Arrivals(kind="concurrency", concurrency=case.params["concurrency"], requests=12,
                                        prompt_tokens=round(level.prompt_tokens or 0), output_tokens=output,
                                        seed=stored.fixed.seed))
        assert (level.ttft_p95_s, level.itl_p50_s, level.output_tokens_per_s) == (
            sim.ttft_s.p95, sim.itl_s.p50, sim.output_tokens_per_s)
        assert level.arrivals.startswith(f"concurrency {case.params['concurrency']}, 12 requests")
    # The errors a JSON reader gets are the stored prediction over the stored measurement.
    errors = prediction_errors(stored)
    first = next(e for e in errors if e["case"] == stored.cases[0].name and e["metric"] == "ttft_p95_s")
    ttft = next(m for m in stored.cases[0].metrics if m.name == "ttft_from_intended_s")
    assert ttft.summary is not None
    assert first["error"] == pytest.approx(prediction.levels[0].ttft_p95_s / ttft.summary.p95 - 1)
    assert load_payload(stored, (), None)["prediction_errors"] == errors
    text = screen_text(report)
    assert "Simulator beside the measurement on h100-sxm5-80gb" in text and "step costs: estimate" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_without_a_job_or_a_gpu_the_result_says_why_in_one_line(fake_server: Server, job_file: Path) -> None:
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        no_job = api.load(plan(srv.url), use_calibration=False)
        no_gpu = api.load(plan(srv.url, server_gpu=None), job=job_file, use_calibration=False)
        unknown = api.load(plan(srv.url, server_gpu="voodoo-9000"), job=job_file, use_calibration=False)
    assert no_job.result.prediction is not None
    assert no_job.result.prediction.unavailable == ("no prediction: pass --job SPEC.toml (the served inference "
                                                    "job) to check the simulator against it")
    assert no_gpu.result.prediction is not None and "server's GPU is not known" in str(
        no_gpu.result.prediction.unavailable)
    assert unknown.result.prediction is not None and "'voodoo-9000' is not a catalog GPU" in str(
        unknown.result.prediction.unavailable)
    assert "simulator: no prediction: pass --job" in screen_text(no_job)


def test_a_job_that_is_not_served_is_refused_before_any_request(fake_server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "train.toml"
    spec.write_text('kind = "finetune"\nmodel = "llama-3-8b"\n')
    with fake_server() as srv, pytest.raises(SpecError, match="finetune job"):
        api.load(plan(srv.url), job=spec, use_calibration=False)
    assert srv.seen == []


def test_the_search_is_simulated_up_to_the_measured_ceiling(fake_server: Server, job_file: Path) -> None:
    slo = Slo(ttft_p95_s=1.0)
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        report = api.load(plan(srv.url, concurrency=4, search=True, slo=slo, requests=8), job=job_file,
                          use_calibration=False)
    prediction = report.result.prediction
    assert prediction is not None and report.search is not None
    # An 8B model on an H100 holds 4 users far within a 1 s TTFT: the simulated search reaches the top.
    assert prediction.search_level == 4 and "nothing missed up to the top level" in prediction.search_note
    assert report.search.best_level == 4
    assert "simulated SLO search: 4 (measured 4, +0%)" in screen_text(report)


def test_the_calibration_in_force_reaches_the_prediction(fake_server: Server, job_file: Path,
                                                         tmp_path: Path) -> None:
    from datetime import date

    cal_path = tmp_path / "calibration.toml"
    entry = ServingEntry(gpu_sku=H100.sku, model="llama-3-8b", seconds={"request_overhead_s": 0.5}, points=2,
                         date=date(2026, 12, 1), source="sha256:cc")
    save_calibration(Calibration(serving=(entry,)), cal_path)
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        plain = api.load(plan(srv.url), job=job_file, use_calibration=False)
        fitted = api.load(plan(srv.url), job=job_file, calibration=cal_path)
    assert plain.result.prediction is not None and fitted.result.prediction is not None
    assert fitted.result.prediction.costs_source.startswith("calibrated from 1 load result")
    before, after = plain.result.prediction.levels[0], fitted.result.prediction.levels[0]
    assert before.ttft_p50_s is not None and after.ttft_p50_s is not None
    with calibrated(None):
        base = sim_config(InferenceJob.model_validate(json.loads(json.dumps(plain.result.prediction.job))),
                          load_llm_preset("llama-3-8b"), H100).costs.request_overhead_s
    # every request's TTFT carries the fitted request overhead in place of the estimate's
    assert after.ttft_p50_s - before.ttft_p50_s >= (0.5 - base) * 0.999


def test_an_old_result_without_a_prediction_reads_and_writes_as_before(tmp_path: Path, fake_server: Server) -> None:
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        report = api.load(plan(srv.url, server_gpu=None), use_calibration=False)
    old = report.result.model_copy(update={"prediction": None})
    path = tmp_path / "old.json"
    save_result(old, path)
    assert "prediction" not in json.loads(path.read_text())
    assert load_result(path) == old
    assert "simulator" not in screen_text(api.LoadReport(result=old))


def test_a_rate_and_a_trace_replay_are_simulated_as_sent(fake_server: Server, job_file: Path,
                                                         tmp_path: Path) -> None:
    """An open-loop level is simulated at its rate; a trace replay on the trace's own rows, on the replay's clock
    (send times divided by the speed-up): the prediction equals that simulation."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 64 + 8 * i, "output_length": 8,
                                         "hash_ids": [i]}) + "\n" for i in range(12)))
    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        rate = api.load(plan(srv.url, concurrency=None, rate=20.0, arrival="constant"), job=job_file,
                        use_calibration=False)
        replay = api.load(plan(srv.url, concurrency=None, trace=trace, speedup=2.0, requests=None), job=job_file,
                          use_calibration=False)
    job = InferenceJob.model_validate({"kind": "inference", "model": "llama-3-8b", "prompt_tokens": 128,
                                       "output_tokens": 16, "concurrency": 2})
    config = sim_config(job, load_llm_preset("llama-3-8b"), H100)
    assert rate.result.prediction is not None and replay.result.prediction is not None
    level = rate.result.prediction.levels[0]
    assert level.arrivals.startswith("constant 20 req/s, 12 requests")
    sim = simulate(config, Arrivals(kind="constant", rate_per_s=20.0, requests=12, prompt_tokens=128,
                                    output_tokens=16, seed=rate.result.fixed.seed))
    assert (level.ttft_p95_s, level.requests_per_s) == (sim.ttft_s.p95, sim.requests_per_s)
    level = replay.result.prediction.levels[0]
    assert level.arrivals.startswith("trace, 12 requests") and level.prompt_tokens == pytest.approx(64 + 8 * 5.5)
    rows = tuple((0.05 * i, 64 + 8 * i, 8) for i in range(12))  # 100 ms apart, replayed twice as fast
    sim = simulate(config, Arrivals(kind="trace", trace=rows, requests=12, prompt_tokens=108, output_tokens=8,
                                    seed=replay.result.fixed.seed))
    assert level.ttft_p50_s == pytest.approx(sim.ttft_s.p50, rel=1e-9)
    assert level.output_tokens_per_s == pytest.approx(sim.output_tokens_per_s, rel=1e-9)


def test_an_interrupted_run_says_it_was_not_predicted(fake_server: Server, job_file: Path) -> None:
    """Ctrl-C during the second level: what finished is kept, and no prediction is run while the user waits
    for the stop; the result says so."""
    from collections.abc import Iterator
    from contextlib import contextmanager

    levels: list[object] = []

    @contextmanager
    def progress(shape: object) -> Iterator[None]:
        levels.append(shape)
        if len(levels) == 2:
            raise KeyboardInterrupt
        yield None

    with fake_server(ttft_s=0.002, token_delay_s=0.001) as srv:
        report = api.load(plan(srv.url, concurrency=None, sweep=(1.0, 2.0)), job=job_file, use_calibration=False,
                          progress=progress)  # type: ignore[arg-type]
    assert report.interrupted and len(report.result.cases) == 1
    assert report.result.prediction is not None
    assert report.result.prediction.unavailable == "no prediction: the run was interrupted"
