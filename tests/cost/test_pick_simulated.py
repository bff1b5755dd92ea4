"""`pick` for a serving job: the SLO verdict, users held, replicas and runtime come from the simulator.

The example that motivated it: Llama-3.1-70B for 20 concurrent users with P95 TTFT under 1 s. A
lone request's TTFT is ~0.1 s, so the single-request estimate said "SLO met" on every offer that
holds the model; simulated at 20 users, prefills queue behind each other, and an instance of
8 × H100 (two TP-4 replicas, 10 users each) misses it.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from gpuscout.cost.pick import PickResult, pick
from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.simulated import SOURCE_ESTIMATE, SOURCE_SIMULATED
from gpuscout.estimator.efficiency import default_efficiency
from gpuscout.estimator.serving.from_speed import sim_config
from gpuscout.estimator.serving.model import Arrivals
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.estimator.speed.serve import estimate_inference_speed
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.report.pick import default_pick, explain_screen, pick_table
from gpuscout.workload.job import InferenceJob, Slo
from gpuscout.workload.presets import load_llm_preset

TODAY = date(2026, 11, 30)
LLAMA70 = load_llm_preset("llama-3.1-70b")
H100 = find_gpu("h100-sxm5-80gb")
EXAMPLE = Path(__file__).parent.parent.parent / "src" / "gpuscout" / "examples" / "prices.example.toml"
OFFER = "lambda-h100-sxm-8x"


def job(slo: Slo, **kw: object) -> InferenceJob:
    base: dict[str, object] = {"kind": "inference", "name": "70B, 20 users", "model": "llama-3.1-70b",
                               "prompt_tokens": 1024, "output_tokens": 256, "concurrency": 20, "requests": 10_000,
                               "slo": slo}
    return InferenceJob.model_validate(base | kw)


def ranked(served: InferenceJob, *ids: str, **kw: object) -> PickResult:
    offers = [o for o in load_price_sheet(EXAMPLE).offers if o.id in (ids or (OFFER,))]
    return pick(served, LLAMA70, offers, today=TODAY, **kw)  # type: ignore[arg-type]


def row_of(result: PickResult, offer_id: str = OFFER) -> PickRow:
    return next(r for r in result.rows if r.offer_id == offer_id)


def test_the_lone_request_meets_the_slo_that_twenty_users_miss_on_one_instance() -> None:
    served = job(Slo(ttft_p95_s=1.0))
    lone = estimate_inference_speed(served.model_copy(update={"tensor_parallel": 4}), LLAMA70, H100, gpus=4,
                                    efficiency=None)
    assert lone.metrics["ttft_s"] * lone.efficiency.band_high < 0.2  # what the old verdict was drawn from
    slow = sim_config(served.model_copy(update={"tensor_parallel": 4}), LLAMA70, H100, slow_end=True)
    at_ten = simulate(slow, Arrivals(kind="concurrency", concurrency=10, requests=400, prompt_tokens=1024,
                                     output_tokens=256))
    assert at_ten.ttft_s.p95 > 1.0  # ten users a replica queue their prefills
    row = row_of(ranked(served))
    assert row.slo_source == SOURCE_SIMULATED and row.excluded is None and row.slo_met
    held = row.metrics["users_held_per_replica"]
    assert 1 <= held < 10
    # one instance holds 2 replicas × `held` users, fewer than 20: priced as as many instances as it takes
    assert row.metrics["instances"] == -(-20 // (2 * held))
    assert row.slo_note is not None and "one instance alone misses" in row.slo_note
    assert row.metrics["ttft_p95_s_slow_end"] <= 1.0


def test_a_loose_slo_is_met_on_one_instance_and_the_runtime_is_the_simulated_throughput() -> None:
    row = row_of(ranked(job(Slo(ttft_p95_s=10.0))))
    assert row.slo_met and row.metrics["instances"] == 1 and row.metrics["users_held_per_replica"] >= 10
    assert row.slo_note is None
    assert row.runtime_s == pytest.approx(10_000 / row.metrics["requests_per_s"])
    assert row.runtime_low_s is not None and row.runtime_high_s is not None
    assert row.runtime_low_s < row.runtime_s < row.runtime_high_s
    assert row.unit_costs_usd["usd_per_1m_output_tokens"] == pytest.approx(row.total_usd / (10_000 * 256) * 1e6)


def test_an_slo_no_replica_meets_excludes_the_offer_saying_so() -> None:
    row = row_of(ranked(job(Slo(ttft_p95_s=0.05))))  # a lone prefill alone takes ~0.1 s
    assert row.excluded is not None and row.slo_met is False
    assert "simulated, the band's slow end" in row.excluded and "even for one user" in row.excluded


def test_a_target_rate_provisions_replicas_from_the_simulated_rate_held() -> None:
    served = job(Slo(ttft_p95_s=1.0))
    row = row_of(ranked(served, target_rps=20.0))
    held = row.metrics["requests_per_s_held_per_replica"]
    assert held > 0 and row.metrics["replicas_needed"] == -(-20.0 // held)
    assert row.metrics["instances"] == -(-row.metrics["replicas_needed"] // 2)
    assert row.runtime_s == pytest.approx(10_000 / 20.0)
    assert row.cost is not None  # one instance's bill, in the offer's USD; the row pays for every instance
    assert row.total_usd == pytest.approx(row.cost.total * row.metrics["instances"], rel=1e-9)
    assert row_of(ranked(served, target_rps=held / 2)).metrics["instances"] == 1


def test_where_the_simulator_cannot_run_the_single_request_estimate_says_so() -> None:
    row = row_of(ranked(job(Slo(ttft_p95_s=10.0), engine="hf")))
    assert row.slo_source == SOURCE_ESTIMATE and "users_held_per_replica" not in row.metrics


def test_the_screens_say_where_the_verdict_came_from() -> None:
    from rich.console import Console

    result = ranked(job(Slo(ttft_p95_s=1.0)))
    console = Console(width=80, record=True)
    console.print(default_pick(result))
    text = console.export_text()
    assert "simulated at the job's load (queueing counted)" in " ".join(text.split())
    assert "(2 instances, each:)" in text
    assert "× 2 instances (" in text and "users a replica)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    console.print(explain_screen(result, OFFER))
    assert "SLO verdict: simulated" in console.export_text()
    wide = Console(width=160, record=True)
    wide.print(pick_table(result, wide=True))
    table = " ".join(wide.export_text().split())
    assert "SLO met (simulated)" in table and "simulated at the job's load (queueing counted)" in table


def test_the_slow_end_is_what_the_verdict_is_judged_at() -> None:
    """Held users at the slow end are never more than at the expected costs (the band errs toward GPUs)."""
    from gpuscout.estimator.serving.replica import replica_capacity

    cap = replica_capacity(job(Slo(ttft_p95_s=1.0), tensor_parallel=4), LLAMA70, H100)
    assert cap.users_held_slow is not None and cap.users_held is not None
    assert cap.users_held_slow <= cap.users_held
    assert default_efficiency(H100, "prefill").band_high > 1
