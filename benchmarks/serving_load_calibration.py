"""Does calibrating from a load result pull the simulator's prediction toward the same server's measurement?

Run: PYTHONPATH=src .venv/bin/python benchmarks/serving_load_calibration.py
Starts the fake OpenAI server of the tests (tests/loadgen/fake_openai.py) with a fixed 50 ms to the first
token and 5 ms a token, loads it at 1, 2 and 4 users (40 requests each, 128-token prompts, 32-token
outputs) as Llama-3-8B served on an H100 (`gpuscout load --job … --server-gpu h100`), calibrates the
serving step costs from that result (`gpuscout calibrate`), loads it again with the calibration, and prints
the prediction's error per level and metric before and after, and the fitted entry.

The fake server is not a continuous-batching engine (its token gap does not grow with the batch): this shows
the wiring (docs/serving_sim.md, "Every load run checks the model"), not the simulator's accuracy.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

from gpuscout import api
from gpuscout.loadgen.plan import make_plan
from gpuscout.report.load_prediction import prediction_errors
from gpuscout.results.schema import BenchResult

JOB = 'kind = "inference"\nmodel = "llama-3-8b"\nprompt_tokens = 128\noutput_tokens = 32\n'
SHOWN = ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "output_tokens_per_s")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, serve_in_thread(FakeConfig(ttft_s=0.05, token_delay_s=0.005)) as srv:
        tmp = Path(folder)
        job, cal, measured = tmp / "job.toml", tmp / "calibration.toml", tmp / "load.json"
        job.write_text(JOB)

        def run(out: Path | None, **kw: object) -> BenchResult:
            plan = make_plan(url=srv.url, model="m", runs=1, sweep=(1.0, 2.0, 4.0), requests=40, output_tokens=32,
                             prompt_tokens=128, server_gpu="h100")
            return api.load(plan, output=out, job=job, **kw).result  # type: ignore[arg-type]

        before = run(measured, use_calibration=False)
        report = api.calibrate([measured], output=cal)
        after = run(None, calibration=cal)
    entry = report.serving[0]
    print(f"fitted on {entry.points} levels: factors {entry.factors}, seconds {entry.seconds}")
    print(f"residuals (RMS log simulated/measured): {({k: round(v, 3) for k, v in entry.residuals.items()})}")
    # Each prediction is held against its own run's measurement (the second run is measured afresh).
    print(f"{'level':15}{'metric':20}{'measured':>9}{'estimate':>9}{'error':>8}{'measured':>9}{'calibr.':>9}"
          f"{'error':>8}")
    rows = zip(prediction_errors(before), prediction_errors(after), strict=True)
    for first, second in rows:
        if first["metric"] not in SHOWN:
            continue
        print(f"{first['case']:15}{first['metric']:20}{first['measured']:9.4g}{first['predicted']:9.4g}"
              f"{first['error']:+8.1%}{second['measured']:9.4g}{second['predicted']:9.4g}{second['error']:+8.1%}")


if __name__ == "__main__":
    main()
