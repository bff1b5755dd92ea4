"""`gpuscout report` on the largest outputs we have: how long it takes and how big the page is.

Run: .venv/bin/python benchmarks/report_render.py [--requests 10000] [--rows 4000]

1. A load sweep of 8 concurrency levels totalling `--requests` requests of 128 output tokens, every
   raw sample kept as `gpuscout load -o` keeps it (TTFT, TPOT, e2e, chunk gaps …): the file size of
   a real 10,000-request test (docs/design.md §4.10 counts ~70 MB for 256 tokens).
2. `pick --json` over the synthetic SkyPilot catalog of benchmarks/pick_speed.py (`--rows` rows,
   6,666 offers at 4,000): every offer a point with its tooltip.
3. Both in one report, with the default job's estimate over every catalog GPU.

Each is `gpuscout report … -o` in a fresh process (wall time, as a user waits for it), with the
drawing time the command reports (`render_s`: after the files are read and checked) and the size
of the page. Median of 3 runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from pick_speed import synthetic_catalog  # noqa: E402

from gpuscout.results.schema import BenchResult, Case, Fingerprint, FixedVariables, Metric  # noqa: E402
from gpuscout.results.store import save_result  # noqa: E402
from gpuscout.stats import summarize  # noqa: E402

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
TOKENS = 128


def big_load(path: Path, requests: int) -> None:
    rng = random.Random(0)
    per = requests // len(LEVELS)
    cases = [_case(rng, level, per) for level in LEVELS]
    fixed = FixedVariables(kind="load", model="llama-3-8b-instruct", model_config_hash="ab" * 32, data="synthetic",
                           seed=0, precision="server-defined", device="remote", warmup=0, repeats=1,
                           settings={"arrival": "concurrency", "levels": ",".join(map(str, LEVELS))})
    fingerprint = Fingerprint(gpuscout_version="0.1.0", python="3.11", platform="Linux", cpu_model="EPYC",
                              cpu_cores=16, libraries={})
    save_result(BenchResult(kind="load", created_at="2026-11-30T00:00:00Z", name=f"sweep of {requests} requests",
                            job={"url": "http://10.0.0.1:8000", "model": "llama-3-8b-instruct"}, fixed=fixed,
                            fingerprint=fingerprint, cases=tuple(cases)), path)


def _case(rng: random.Random, level: int, n: int) -> Case:
    def m(name: str, values: list[float], unit: str = "s") -> Metric:
        return Metric(name=name, unit=unit, value=statistics.fmean(values), samples=tuple(values),
                      summary=summarize(values))

    ttft = [0.05 * (1 + level / 16) * rng.lognormvariate(0, 0.3) for _ in range(n)]
    tpot = [0.01 * (1 + level / 64) * rng.lognormvariate(0, 0.1) for _ in range(n)]
    gaps = [rng.lognormvariate(-4.5, 0.2) for _ in range(n * (TOKENS - 1))]
    served = level / (statistics.fmean(ttft) + TOKENS * statistics.fmean(tpot))
    e2e = [a + TOKENS * b for a, b in zip(ttft, tpot, strict=True)]
    metrics = (m("ttft_s", ttft), m("tpot_s", tpot), m("e2e_s", e2e),
               m("chunk_gap_s", gaps), m("send_lag_s", [rng.random() * 1e-3 for _ in range(n)]),
               Metric(name="output_tokens_per_s", unit="tokens/s", value=served * TOKENS, higher_is_better=True),
               Metric(name="requests_per_s", unit="requests/s", value=served, higher_is_better=True))
    return Case(name=f"concurrency {level}", params={"arrival": "concurrency", "concurrency": level}, metrics=metrics,
                notes=("valid",))


def timed_report(sources: list[Path], out: Path) -> tuple[float, float, int, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpuscout", "report", *map(str, sources), "-o", str(out), "--json"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - start
    info = json.loads(done.stdout)
    return wall, float(info["render_s"]), int(info["bytes"]), int(info["plots"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=4_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        load, catalog, pick, estimate = (folder / n for n in ("load.json", "vms.csv", "pick.json", "estimate.json"))
        big_load(load, args.requests)
        synthetic_catalog(catalog, args.rows)
        for cmd, target in ((["pick", "--offers", str(catalog), "--cloud", "aws", "--json", "--no-store"], pick),
                            (["estimate", "--json"], estimate)):
            target.write_text(subprocess.run([sys.executable, "-m", "gpuscout", *cmd], capture_output=True,
                                             text=True, check=True, cwd=ROOT).stdout)
        offers = len(json.loads(pick.read_text())["pick"]["rows"])
        print(f"inputs: load result {load.stat().st_size / 1e6:.1f} MB ({args.requests:,} requests), "
              f"pick --json {pick.stat().st_size / 1e6:.1f} MB ({offers:,} offers)")
        for name, sources in (("load sweep", [load]), ("pick", [pick]), ("all three", [estimate, pick, load])):
            runs = [timed_report(sources, folder / "r.html") for _ in range(3)]
            wall, render = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{name:>10}: {wall:5.2f} s wall ({render:.2f} s drawing), page {runs[0][2] / 1e6:.2f} MB, "
                  f"{runs[0][3]} plots")


if __name__ == "__main__":
    main()
