"""The serving simulator against a real continuous-batching engine: `transformers serve` on CPU.

The test starts the engine on a tiny Llama (hf_engine.py: why this engine), measures it with `gpuscout
load` (the CLI, as a user runs it) at 1, 4, 8 and 16 users, each level run three times, interleaved,
fits the step costs on 1, 4 and 8 users only, from the figures `gpuscout calibrate` fits (TTFT and ITL
medians, output tokens/s), and simulates 16 users with the engine's own limits (its token budget of
256 a step: 16 prompts of 32 tokens take two steps, and every decode step carries 16 requests), one
run of the length `load` sent (its ramp and drain are in the measured throughput).

Why 1, 4 and 8: this engine's step grows with every sequence it streams, but less with each user
added (validation/serving_sim_engine.md: about 1 ms a sequence from 1 to 4 users, 0.3 ms from 4 to 16
on a quiet run). A linear per-sequence term fitted on 1 and 4 users put 16 users' throughput 21-33%
low in three independent measurements (one of them a CI run that failed here); fitted on 1, 4 and 8,
8-12% low. Fitted on 1 and 2, 54% high. The same holds for a user's `calibrate`: fit on loads that
reach at least half the concurrency you will ask about.

The prediction must lie within what the same run can tell: in log(predicted / measured), how well the
calibrated simulator reproduces that figure at 1, 4 and 8 users, plus twice how far the three runs at
16 users lie apart. Never a fixed tolerance: the machine is shared and its speed drifts.

The check can fail: the test also holds the no-queueing answer (16 users get the TTFT one user got,
what a single-request estimate says) to the same tolerance and requires it to miss. When the run is
too noisy for that to hold, the test skips and says so (an unusable measurement is not a pass).

Skips with the reason when the engine's packages are absent (the `serving` extra: `openai`, which
transformers' server imports, beside the `bench` extra's transformers and torch).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuscout.estimator.serving.calibrate import fit_step_costs, predict, predicted
from gpuscout.estimator.serving.model import EngineLimits
from gpuscout.results.serving_calibration import FIT_METRICS
from gpuscout.results.store import load_result

from .hf_engine import EngineSettings, missing_modules, run_load, start_engine, tail, write_tiny_model

pytestmark = pytest.mark.slow

_MISSING = missing_modules()
if _MISSING:
    pytest.skip(f"the real-engine check needs transformers serve's packages (missing: {', '.join(_MISSING)}); "
                "install the project's `serving` extra", allow_module_level=True)

PROMPT, OUTPUT, REQUESTS, RUNS = 32, 16, 30, 3
CHECKED = ("ttft_p95_s", "output_tokens_per_s")


def _log_spread(figures: list[float]) -> float:
    """ln(max / min) of one figure over the runs of a level: how far the same measurement moved."""
    return math.log(max(figures) / min(figures)) if min(figures) > 0 else math.inf


def test_simulator_predicts_queueing_on_a_real_engine(tmp_path: Path) -> None:
    settings = EngineSettings()
    limits = EngineLimits(max_num_seqs=settings.max_seqs, max_num_batched_tokens=settings.max_batch_tokens,
                          kv_blocks=settings.num_blocks, block_tokens=settings.block_size)
    model = write_tiny_model(tmp_path / "model", settings)
    log = tmp_path / "server.log"
    try:
        with start_engine(model, settings, log) as base:
            result = load_result(run_load(base, model, tmp_path / "load.json", levels="1,4,8,16", requests=REQUESTS,
                                          prompt_tokens=PROMPT, output_tokens=OUTPUT, runs=RUNS))
    except RuntimeError as e:
        pytest.fail(f"{e}\nserver log:\n{tail(log)}")

    from gpuscout.results.serving_observations import serving_observations
    from gpuscout.stats import percentile

    observed = {o.concurrency: o for o in serving_observations(result)}
    assert set(observed) == {1, 4, 8, 16}, [c.notes for c in result.cases]
    # The figures `gpuscout calibrate` fits (medians and throughput): the simulator has no step noise to
    # match a P95 with, and a fit that chases the tails bends the per-sequence slope.
    low = [observed[1], observed[4], observed[8]]
    fit = fit_step_costs(low, None, limits=limits, metrics=FIT_METRICS)
    high = observed[16]
    sim = predict(fit.costs, limits, high)  # one run as load sent it: the observation's requests and seed

    case = next(c for c in result.cases if c.name == "concurrency 16")
    metrics = {m.name: m for m in case.metrics}
    assert len(metrics["ttft_s"].runs) == RUNS
    ttft = metrics.get("ttft_from_intended_s") or metrics["ttft_s"]
    noise = {"ttft_p95_s": _log_spread([percentile(list(r.samples), 95) for r in ttft.runs]),
             "output_tokens_per_s": _log_spread([sum(r.samples) / len(r.samples)
                                                 for r in metrics["output_tokens_per_s"].runs])}
    # Errors and tolerances in log(predicted / measured), symmetric for over- and under-prediction. The
    # tolerance of a figure is how well the calibrated simulator reproduces that same figure on the levels
    # it was calibrated on (RMS of their log errors: the TTFT P95 is not fitted, and a simulator without
    # step-time noise runs it 20-30% low at every level of a quiet run, validation/serving_sim_engine.md),
    # plus twice the spread of the runs at 16 users. So the check asks whether the simulator predicts
    # 16 users as well as it reproduces 1, 4 and 8: the queueing it adds, not the tail it never models.
    calibrated = [(o, predict(fit.costs, limits, o)) for o in low]
    in_sample = {m: math.sqrt(sum(math.log(predicted(s, m) / o.measured(m)) ** 2 for o, s in calibrated) / len(low))
                 for m in CHECKED}
    tolerance = {m: in_sample[m] + 2 * noise[m] for m in CHECKED}
    error = {m: math.log(predicted(sim, m) / high.measured(m)) for m in CHECKED}
    report = [f"{m}: predicted {predicted(sim, m):.4g}, measured {high.measured(m):.4g}, log error {error[m]:+.2f}, "
              f"tolerance ±{tolerance[m]:.2f} (at 1, 4, 8 users {in_sample[m]:.2f}, run spread {noise[m]:.2f})"
              for m in CHECKED]
    # The control: what a single-request estimate says of 16 users (TTFT as one user alone saw it).
    control = math.log(observed[1].ttft_p95_s / high.ttft_p95_s)
    if abs(control) <= tolerance["ttft_p95_s"]:
        pytest.skip(f"too noisy to tell queueing from none: the no-queueing TTFT P95 has log error {control:+.2f}, "
                    f"inside the tolerance ±{tolerance['ttft_p95_s']:.2f}; " + "; ".join(report))
    # Shown with `pytest -s`: the numbers behind a pass.
    print("\n".join(report), f"\nno-queueing TTFT P95: log error {control:+.2f}")
    for m in CHECKED:
        assert abs(error[m]) <= tolerance[m], "\n".join(report)
