"""Step costs fitted from load observations: recovered where the observations determine them, refused
where there is nothing to fit, and read from a real `load` result's layout."""

from __future__ import annotations

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.serving.calibrate import ServingObservation, fit_step_costs, predict, predicted
from gpuscout.estimator.serving.model import Arrivals, EngineLimits, SimConfig, StepCosts
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.loadgen.run import build_result
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import synthetic_workload
from gpuscout.results.schema import Case, Metric
from gpuscout.results.serving_observations import serving_observations
from gpuscout.stats import summarize

TRUTH = StepCosts(overhead_s=0.002, weights_s=0.02, kv_read_s_per_token=0.0, compute_s_per_token=0.003,
                  attention_s_per_pair=0.0, request_overhead_s=0.004, source="the engine under test")
LIMITS = EngineLimits(max_num_seqs=8, max_num_batched_tokens=256, kv_blocks=256, block_tokens=32)


def observe(costs: StepCosts, concurrency: int) -> ServingObservation:
    """What `load` would measure of an engine whose steps cost exactly `costs`."""
    arrivals = Arrivals(kind="concurrency", concurrency=concurrency, requests=300, prompt_tokens=64, output_tokens=16)
    r = simulate(SimConfig(costs=costs, limits=LIMITS), arrivals)
    return ServingObservation(kind="concurrency", concurrency=concurrency, requests=300, prompt_tokens=64,
                              output_tokens=16, ttft_p50_s=r.ttft_s.p50, ttft_p95_s=r.ttft_s.p95,
                              itl_p50_s=r.itl_s.p50, itl_p95_s=r.itl_s.p95,
                              output_tokens_per_s=r.output_tokens_per_s, requests_per_s=r.requests_per_s)


def test_fit_reproduces_the_observations_and_predicts_a_held_out_level() -> None:
    """Levels on both sides of the roofline's knee pin every fitted cost's effect: 1 user (a decode step
    reads the weights: 20 ms > 3 ms of compute) and 8 (8 × 3 ms of compute > 20 ms). The fit reproduces
    them and predicts 16 users (queueing for the 8 slots) as the true costs simulate it."""
    fit = fit_step_costs([observe(TRUTH, 1), observe(TRUTH, 8)], None, limits=LIMITS)
    assert fit.points == 2 and len(fit.residuals) == 10
    assert fit.rms_log_error < 0.01, fit.residuals
    held_out = observe(TRUTH, 16)
    sim = predict(fit.costs, LIMITS, held_out, requests=300)
    for metric in ("ttft_p95_s", "itl_p50_s", "output_tokens_per_s"):
        assert predicted(sim, metric) == pytest.approx(held_out.measured(metric), rel=0.05), metric
    assert fit.costs.source.startswith("calibrated from")


def test_a_prior_settles_what_the_observations_cannot_separate() -> None:
    """One user alone cannot tell the fixed step cost from the weights' read (both are constant per step):
    with the truth as prior, the fit keeps the split; the fit still matches the observation."""
    fit = fit_step_costs([observe(TRUTH, 1)], TRUTH, limits=LIMITS)
    assert fit.rms_log_error < 0.01
    assert fit.costs.overhead_s == pytest.approx(TRUTH.overhead_s, rel=0.2)
    assert fit.costs.weights_s == pytest.approx(TRUTH.weights_s, rel=0.2)
    assert fit.costs.kv_read_s_per_token == TRUTH.kv_read_s_per_token  # kept from the prior


def test_a_slower_engine_fits_slower_costs() -> None:
    slow = TRUTH.model_copy(update={"compute_s_per_token": 0.006, "weights_s": 0.04})
    fast_fit = fit_step_costs([observe(TRUTH, 1), observe(TRUTH, 8)], None, limits=LIMITS)
    slow_fit = fit_step_costs([observe(slow, 1), observe(slow, 8)], None, limits=LIMITS)
    assert slow_fit.costs.compute_s_per_token > 1.5 * fast_fit.costs.compute_s_per_token


def test_nothing_to_fit_is_refused_with_what_to_run() -> None:
    with pytest.raises(SpecError, match="--sweep 1,2"):
        fit_step_costs([], None, limits=LIMITS)
    with pytest.raises(SpecError, match="Unknown metric"):
        fit_step_costs([observe(TRUTH, 1)], None, limits=LIMITS, metrics=("ttft_p99_s",))


def _metric(name: str, samples: list[float]) -> Metric:
    return Metric(name=name, unit="s", value=sum(samples) / len(samples), samples=tuple(samples),
                  summary=summarize(samples))


def _case(concurrency: int, ttft: list[float], gaps: list[float], tokens_per_s: float) -> Case:
    metrics = (_metric("ttft_s", ttft), _metric("ttft_from_intended_s", [t + 0.001 for t in ttft]),
               _metric("chunk_gap_s", gaps),
               Metric(name="output_tokens_per_s", unit="tokens/s", value=tokens_per_s, higher_is_better=True),
               Metric(name="requests_per_s", unit="req/s", value=tokens_per_s / 16, higher_is_better=True))
    params = {"arrival": "concurrency", "concurrency": concurrency, "rate_rps": None, "requests": len(ttft)}
    return Case(name=f"concurrency {concurrency}", params=params, metrics=metrics)


def test_observations_from_a_load_result() -> None:
    workload = synthetic_workload(4, prompt_tokens=64, output_tokens=16, seed=0)
    cases = [_case(1, [0.05, 0.06, 0.07, 0.08], [0.02, 0.021, 0.03], 40.0),
             _case(2, [0.06, 0.07, 0.09, 0.12], [0.025, 0.03, 0.04], 70.0)]
    shapes = [LoadShape(kind="concurrency", concurrency=c, requests=4) for c in (1, 2)]
    result = build_result(url="http://127.0.0.1:1/v1/completions", model="tiny", workload=workload, workload_hash=None,
                          cases=cases, shapes=shapes, endpoint="completions", stream=True)
    obs = serving_observations(result)
    assert [o.label for o in obs] == ["concurrency 1", "concurrency 2"]
    first = obs[0]
    assert (first.prompt_tokens, first.output_tokens, first.requests) == (64, 16, 4)
    assert first.ttft_p50_s == pytest.approx(summarize([0.051, 0.061, 0.071, 0.081]).p50)  # from the intended send
    assert first.itl_p95_s == pytest.approx(summarize([0.02, 0.021, 0.03]).p95)
    assert first.output_tokens_per_s == 40.0
    assert [o.label for o in serving_observations(result, levels=(2.0,))] == ["concurrency 2"]
    with pytest.raises(SpecError, match="prompt_tokens"):
        serving_observations(result.model_copy(update={"fixed": result.fixed.model_copy(
            update={"settings": {**result.fixed.settings, "workload": "dataset"}})}))
