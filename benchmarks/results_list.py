"""`gpuscout results list` over a store of 1,000 results. Target: under 0.5 s.

Run: .venv/bin/python benchmarks/results_list.py [--runs 1000]

Fills a fresh store with `--runs` runs through the one write path (`record`): bench results of
three cases × three runs × 50 samples each with telemetry-sized fingerprints (~40 kB of JSON each),
a load sweep every tenth, a pick every twentieth, spread over 60 days. Then times, each in a fresh
process as a user runs it (median of 5): `results list` (the newest 50, the default),
`results list --limit 0` (all 1,000 rows drawn), `--json`, and a filtered `--kind load --since 30d`.
The time to record one run is printed too.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuscout.results.database import record

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def bench_payload(rng: random.Random, i: int) -> dict[str, Any]:
    def metric(name: str, unit: str) -> dict[str, Any]:
        runs = [[rng.lognormvariate(0, 0.05) for _ in range(50)] for _ in range(3)]
        flat = [v for r in runs for v in r]
        return {"name": name, "unit": unit, "value": sum(flat) / len(flat), "samples": flat,
                "runs": [{"samples": r} for r in runs]}

    cases = [{"name": f"case {k}", "params": {"concurrency": 2**k}, "metrics": [metric("step_s", "s"),
                                                                                 metric("tokens_per_s", "tokens/s")]}
             for k in range(3)]
    kind = "load" if i % 10 == 0 else "finetune"
    return {"schema_version": 2, "kind": kind, "name": f"run {i}", "cases": cases,
            "created_at": (NOW - timedelta(hours=1.44 * i)).isoformat(),
            "job": {"name": f"job {i % 7}"} | ({"url": "http://10.0.0.1:8000"} if kind == "load" else {}),
            "fingerprint": {"gpu_name": rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]),
                            "gpu_count": 1, "cpu_model": "EPYC", "gpuscout_version": "0.1.0",
                            "libraries": {f"lib{k}": "1.0" for k in range(40)}}}


def fill(store: Path, runs: int) -> float:
    rng = random.Random(0)
    start = time.perf_counter()
    for i in range(runs):
        if i % 20 == 5:
            record(store, "pick", {"job": {"name": f"job {i % 7}"}, "pick": {"rows": [
                {"offer_id": f"offer-{k}", "excluded": None} for k in range(200)]}}, now=NOW - timedelta(hours=i))
        else:
            payload = bench_payload(rng, i)
            record(store, "load" if payload["kind"] == "load" else "bench", payload, now=NOW)
    return (time.perf_counter() - start) / runs


def timed(store: Path, *args: str, command: tuple[str, ...] = ("results", "list")) -> float:
    env = os.environ | {"GPUSCOUT_STORE": str(store), "COLUMNS": "120"}
    times = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpuscout", *command, *args], env=env, check=True,
                       capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "results.sqlite"
        per_run = fill(store, args.runs)
        print(f"store: {args.runs:,} runs, {store.stat().st_size / 1e6:.1f} MB; recording one run: "
              f"{per_run * 1e3:.1f} ms")
        print(f"{'gpuscout --help (start-up alone)':>40}: {timed(store, '--help', command=()):.3f} s")
        for label, extra in (("results list", ()), ("results list --limit 0", ("--limit", "0")),
                             ("results list --json --limit 0", ("--json", "--limit", "0")),
                             ("results list --kind load --since 30d", ("--kind", "load", "--since", "30d"))):
            print(f"{label:>40}: {timed(store, *extra):.3f} s (target < 0.5 s)")


if __name__ == "__main__":
    main()
