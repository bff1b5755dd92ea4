"""`pick` with plans: what changed for the example jobs, and how fast it ranks a big catalog.

Run: .venv/bin/python benchmarks/pick_speed.py [--before /tmp/pick-before/src] [--rows 4000]

1. For every example job spec (src/gpuscout/examples/*.toml), the default job and a plain bf16 LoRA
   of Llama-3-8B (91.6 GiB as written, past any single H100): `gpuscout pick JOB --json` on the
   bundled example sheet with this checkout, and — when `--before` names the `src` folder of an
   older checkout — with that one too (each in a fresh process). Prints how many offers each ranks,
   the offers ranked now that were excluded before (with their plans), and the cheapest total
   before and after.
2. Times `pick` (in-process, after imports) over a synthetic SkyPilot AWS `vms.csv` of `--rows`
   rows: eight GPU models × 1/2/4/8 GPUs × regions × zones, so many offers share an instance shape,
   as in a real catalog. Plans on and `as_written`, median of 3 runs each. Target: under 2 s.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "src" / "gpuscout" / "examples"
# (SkyPilot AcceleratorName, GPU memory MiB, on-demand $/GPU-h): plausible, not real prices.
GPUS = (("A100", 40960, 4.1), ("A100-80GB", 81920, 5.1), ("H100", 81920, 6.9), ("L40S", 46068, 2.3),
        ("L4", 23034, 0.8), ("A10G", 23028, 1.2), ("H200", 144384, 9.8), ("RTX4090", 24564, 0.9))


# A plain bf16 LoRA of Llama-3-8B, 91.6 GiB peak as written: it fits no single H100 as written, so pick
# plans changes for it (tests/cost/test_pick.py).
PLAIN_LORA = """kind = "finetune"
name = "plain bf16 LoRA, Llama-3-8B"
model = "llama-3-8b"
method = "lora"
micro_batch = 4
seq_len = 2048
grad_accum = 4
dataset_tokens = 50_000_000
"""


def run_pick(job: str | None, src: Path) -> dict[str, Any] | str:
    """`gpuscout pick JOB --json` in a fresh process importing gpuscout from `src`; the error if it fails."""
    env = os.environ | {"PYTHONPATH": str(src), "COLUMNS": "80"}
    cmd = [sys.executable, "-m", "gpuscout", "pick", *([job] if job else []), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[0] if done.stderr.strip() else f"exit {done.returncode}"
    result: dict[str, Any] = json.loads(done.stdout)["pick"]
    return result


def ranked(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["offer_id"]: r for r in result["rows"] if r["excluded"] is None}


def cheapest(result: dict[str, Any]) -> str:
    rows = list(ranked(result).values())
    if not rows:
        return "nothing ranked"
    best = min(rows, key=lambda r: r["total_usd"])
    return f"${best['total_usd']:,.2f} on {best['offer_id']}"


def plan_words(plan: list[dict[str, Any]]) -> str:
    return "; ".join(" ".join(f"{k}={v}" for k, v in step["spec_change"].items()) for step in plan) or "as written"


def compare_examples(before_src: Path | None, plain_lora: Path) -> None:
    jobs: list[str | None] = [None, str(plain_lora),
                              *sorted(str(p) for p in EXAMPLES.glob("*.toml") if p.name != "prices.example.toml")]
    for job in jobs:
        name = Path(job).name if job else "(default job)"
        after = run_pick(job, ROOT / "src")
        if isinstance(after, str):
            raise SystemExit(f"{name}: {after}")
        now = ranked(after)
        planned = sum(1 for r in now.values() if r["plan"])
        print(f"\n{name}: {len(now)} of {len(after['rows'])} offers ranked ({planned} under a plan); "
              f"cheapest {cheapest(after)}")
        if before_src is None:
            continue
        before = run_pick(job, before_src)
        if isinstance(before, str):
            print(f"  before: could not run ({before})")
            continue
        then = ranked(before)
        print(f"  before: {len(then)} ranked; cheapest {cheapest(before)}")
        for offer_id in [o for o in now if o not in then]:
            r = now[offer_id]
            print(f"  newly ranked #{list(now).index(offer_id) + 1}: {offer_id} ${r['total_usd']:,.2f} "
                  f"({r['runtime_s'] / 3600:.2f} h) with plan: {plan_words(r['plan'])}")
        for offer_id in [o for o in then if o not in now]:
            print(f"  no longer ranked: {offer_id}")


def synthetic_catalog(path: Path, rows: int) -> None:
    """A SkyPilot AWS vms.csv: the GPU models × counts repeated over regions and zones."""
    header = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo", "Price",
              "SpotPrice", "Region", "AvailabilityZone"]
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(header)
        i = 0
        while i < rows:
            region = f"region-{i // 128}"
            for name, mib, usd in GPUS:
                for count in (1, 2, 4, 8):
                    if i >= rows:
                        break
                    info = str({"Gpus": [{"Name": name, "Manufacturer": "NVIDIA", "Count": count,
                                          "MemoryInfo": {"SizeInMiB": mib}}], "TotalGpuMemoryInMiB": mib * count})
                    price = usd * count * (1 + (i % 7) / 100)
                    spot = f"{price * 0.4:.4f}" if i % 3 else ""
                    out.writerow([f"g{name.lower()}.{count}x.{i}", name, count, 12 * count, 96 * count, info,
                                  f"{price:.4f}", spot, region, f"{region}{'abcd'[i % 4]}"])
                    i += 1


def time_catalog(rows: int) -> None:
    from gpuscout import api
    from gpuscout.cost.pick import pick
    from gpuscout.hardware.price_sheet import load_offers
    from gpuscout.workload.jobs import default_job, resolve_job_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "aws" / "vms.csv"
        path.parent.mkdir()
        synthetic_catalog(path, rows)
        start = time.perf_counter()
        sheet, _ = load_offers(path, cloud="aws")
        load_s = time.perf_counter() - start
        shapes = len({(o.gpu, o.gpu_count) for o in sheet.offers})
        print(f"\nSynthetic SkyPilot catalog: {rows:,} rows -> {len(sheet.offers):,} offers "
              f"({shapes} instance shapes); read in {load_s:.2f} s")
        jobs = [("default job", default_job())] + [
            (p.name, api.load_job(p)) for p in sorted(EXAMPLES.glob("*.toml")) if p.name != "prices.example.toml"]
        for name, job in jobs:
            model = resolve_job_model(job, EXAMPLES)
            for as_written in (False, True):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    result = pick(job, model, sheet.offers, today=date.today(), as_written=as_written)
                    times.append(time.perf_counter() - start)
                n = sum(1 for r in result.rows if r.excluded is None)
                print(f"  {name:<28} {'as written' if as_written else 'with plans':<10} "
                      f"{statistics.median(times):6.2f} s (median of 3), {n:,} ranked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="src folder of the checkout to compare with")
    parser.add_argument("--rows", type=int, default=4000, help="rows of the synthetic SkyPilot catalog")
    parser.add_argument("--skip-examples", action="store_true")
    args = parser.parse_args()
    if not args.skip_examples:
        with tempfile.TemporaryDirectory() as tmp:
            plain_lora = Path(tmp) / "plain-bf16-lora.toml"
            plain_lora.write_text(PLAIN_LORA, encoding="utf-8")
            compare_examples(args.before, plain_lora)
    time_catalog(args.rows)


if __name__ == "__main__":
    main()
