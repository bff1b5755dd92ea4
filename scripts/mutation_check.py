"""Check that the test suite catches wrong output: apply one-line mutations, expect a failing test.

Each mutation changes one line of a view or of the ranking logic in a way that produces plausible
but wrong output (swapped columns, an inverted verdict, a dropped mark, a check removed). The
tests named beside it must fail with the mutation in place; the file is restored afterwards,
whatever happens. Run from the repository root:

    .venv/bin/python scripts/mutation_check.py            # all mutations
    .venv/bin/python scripts/mutation_check.py --list     # what they are

Exit status 0 when every mutation was caught, 1 when one survived (or no longer applies).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "gpuscout"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: Path
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation("estimate: usable and peak columns swapped", SRC / "report" / "estimate.py",
             "gib_number(v.breakdown.usable_bytes), gib_number(v.breakdown.peak_bytes)",
             "gib_number(v.breakdown.peak_bytes), gib_number(v.breakdown.usable_bytes)",
             ("tests/report",)),
    Mutation("estimate: fits mark inverted", SRC / "report" / "estimate.py",
             'Text("yes", style="bold green") if v.fits else Text("no", style="bold red")',
             'Text("yes", style="bold green") if not v.fits else Text("no", style="bold red")',
             ("tests/report",)),
    Mutation("pick: Pareto star dropped", SRC / "report" / "pick.py",
             "{'★ ' if row.pareto else ''}", "{''}", ("tests/report",)),
    Mutation("load: P50 and P95 swapped", SRC / "report" / "load.py",
             'LATENCIES = (("ttft_s", "p50", "TTFT\\nP50"), ("ttft_s", "p95", "TTFT\\nP95")',
             'LATENCIES = (("ttft_s", "p95", "TTFT\\nP50"), ("ttft_s", "p50", "TTFT\\nP95")',
             ("tests/report",)),
    Mutation("pick: SLO judged at the mean, not the band's slow end", SRC / "cost" / "pick.py",
             "speed.metrics[k] * speed.efficiency.band_high * slowdown if", "speed.metrics[k] * slowdown if",
             ("tests/cost/test_pick.py",)),
    Mutation("pick: replicas no longer shorten the runtime", SRC / "cost" / "pick.py",
             "runtime, low, high = (s / placement.replicas for s in",
             "runtime, low, high = (s for s in", ("tests/cost/test_pick.py",)),
    Mutation("pick: replicas no longer scale throughput", SRC / "cost" / "pick.py",
             "value * placement.replicas if key in THROUGHPUTS else value", "value",
             ("tests/cost/test_pick.py",)),
    Mutation("layer rule: the estimator imports the bench", SRC / "estimator" / "speed.py",
             "from __future__ import annotations\n",
             "from __future__ import annotations\n\nimport gpuscout.measure.bench  # noqa: F401\n",
             ("tests/test_layers.py",)),
)


def run(mutation: Mutation) -> tuple[bool, str]:
    """(caught, how): apply, run the tests, restore."""
    original = mutation.path.read_text(encoding="utf-8")
    if original.count(mutation.old) != 1:
        return False, "no longer applies (the line changed): update the mutation"
    try:
        mutation.path.write_text(original.replace(mutation.old, mutation.new), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               *mutation.tests], cwd=ROOT, capture_output=True, text=True)
    finally:
        mutation.path.write_text(original, encoding="utf-8")
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return done.returncode != 0, (failed[0].removeprefix("FAILED ") if failed else done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args()
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.path.relative_to(ROOT)} ({', '.join(m.tests)})")
        return 0
    survived = 0
    for m in MUTATIONS:
        start = time.perf_counter()
        caught, how = run(m)
        survived += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'} {m.name} ({time.perf_counter() - start:.0f} s): {how}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
