"""How long does `gpuscout doctor` take? Targets: --quick within 60 s, the default within 5 minutes on 8 GPUs.

Run: .venv/bin/python benchmarks/doctor_time.py [--device cpu|cuda] [--nproc N] [--repeats 3]
Runs `gpuscout doctor --quick` and the default `gpuscout doctor` `--repeats` times each (the quick
one first), prints each run's wall time, verdict and the time of each worker phase, and the median.
Wall times depend on whatever else runs on the machine: say so when reporting them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(device: str, nproc: int | None, quick: bool) -> tuple[float, str, list[tuple[str, float]]]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "doctor.json"
        cmd = [sys.executable, "-m", "gpuscout", "doctor", "--device", device, "-o", str(out), "--dir", folder]
        cmd += ["--nproc", str(nproc)] if nproc else []
        cmd += ["--quick"] if quick else []
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        result = json.loads(out.read_text())
    cases = [(c["name"], c["wall_s"]) for c in result["cases"]]
    return wall, result["doctor"]["outcome"], cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for quick in (True, False):
        label = "doctor --quick" if quick else "doctor (default)"
        walls = []
        for i in range(args.repeats):
            wall, outcome, cases = run(args.device, args.nproc, quick)
            walls.append(wall)
            slowest = ", ".join(f"{n} {s:.1f} s" for n, s in sorted(cases, key=lambda c: -c[1])[:3])
            print(f"{label:18s} run {i + 1}: {wall:6.1f} s  verdict {outcome:12s} slowest cases: {slowest}")
        print(f"{label:18s} median {statistics.median(walls):6.1f} s  max {max(walls):6.1f} s")


if __name__ == "__main__":
    main()
