"""The serving simulator held against a real continuous-batching engine on this machine's CPU.

Starts `transformers serve --continuous-batching` on a tiny random-weight Llama (tests/estimator/serving/
hf_engine.py: why this engine, how it is launched), measures it with `gpuscout load` at concurrencies and
Poisson rates (every level run `--runs` times, interleaved, so drifts of a shared machine spread over all
levels alike), fits the step costs on the low-concurrency levels only (estimator/serving/calibrate.py),
then simulates every level with the engine's own scheduler limits and prints predicted beside measured:
TTFT and ITL P50/P95 and output throughput, the error of each, and the noise (how far the runs of the
same level lie apart, relative), the yardstick an error is read against.

    PYTHONPATH=src python benchmarks/serving_sim_engine.py [--calibrate 1,4,8] [--levels 1,2,4,8,16]
        [--rates auto] [--requests 40] [--runs 2] [--prompt 64] [--output 16] [--json FILE]

Needs the `serving` extra (transformers serve's server imports `openai`). Minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "estimator" / "serving"))

from hf_engine import EngineSettings, missing_modules, run_load, start_engine, write_tiny_model  # noqa: E402

from gpuscout.estimator.serving.calibrate import (  # noqa: E402
    METRICS,
    ServingObservation,
    StepFit,
    fit_step_costs,
    predict,
    predicted,
)
from gpuscout.estimator.serving.model import EngineLimits  # noqa: E402
from gpuscout.results.schema import BenchResult  # noqa: E402
from gpuscout.results.serving_calibration import FIT_METRICS  # noqa: E402
from gpuscout.results.serving_observations import serving_observations  # noqa: E402
from gpuscout.results.store import load_result  # noqa: E402
from gpuscout.stats import percentile  # noqa: E402

SHORT = {"ttft_p50_s": "TTFT P50", "ttft_p95_s": "TTFT P95", "itl_p50_s": "ITL P50", "itl_p95_s": "ITL P95",
         "output_tokens_per_s": "tok/s"}


def limits_of(settings: EngineSettings) -> EngineLimits:
    """The engine's scheduler limits in the simulator's terms: the same numbers the server runs with."""
    return EngineLimits(max_num_seqs=settings.max_seqs, max_num_batched_tokens=settings.max_batch_tokens,
                        kv_blocks=settings.num_blocks, block_tokens=settings.block_size, chunked_prefill=True,
                        prefix_hit_rate=0.0)


def run_noise(result: BenchResult) -> dict[str, dict[str, float]]:
    """Per level and metric: the spread of the independent runs, (max − min) / mean of the runs' figures."""
    out: dict[str, dict[str, float]] = {}
    names = {"ttft_p50_s": ("ttft_from_intended_s", 50), "ttft_p95_s": ("ttft_from_intended_s", 95),
             "itl_p50_s": ("chunk_gap_s", 50), "itl_p95_s": ("chunk_gap_s", 95),
             "output_tokens_per_s": ("output_tokens_per_s", None)}
    for case in result.cases:
        metrics = {m.name: m for m in case.metrics}
        row: dict[str, float] = {}
        for key, (name, q) in names.items():
            m = metrics.get(name) or (metrics.get("ttft_s") if name.startswith("ttft") else None)
            if m is None or len(m.runs) < 2:
                continue
            figures = [percentile(list(r.samples), q) if q is not None else statistics.fmean(r.samples)
                       for r in m.runs if r.samples]
            if len(figures) >= 2 and statistics.fmean(figures) > 0:
                row[key] = (max(figures) - min(figures)) / statistics.fmean(figures)
        out[case.name] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", default="1,4,8",
                    help="concurrencies the step costs are fitted on (reach half the highest level: the engine's"
                         " per-sequence host cost is concave, validation/serving_sim_engine.md)")
    ap.add_argument("--levels", default="1,2,4,8,16", help="concurrencies measured (the calibration ones too)")
    ap.add_argument("--rates", default="auto", help="Poisson rates, req/s; auto: 40%% and 75%% of the "
                    "throughput measured at the highest concurrency; none: skip")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--output", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows and observations here")
    ap.add_argument("--from", dest="source", type=Path, default=None,
                    help="refit and predict from a --json file of an earlier run instead of measuring again")
    ap.add_argument("--fit-metrics", default=",".join(FIT_METRICS),
                    help=f"what the fit matches (of {', '.join(METRICS)})")
    args = ap.parse_args()
    settings = EngineSettings()
    limits = limits_of(settings)
    calibrate_on = tuple(float(x) for x in args.calibrate.split(","))
    started = time.monotonic()
    if args.source is not None:
        earlier = json.loads(args.source.read_text())
        observed = [ServingObservation.model_validate(o) for o in earlier["observations"]]
        noise = earlier.get("noise", {})
    else:
        missing = missing_modules()
        if missing:
            print(f"needs {', '.join(missing)}: install the project's `serving` extra", file=sys.stderr)
            return 2
        observed, noise = measure(settings, args)
        if args.json:  # the measurement first: minutes of it are not lost to a later failure
            args.json.write_text(json.dumps({"observations": [o.model_dump() for o in observed], "noise": noise},
                                            indent=1))
    calibration = [o for o in observed if o.kind == "concurrency" and float(o.concurrency or 0) in calibrate_on]
    fit = fit_step_costs(calibration, None, limits=limits, metrics=tuple(args.fit_metrics.split(",")))
    rows = []
    for o in observed:
        sim = predict(fit.costs, limits, o)  # one run as load sent it: its requests and seed
        level_noise = noise.get(o.source.rsplit(": ", 1)[-1], {})  # keyed by the load case's name
        for metric in METRICS:
            p, m = predicted(sim, metric), o.measured(metric)
            rows.append({"level": o.label, "calibration": o in calibration, "metric": metric, "predicted": p,
                         "measured": m, "error": p / m - 1, "noise": level_noise.get(metric)})
    report(rows, fit, settings, args, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "costs": fit.costs.model_dump(), "fit_rms": fit.rms_log_error,
                                         "observations": [o.model_dump() for o in observed], "noise": noise},
                                        indent=1))
    return 0


def measure(settings: EngineSettings, args: argparse.Namespace) -> tuple[list[ServingObservation],
                                                                         dict[str, dict[str, float]]]:
    """Start the engine, load it at every concurrency and rate; the observations and each level's run noise."""
    with tempfile.TemporaryDirectory(prefix="serving-sim-engine-") as tmp_name:
        tmp = Path(tmp_name)
        model = write_tiny_model(tmp / "model", settings)
        with start_engine(model, settings, tmp / "server.log") as base:
            closed = load_result(run_load(base, model, tmp / "closed.json", levels=args.levels,
                                          requests=args.requests, prompt_tokens=args.prompt,
                                          output_tokens=args.output, runs=args.runs))
            observed = list(serving_observations(closed))
            noise = run_noise(closed)
            if args.rates != "none":
                if args.rates == "auto":
                    top = max(observed, key=lambda o: o.concurrency or 0)
                    rates = f"{0.4 * top.requests_per_s:.2f},{0.75 * top.requests_per_s:.2f}"
                else:
                    rates = args.rates
                opened = load_result(run_load(base, model, tmp / "open.json", levels=rates, rate=True,
                                              requests=args.requests, prompt_tokens=args.prompt,
                                              output_tokens=args.output, runs=args.runs))
                observed += serving_observations(opened)
                noise |= run_noise(opened)
    return observed, noise


def report(rows: list[dict[str, Any]], fit: StepFit, settings: EngineSettings, args: argparse.Namespace,
           wall_s: float) -> None:
    c = fit.costs
    print("# serving simulator vs transformers serve (continuous batching, CPU) — "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    if args.source is not None:  # a refit: the machine, lengths and runs are those of the measurement file
        print(f"refit from {args.source} (its measurement, not a new one); wall {wall_s:.0f} s")
    else:
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}, python {platform.python_version()}; wall {wall_s:.0f} s")
    print(f"engine limits: max_requests_per_batch {settings.max_seqs}, max_batch_tokens {settings.max_batch_tokens}, "
          f"{settings.num_blocks} KV blocks of {settings.block_size} tokens; model hidden {settings.hidden}, "
          f"{settings.layers} layers"
          + ("" if args.source is not None else f"; prompt {args.prompt}, output {args.output} tokens; "
             f"{args.requests} requests x {args.runs} runs a level"))
    print(f"fitted on concurrency {args.calibrate} ({args.fit_metrics}): overhead {c.overhead_s * 1e3:.2f} ms, "
          f"weights {c.weights_s * 1e3:.2f} ms, compute {c.compute_s_per_token * 1e3:.3f} ms/token, "
          f"request overhead {c.request_overhead_s * 1e3:.2f} ms, per sequence a step {c.seq_s * 1e3:.2f} ms; "
          f"fit rms log error {fit.rms_log_error:.3f} ({fit.iterations} iterations)")
    print()
    print("| level | metric | predicted | measured | error | run noise |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        unit = 1.0 if r["metric"] == "output_tokens_per_s" else 1e3
        fmt = "{:.1f}" if unit == 1.0 else "{:.1f} ms"
        tag = " (cal.)" if r["calibration"] else ""
        noise_text = f"{r['noise']:.0%}" if r["noise"] is not None else "—"
        print(f"| {r['level']}{tag} | {SHORT[r['metric']]} | {fmt.format(r['predicted'] * unit)} | "
              f"{fmt.format(r['measured'] * unit)} | {r['error']:+.0%} | {noise_text} |")
    held = [r for r in rows if not r["calibration"] and r["metric"] in ("ttft_p95_s", "output_tokens_per_s")]
    within = sum(abs(r["error"]) <= 0.15 for r in held)
    print(f"\nheld-out P95 TTFT and throughput within 15%: {within} of {len(held)}")


if __name__ == "__main__":
    raise SystemExit(main())
