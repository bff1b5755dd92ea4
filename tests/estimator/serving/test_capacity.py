"""Goodput, SLO misses and the load one replica holds at an SLO, held against direct simulations."""

from __future__ import annotations

import pytest

from gpuscout.estimator.serving import (
    Arrivals,
    EngineLimits,
    SimConfig,
    StepCosts,
    goodput,
    max_concurrency_at_slo,
    max_rate_at_slo,
    saturated_rate,
    simulate,
    slo_misses,
)
from gpuscout.workload.job import Slo

COSTS = StepCosts(overhead_s=0.004, weights_s=0.015, kv_read_s_per_token=2e-7, compute_s_per_token=2e-5,
                  attention_s_per_pair=1e-10, request_overhead_s=0.01, source="test: round numbers")
CONFIG = SimConfig(costs=COSTS, limits=EngineLimits(max_num_seqs=16, max_num_batched_tokens=2048, kv_blocks=20_000))


def users(n: int, requests: int = 200) -> Arrivals:
    return Arrivals(kind="concurrency", concurrency=n, requests=max(requests, 5 * n), prompt_tokens=700,
                    output_tokens=100)


def test_slo_misses_name_each_p95_above_its_bound() -> None:
    result = simulate(CONFIG, users(32))
    ttft, tpot = result.ttft_s.p95, result.tpot_s.p95
    misses = slo_misses(result, Slo(ttft_p95_s=ttft / 2, tpot_p95_s=tpot * 2))
    assert misses == (f"P95 TTFT {ttft:.3g} s > {ttft / 2:.3g} s",)
    assert slo_misses(result, Slo(ttft_p95_s=ttft * 1.01, e2e_p95_s=result.e2e_s.p95 * 1.01)) == ()


def test_goodput_counts_requests_meeting_every_bound() -> None:
    result = simulate(CONFIG, users(32))
    assert goodput(result, Slo()) == pytest.approx(result.requests_per_s)
    median = result.ttft_s.p50
    share = sum(1 for ttft, _, _ in result.per_request if ttft <= median) / result.completed
    assert goodput(result, Slo(ttft_p95_s=median)) == pytest.approx(share * result.requests_per_s)
    assert goodput(result, Slo(ttft_p95_s=median, tpot_p95_s=1e-6)) == 0.0


def test_an_unstable_run_misses_its_slo_whatever_its_completed_requests_showed() -> None:
    held = saturated_rate(CONFIG, prompt_tokens=700, output_tokens=100)
    result = simulate(CONFIG, Arrivals(kind="poisson", rate_per_s=3 * held, requests=1500, prompt_tokens=700,
                                       output_tokens=100))
    misses = slo_misses(result, Slo(e2e_p95_s=1e6))
    assert len(misses) == 1 and misses[0].startswith("unstable: the queue grows without bound")


def test_max_concurrency_meets_the_slo_and_one_more_user_does_not() -> None:
    lone = simulate(CONFIG, users(1))
    slo = Slo(ttft_p95_s=lone.ttft_s.p95 * 8)
    capacity = max_concurrency_at_slo(CONFIG, slo, prompt_tokens=700, output_tokens=100, requests=200)
    held = capacity.concurrency
    assert held is not None and held >= 1
    assert capacity.result.ttft_s.p95 <= slo.ttft_p95_s
    assert capacity.binding and capacity.binding[0].startswith("P95 TTFT")
    assert slo_misses(simulate(CONFIG, users(held)), slo) == ()
    assert slo_misses(simulate(CONFIG, users(held + 1)), slo) != ()


def test_no_user_held_when_a_lone_request_misses() -> None:
    capacity = max_concurrency_at_slo(CONFIG, Slo(ttft_p95_s=1e-4), prompt_tokens=700, output_tokens=100)
    assert capacity.concurrency == 0 and capacity.binding[0].startswith("P95 TTFT")


def test_a_loose_slo_is_held_up_to_the_searched_top() -> None:
    capacity = max_concurrency_at_slo(CONFIG, Slo(e2e_p95_s=1e5), prompt_tokens=700, output_tokens=100,
                                      max_concurrency=40)
    assert capacity.concurrency == 40 and capacity.binding == () and capacity.searched_to == 40


def test_max_rate_meets_the_slo_and_a_higher_rate_does_not() -> None:
    lone = simulate(CONFIG, users(1))
    slo = Slo(ttft_p95_s=lone.ttft_s.p95 * 3)
    capacity = max_rate_at_slo(CONFIG, slo, prompt_tokens=700, output_tokens=100, requests=600)
    rate = capacity.rate_per_s
    assert rate is not None and rate > 0
    assert rate < saturated_rate(CONFIG, prompt_tokens=700, output_tokens=100)
    assert capacity.result.ttft_s.p95 <= slo.ttft_p95_s
    over = simulate(CONFIG, Arrivals(kind="poisson", rate_per_s=capacity.searched_to, requests=600, prompt_tokens=700,
                                     output_tokens=100))
    assert slo_misses(over, slo) != ()
    assert capacity.searched_to - rate <= 0.01 * capacity.searched_to
