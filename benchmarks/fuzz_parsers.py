"""A long fuzz run of every user-file parser: crashes, hangs and silent nonsense, counted per parser.

Run: .venv/bin/python benchmarks/fuzz_parsers.py [--inputs 10000] [--seed 0] [--workers 2] [--only job,...]

Besides the parsers of job specs, price sheets, catalogs, configs, checkpoints, results and datasets,
the surfaces added with load, report, the store and calibrate are fuzzed as their commands use them
(`tests/fuzz/targets.py`): /metrics pages through a level's summary into a stored load result
(`metrics_body`), Mooncake traces and ShareGPT files into workloads (`trace_jsonl`, `sharegpt_json`),
any result file into `report`'s page (`report_doc`) and pairs into `compare` (`compare_pair`), a
hand-edited or damaged results store into `results list` and `show` (`store_file`), bench results
into `calibrate` (`calibrate_inputs`), and co-served and video jobs into `estimate`
(`coserved_job`, `video_job`). `--only` picks any of them.

The inputs are the ones the hypothesis suite draws (`tests/fuzz/corpus.py`): valid documents with
hostile values, byte-mutated documents, raw bytes and special files (FIFO, folder, /dev/zero, a
device node, sparse files past the size caps), plus every kind of `-o` path for `write_atomic`.
Input i of a parser is drawn from `random.Random(f"{seed}-{parser}-{i}")`, so any line of the
table can be replayed with `--replay PARSER:I`.

Each worker is a subprocess with its address space capped (`--memory-gib`), working in a temporary
folder. One input may take `--hang-s` seconds (a SIGALRM interrupts it, a blocking open included);
a worker silent for three times that is killed and the input counted as a hang (or skipped, and
counted apart, when it was the input generator rather than the parser that stalled). Outcomes:

  parsed    a sane object (tests/fuzz/invariants.py: finite, in range, printable)
  error     a GpuscoutError with a printable what / why / fix
  crash     any other exception (a traceback for the user), or a worker that died
  hang      past the time bound
  nonsense  parsed but an invariant fails (NaN, inf, negative sizes, a FIFO read as a file …),
            or an error that cannot be printed or echoes an outside file
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzz.corpus import PARSERS, SURFACES, generate  # noqa: E402
from fuzz.outputs import judge_output, random_kind  # noqa: E402
from fuzz.targets import SLOWER_S, Verdict, judge  # noqa: E402

ALL = (*PARSERS, "output_path", *SURFACES)
OUTCOMES = ("parsed", "error", "crash", "hang", "nonsense")


def one(parser: str, seed: int, index: int, folder: Path, hang_s: float, started: object = None) -> Verdict:
    rng = random.Random(f"{seed}-{parser}-{index}")
    if parser == "output_path":
        kind = random_kind(rng)
        _announce(started, index)
        return judge_output(kind, folder, hang_s=hang_s)
    case = generate(parser, rng)
    _announce(started, index)
    return judge(case, folder, hang_s=hang_s)


def _announce(started: object, index: int) -> None:
    """Tell the parent the input is generated: silence from here on is the parser's."""
    if started is not None:
        sys.stdout.write(json.dumps({"i": index, "phase": "judge"}) + "\n")
        sys.stdout.flush()


def worker(parser: str, seed: int, start: int, stop: int, hang_s: float, memory_gib: float) -> None:
    """Judge inputs start..stop-1, one JSON line each on stdout."""
    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-") as tmp:
        os.chdir(tmp)  # an empty or "." output path must not land in the repository
        for index in range(start, stop):
            folder = Path(tmp) / f"case{index}"
            folder.mkdir()
            verdict = one(parser, seed, index, folder, hang_s, started=True)
            _remove(folder)
            line = {"i": index, "outcome": verdict.outcome, "detail": verdict.detail, "s": round(verdict.seconds, 4)}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()


def _traceback(parser: str, seed: int, index: int) -> None:
    """The crash of one input again, with its traceback (what a user would see)."""
    import traceback

    from fuzz.corpus import lay_out
    from fuzz.targets import TARGETS

    case = generate(parser, random.Random(f"{seed}-{parser}-{index}"))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            TARGETS[parser](lay_out(case, Path(tmp)), case)
        except Exception:
            traceback.print_exc(limit=-6)


def _remove(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


def run_range(parser: str, seed: int, start: int, stop: int, hang_s: float,
              memory_gib: float) -> list[dict[str, object]]:
    """Drive workers over start..stop-1, restarting past an input that killed or froze one."""
    lines: list[dict[str, object]] = []
    nxt, judging = start, -1
    while nxt < stop:
        cmd = [sys.executable, __file__, "--worker", parser, "--seed", str(seed), "--start", str(nxt),
               "--stop", str(stop), "--hang-s", str(hang_s), "--memory-gib", str(memory_gib)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        fd, buf = proc.stdout.fileno(), b""
        while True:
            silent_s = max(hang_s, SLOWER_S.get(parser, 0.0)) * 3
            ready, _, _ = select.select([fd], [], [], silent_s)
            if not ready:
                proc.kill()
                proc.wait()
                # Silent while generating is the generator's fault: that input is skipped, not counted.
                outcome = "hang" if judging == nxt else "skipped"
                lines.append({"i": nxt, "outcome": outcome, "detail": "worker silent; killed", "s": silent_s})
                nxt += 1
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                rc = proc.wait()
                if nxt < stop:
                    lines.append({"i": nxt, "outcome": "crash", "detail": f"worker died (rc {rc})", "s": 0})
                    nxt += 1
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                line = json.loads(raw)
                if line.get("phase") == "judge":
                    judging = int(line["i"])
                    continue
                lines.append(line)
                nxt = int(line["i"]) + 1
    return lines


def run_parser(parser: str, args: argparse.Namespace) -> dict[str, object]:
    bounds = [args.inputs * k // args.workers for k in range(args.workers + 1)]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        parts = pool.map(lambda k: run_range(parser, args.seed, bounds[k], bounds[k + 1], args.hang_s,
                                             args.memory_gib), range(args.workers))
        lines = [line for part in parts for line in part]
    counts = Counter(str(line["outcome"]) for line in lines)
    lines = [line for line in lines if line["outcome"] != "skipped"]
    examples: dict[str, list[str]] = {}
    for line in lines:
        if line["outcome"] in ("crash", "hang", "nonsense"):
            shown = examples.setdefault(str(line["outcome"]), [])
            detail = f"#{line['i']}: {line['detail']}"
            if len(shown) < 6 and not any(str(line["detail"])[:40] in s for s in shown):
                shown.append(detail)
    return {"parser": parser, "inputs": len(lines), "skipped": counts.get("skipped", 0),
            **{o: counts.get(o, 0) for o in OUTCOMES},
            "slowest_s": max((float(line["s"]) for line in lines), default=0.0),
            "wall_s": round(time.perf_counter() - start, 1), "examples": examples}


def print_table(rows: list[dict[str, object]]) -> None:
    head = f"{'parser':14s} {'inputs':>7s} {'parsed':>7s} {'errors':>7s} {'crashes':>8s} {'hangs':>6s} " \
           f"{'nonsense':>9s} {'slowest s':>10s} {'wall s':>7s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['parser']!s:14s} {r['inputs']:>7} {r['parsed']:>7} {r['error']:>7} {r['crash']:>8} {r['hang']:>6} "
              f"{r['nonsense']:>9} {float(r['slowest_s']):>10.2f} {r['wall_s']:>7}")  # type: ignore[arg-type]
    for r in rows:
        for outcome, shown in r["examples"].items():  # type: ignore[attr-defined]
            print(f"\n{r['parser']} {outcome}:")
            for line in shown:
                print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=10_000, help="inputs per parser")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hang-s", type=float, default=5.0, help="time bound for one input")
    parser.add_argument("--memory-gib", type=float, default=3.0, help="address-space cap per worker")
    parser.add_argument("--only", default="", help="comma-separated parsers (default: all)")
    parser.add_argument("--json-out", type=Path, help="also write the counts as JSON here")
    parser.add_argument("--replay", help="PARSER:INDEX: judge one input here and print its verdict")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.seed, args.start, args.stop, args.hang_s, args.memory_gib)
        return
    if args.replay:
        name, index = args.replay.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            verdict = one(name, args.seed, int(index), Path(tmp), args.hang_s)
            print(verdict)
        if verdict.outcome == "crash" and name != "output_path":
            _traceback(name, args.seed, int(index))
        return
    chosen = [p for p in ALL if not args.only or p in args.only.split(",")]
    rows = []
    for name in chosen:
        rows.append(run_parser(name, args))
        print(f"{name}: done in {rows[-1]['wall_s']} s", file=sys.stderr)
    print_table(rows)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
