"""The serving simulator against a real continuous-batching engine: `transformers serve` on CPU.

The test starts the engine on a tiny Llama (hf_engine.py: why this engine), measures it with `gpuscout
load` (the CLI, as a user runs it) at 1, 2 and 16 users, each level run twice, interleaved, fits the
step costs on 1 and 2 users only, and simulates 16 users with the engine's own limits (its token budget
of 256 a step: 16 prompts of 32 tokens take two steps, and every decode step carries 16 requests). The
prediction must lie within the noise of the same run:
the fit's own residual plus three times how far the two runs of that level lie apart. Never a fixed
tolerance: the machine is shared and its speed drifts.

The check can fail: the test also holds the no-queueing answer (16 users get the TTFT one user got,
what a single-request estimate says) to the same tolerance and requires it to miss. When the run is
too noisy for that to hold, the test skips and says so (an unusable measurement is not a pass).

Skips with the reason when the engine's packages are absent (the `serving` extra: `openai`, which
transformers' server imports, beside the `bench` extra's transformers and torch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscout.estimator.serving.calibrate import fit_step_costs, predict, predicted
from gpuscout.estimator.serving.model import EngineLimits
from gpuscout.results.store import load_result

from .hf_engine import EngineSettings, missing_modules, run_load, start_engine, tail, write_tiny_model

pytestmark = pytest.mark.slow

_MISSING = missing_modules()
if _MISSING:
    pytest.skip(f"the real-engine check needs transformers serve's packages (missing: {', '.join(_MISSING)}); "
                "install the project's `serving` extra", allow_module_level=True)

PROMPT, OUTPUT, REQUESTS, RUNS = 32, 16, 20, 2
CHECKED = ("ttft_p95_s", "output_tokens_per_s")


def _spread(result_metric_runs: list[float]) -> float:
    mean = sum(result_metric_runs) / len(result_metric_runs)
    return (max(result_metric_runs) - min(result_metric_runs)) / mean if mean > 0 else 0.0


def test_simulator_predicts_queueing_on_a_real_engine(tmp_path: Path) -> None:
    settings = EngineSettings()
    limits = EngineLimits(max_num_seqs=settings.max_seqs, max_num_batched_tokens=settings.max_batch_tokens,
                          kv_blocks=settings.num_blocks, block_tokens=settings.block_size)
    model = write_tiny_model(tmp_path / "model", settings)
    log = tmp_path / "server.log"
    try:
        with start_engine(model, settings, log) as base:
            result = load_result(run_load(base, model, tmp_path / "load.json", levels="1,2,16", requests=REQUESTS,
                                          prompt_tokens=PROMPT, output_tokens=OUTPUT, runs=RUNS))
    except RuntimeError as e:
        pytest.fail(f"{e}\nserver log:\n{tail(log)}")

    from gpuscout.results.serving_observations import serving_observations
    from gpuscout.stats import percentile

    observed = {o.concurrency: o for o in serving_observations(result)}
    assert set(observed) == {1, 2, 16}, [c.notes for c in result.cases]
    fit = fit_step_costs([observed[1], observed[2]], None, limits=limits)
    high = observed[16]
    sim = predict(fit.costs, limits, high, requests=2000)

    case = next(c for c in result.cases if c.name == "concurrency 16")
    metrics = {m.name: m for m in case.metrics}
    assert len(metrics["ttft_s"].runs) == RUNS
    ttft = metrics.get("ttft_from_intended_s") or metrics["ttft_s"]
    noise = {"ttft_p95_s": _spread([percentile(list(r.samples), 95) for r in ttft.runs]),
             "output_tokens_per_s": _spread([sum(r.samples) / len(r.samples)
                                             for r in metrics["output_tokens_per_s"].runs])}
    report = []
    for metric in CHECKED:
        tolerance = fit.rms_log_error + 3 * noise[metric]
        error = predicted(sim, metric) / high.measured(metric) - 1
        report.append(f"{metric}: predicted {predicted(sim, metric):.4g}, measured {high.measured(metric):.4g}, "
                      f"error {error:+.0%}, tolerance ±{tolerance:.0%} (fit {fit.rms_log_error:.0%}, run spread "
                      f"{noise[metric]:.0%})")
    # The control: what a single-request estimate says of 16 users (TTFT as one user alone saw it).
    control_error = observed[1].ttft_p95_s / high.ttft_p95_s - 1
    ttft_tolerance = fit.rms_log_error + 3 * noise["ttft_p95_s"]
    if abs(control_error) <= ttft_tolerance:
        pytest.skip(f"too noisy to tell queueing from none: the no-queueing TTFT P95 misses by {control_error:+.0%}, "
                    f"inside the tolerance ±{ttft_tolerance:.0%}; " + "; ".join(report))
    print("\n".join(report))  # shown with `pytest -s`: the numbers behind a pass
    for metric in CHECKED:
        tolerance = fit.rms_log_error + 3 * noise[metric]
        assert abs(predicted(sim, metric) / high.measured(metric) - 1) <= tolerance, "\n".join(report)
