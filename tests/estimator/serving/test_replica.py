"""`estimate` for serving: what one replica holds, simulated (estimator/serving/replica.py, api.estimate)."""

from __future__ import annotations

from rich.console import Console

from gpuscout import api
from gpuscout.estimator.serving.from_speed import sim_config
from gpuscout.estimator.serving.model import Arrivals
from gpuscout.estimator.serving.replica import ReplicaCapacity, replica_capacity
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.hardware.catalog import find_gpu
from gpuscout.report.estimate import estimate_screen
from gpuscout.workload.job import InferenceJob, Slo
from gpuscout.workload.presets import load_llm_preset

LLAMA8 = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100-sxm5-80gb")
NO_SLO = Slo()


def job(slo: Slo = NO_SLO, **kw: object) -> InferenceJob:
    base: dict[str, object] = {"kind": "inference", "model": "llama-3-8b", "prompt_tokens": 1024,
                               "output_tokens": 128, "concurrency": 8, "slo": slo}
    return InferenceJob.model_validate(base | kw)


def test_users_held_meet_the_slo_and_one_more_misses_at_the_slow_end() -> None:
    served = job(Slo(ttft_p95_s=0.5))
    cap = replica_capacity(served, LLAMA8, H100)
    assert cap.users_held is not None and cap.users_held_slow is not None
    assert 1 <= cap.users_held_slow <= cap.users_held
    slow = sim_config(served, LLAMA8, H100, slow_end=True)

    def ttft_p95(users: int) -> float:
        return simulate(slow, Arrivals(kind="concurrency", concurrency=users, requests=2000, prompt_tokens=1024,
                                       output_tokens=128)).ttft_s.p95

    assert ttft_p95(cap.users_held_slow) <= 0.5 < ttft_p95(cap.users_held_slow + 1)


def test_without_an_slo_the_capacity_is_the_saturated_throughput() -> None:
    cap = replica_capacity(job(), LLAMA8, H100)
    assert cap.users_held is None and cap.saturated_users is not None and cap.saturated_users > 8
    assert cap.output_tokens_per_s > cap.output_tokens_per_s_slow > 0
    one_user = simulate(sim_config(job(), LLAMA8, H100), Arrivals(kind="concurrency", concurrency=1, requests=50,
                                                                   prompt_tokens=1024, output_tokens=128))
    assert cap.output_tokens_per_s > 5 * one_user.output_tokens_per_s  # a full batch, not one stream


def test_estimate_shows_the_capacity_line_per_named_gpu() -> None:
    report = api.estimate(job(Slo(ttft_p95_s=0.5)), gpus=["h100-sxm5-80gb"])
    (sku, cap), = report.capacities
    assert sku == "h100-sxm5-80gb" and isinstance(cap, ReplicaCapacity)
    console = Console(width=80, record=True)
    console.print(estimate_screen(report.screening, detailed=True, capacities=report.capacities))
    text = " ".join(console.export_text().split())
    assert f"Capacity at the SLO (simulated, one h100-sxm5-80gb): {cap.users_held_slow} users at the band's slow end" \
        in text
    hf = api.estimate(job(Slo(ttft_p95_s=0.5), engine="hf"), gpus=["h100-sxm5-80gb"])
    assert isinstance(hf.capacities[0][1], str) and "static batches" in hf.capacities[0][1]
    assert api.estimate(job(), gpus=()).capacities == ()  # the screening of every GPU is not simulated
