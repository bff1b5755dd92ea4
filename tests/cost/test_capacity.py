"""A load result's capacity at the SLO feeds `pick` for a serving job on that GPU (cost/capacity.py).

The load result is measured here, against the fake OpenAI server, so the capacity comes from real
records; pick then replaces the roofline on the GPU it was measured on, and only there.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

from gpuscout import api
from gpuscout.cost.capacity import capacity_from_result, replicas_and_instances
from gpuscout.errors import SpecError
from gpuscout.loadgen.plan import make_plan
from gpuscout.results.schema import BenchResult
from gpuscout.workload.job import InferenceJob, Slo

GPU = "h100-sxm5-80gb"


@pytest.fixture(scope="module")
def measured() -> BenchResult:
    """Concurrency 1 and 8 on a server whose TTFT grows with load (two requests at a time)."""
    with serve_in_thread(FakeConfig(ttft_s=0.02, token_delay_s=0.002, max_running=2)) as server:
        plan = make_plan(url=server.url, model="m", sweep=(1, 8), requests=24, output_tokens=8, prompt_tokens=16,
                         runs=1, api_key_env=None, server_gpu="H100 SXM", percentile=50)
        return api.load(plan).result


def job(slo: Slo) -> InferenceJob:
    return InferenceJob(kind="inference", model="llama-3.1-8b", prompt_tokens=16, output_tokens=8, requests=100_000,
                        slo=slo)


def rps(result: BenchResult, name: str) -> float:
    case = next(c for c in result.cases if c.name == name)
    return next(m.value for m in case.metrics if m.name == "requests_per_s")


def test_the_capacity_is_the_busiest_level_meeting_the_slo(measured: BenchResult) -> None:
    loose = capacity_from_result(measured, job(Slo(ttft_p95_s=10.0)))
    assert (loose.gpu, loose.gpus, loose.case) == (GPU, 1, "concurrency 8")
    assert loose.requests_per_s == pytest.approx(rps(measured, "concurrency 8"))
    tight = capacity_from_result(measured, job(Slo(ttft_p95_s=0.05)))  # 8 at once queue behind two slots
    assert tight.case == "concurrency 1" and tight.requests_per_s == pytest.approx(rps(measured, "concurrency 1"))
    none = capacity_from_result(measured, job(Slo(ttft_p95_s=0.001)))
    assert none.case is None and "ttft_from_intended_s" in (none.miss or "")


def test_pick_provisions_replicas_for_the_target_rate_from_the_measurement(measured: BenchResult,
                                                                            tmp_path: Path) -> None:
    path = tmp_path / "load.json"
    path.write_text(measured.model_dump_json())
    slo = Slo(ttft_p95_s=10.0)
    cap = capacity_from_result(measured, job(slo))
    target = 3.5 * cap.requests_per_s
    report = api.pick(job(slo), load_results=[path], target_rps=target, today=measured.created_at.date())
    rows = {r.offer_id: r for r in report.pick.rows}
    one, eight = rows["lambda-h100-sxm-1x"], rows["lambda-h100-sxm-8x"]
    assert one.bound == eight.bound == "measured"
    assert one.metrics["replicas"] == 4 and one.metrics["instances"] == 4  # ⌈3.5⌉ replicas, one GPU each
    assert eight.metrics["replicas"] == 8 and eight.metrics["instances"] == 1
    assert one.runtime_s == pytest.approx(100_000 / target)
    assert one.unit_costs_usd["usd_per_1m_output_tokens"] == pytest.approx(one.total_usd / (100_000 * 8) * 1e6)
    assert rows["lambda-a100-40gb-1x"].bound != "measured"  # other GPUs keep the estimate
    assert any("priced from" in w for w in report.pick.warnings)
    assert replicas_and_instances(cap, 8, None) == (8, 1, pytest.approx(8 * cap.requests_per_s))


def test_no_level_meeting_the_slo_excludes_that_gpu_with_the_reason(measured: BenchResult) -> None:
    report = api.pick(job(Slo(ttft_p95_s=0.001)), load_results=[measured], today=measured.created_at.date())
    row = next(r for r in report.pick.rows if r.offer_id == "lambda-h100-sxm-1x")
    assert row.excluded is not None and "measured by" in row.excluded and row.slo_met is False


def test_a_load_result_without_its_gpu_is_refused(measured: BenchResult) -> None:
    unnamed = measured.model_copy(update={"fingerprint": measured.fingerprint.model_copy(update={
        "gpu_name": None, "gpu_sku": None})})
    with pytest.raises(SpecError, match="names its server's GPU"):
        capacity_from_result(unnamed, job(Slo()))
    assert math.isfinite(rps(measured, "concurrency 1"))


def test_a_rate_without_a_result_is_provisioned_from_the_simulation(measured: BenchResult) -> None:
    """No load result: every offer's replicas for the rate come from the simulated replica."""
    report = api.pick(job(Slo(ttft_p95_s=1.0)), target_rps=50.0, today=measured.created_at.date())
    ranked = [r for r in report.pick.rows if r.excluded is None]
    assert ranked and all(r.slo_source == "simulated" for r in ranked)
    assert all(r.runtime_s == pytest.approx(100_000 / 50.0) for r in ranked)


def test_the_measured_capacity_wins_over_the_simulation_on_its_gpu(measured: BenchResult) -> None:
    report = api.pick(job(Slo(ttft_p95_s=10.0)), load_results=[measured], today=measured.created_at.date())
    rows = {r.offer_id: r for r in report.pick.rows}
    assert rows["lambda-h100-sxm-1x"].slo_source == "measured"
    assert rows["lambda-a100-40gb-1x"].slo_source == "simulated"
