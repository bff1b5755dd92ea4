"""How often `compare` names a false winner between two identical benches, and which real slowdown it catches.

Runs PAIRS A/A comparisons: two `gpuscout bench` runs of the same tiny fine-tune on this machine,
one after the other, then `gpuscout compare --format json`; a verdict that names a winner between
identical runs is a false winner. Then, on the same pairs, side B's measured times are stretched
by a known factor (a real slowdown injected into real measurements: every time-like sample × f,
every throughput ÷ f) and it counts how often the slower side is correctly left behind.

    .venv/bin/python benchmarks/aa_compare.py --pairs 20 [--bench-args "--runs 3"] [--out DIR]
    .venv/bin/python benchmarks/aa_compare.py --reuse DIR     # judge the pairs in DIR again, no new benches

Prints the false-winner rate and, per factor, the detection rate. Works with any gpuscout on the
path (PYTHONPATH selects another checkout, to measure before and after a change).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny-finetune.toml"
FACTORS = (1.05, 1.10, 1.15, 1.25, 1.5)


def gpuscout(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=env,
                          check=False)


def bench(out: Path, extra: list[str]) -> Path:
    done = gpuscout("bench", str(EXAMPLE), "--device", "cpu", "-o", str(out), *extra)
    if done.returncode != 0:
        raise SystemExit(f"bench failed: {done.stderr[-2000:]}")
    return out


def winner(a: Path, b: Path) -> str | None:
    done = gpuscout("compare", str(a), str(b), "--format", "json")
    if done.returncode != 0:
        raise SystemExit(f"compare failed: {done.stderr[-2000:]}")
    verdict: str | None = json.loads(done.stdout)["verdict"]["winner"]
    return verdict


def slowed(path: Path, factor: float, out: Path) -> Path:
    """The result with every time stretched by `factor` and every throughput shrunk by it."""
    data = json.loads(path.read_text())
    for case in data["cases"]:
        for metric in case["metrics"]:
            scale = 1 / factor if metric.get("higher_is_better") else factor
            _scale_metric(metric, scale)
    out.write_text(json.dumps(data))
    return out


def _scale_metric(metric: dict[str, object], scale: float) -> None:
    """Scale a metric's value, samples, per-run samples and summaries (order statistics scale too)."""
    for key in ("value",):
        if isinstance(metric.get(key), (int, float)):
            metric[key] = metric[key] * scale  # type: ignore[operator]
    if isinstance(metric.get("samples"), list):
        metric["samples"] = [s * scale for s in metric["samples"]]  # type: ignore[union-attr]
    for summary in _summaries(metric):
        for key in ("mean", "p50", "p95", "p99", "ci95_low", "ci95_high", "min", "max", "std", "iqr"):
            if isinstance(summary.get(key), (int, float)):
                summary[key] = summary[key] * scale
    for run in metric.get("runs") or []:  # type: ignore[union-attr]
        run["samples"] = [s * scale for s in run["samples"]]


def _summaries(metric: dict[str, object]) -> list[dict[str, float]]:
    found = [metric["summary"]] if isinstance(metric.get("summary"), dict) else []
    found += [run["summary"] for run in metric.get("runs") or [] if isinstance(run, dict)]  # type: ignore[union-attr]
    return found  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--bench-args", default="", help="extra options for every bench, e.g. '--runs 3'")
    parser.add_argument("--out", type=Path, default=None, help="keep the results here")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="a folder of a0.json, b0.json … from an earlier run: compare them again (after a change "
                             "to compare), without benching")
    args = parser.parse_args()
    if args.reuse is not None:
        args.pairs = len(list(args.reuse.glob("a*.json")))
    folder = args.reuse or args.out or Path(tempfile.mkdtemp(prefix="aa-compare-"))
    folder.mkdir(parents=True, exist_ok=True)
    extra = shlex.split(args.bench_args)
    false_winners, detected = 0, dict.fromkeys(FACTORS, 0)
    start = time.perf_counter()
    for pair in range(args.pairs):
        if args.reuse is not None:
            a, b = folder / f"a{pair}.json", folder / f"b{pair}.json"
        else:
            a, b = bench(folder / f"a{pair}.json", extra), bench(folder / f"b{pair}.json", extra)
        false_winners += winner(a, b) is not None
        for factor in FACTORS:
            detected[factor] += winner(a, slowed(b, factor, folder / f"b{pair}-x{factor}.json")) == "A"
        print(f"pair {pair + 1}: false winners so far {false_winners}", file=sys.stderr)
    print(f"A/A pairs: {args.pairs}, bench options: {args.bench_args or '(defaults)'}"
          f"{' (results reused)' if args.reuse else ''}, "
          f"wall {time.perf_counter() - start:.0f} s, results in {folder}")
    print(f"false winners: {false_winners} / {args.pairs} ({false_winners / args.pairs:.0%})")
    for factor, hits in detected.items():
        print(f"side B {factor:.2f}x slower: A named the winner {hits} / {args.pairs} ({hits / args.pairs:.0%})")


if __name__ == "__main__":
    main()
