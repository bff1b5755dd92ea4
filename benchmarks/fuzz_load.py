"""`gpuscout load` against a server that misbehaves in every way we could think of: crashes, hangs, nonsense.

Run: .venv/bin/python benchmarks/fuzz_load.py [--runs 1000] [--seed 0] [--workers 2] [--only FAMILY,...]
     .venv/bin/python benchmarks/fuzz_load.py --replay RUN   (one run, verbose)

Each run is one `session.run_plan` (the library path `gpuscout load` takes) against
`tests/loadgen/garbage_server.py`, whose scenario for the run is drawn from `random.Random(f"{seed}-{run}")`:
honest streams (cut at random byte boundaries, CRLF, comments, reasoning), odd JSON shapes (a string
`delta`, lists, numbers, nulls), lying `usage` counts, broken HTTP and chunked framing, endless and huge
bodies and lines, hangs before and after the headers, servers echoing the credentials back, and honest
servers whose /metrics page (`--metrics-url`) is hostile: 1e308 values and their inf sum, negative
gauges, fractions past 1, escapes, non-UTF-8, endless, huge, hanging and trickling pages. Load
shapes, stream/non-stream, endpoints, `--duration` and URLs with credentials vary too. Timeouts are
short (2–3 s), so a run is bounded by the client's own limits.

Outcomes, one per run:

  result       a result; errors counted by kind
  error        a GpuscoutError (what / why / fix)
  crash        any other exception (a traceback for the user), or a worker that died (memory cap)
  hang         the run took longer than its scenario's bound (its `--duration` + 1.5 s, or its timeouts
               plus slack), or the worker fell silent and was killed
  nonsense     a result that says something false: `valid` although the server lied or every request
               failed, an error kind that misdescribes the fault (a timeout for an endless 500 body), a
               non-finite or unstorable number, a non-positive throughput marked valid, a secret in the
               result or the error, a /metrics reading no server can have (negative, a fraction past 1,
               a gauge past 1e9 requests) or its escape sequences kept for the screen
  false_alarm  an honest scenario not marked valid, or not measured (reported, not a failure of robustness)

Each worker is a subprocess with its address space capped (`--memory-gib`) and its own server process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "loadgen"))

from garbage_server import FAMILIES, Scenario, scenario  # noqa: E402

OUTCOMES = ("result", "error", "crash", "hang", "nonsense", "false_alarm")
KEY = "sk-fuzz-key-5f1e2d3c4b5a69788796"
PASSWORD = "pw-fuzz-7c6b5a4d3e2f"
QUERY_KEY = "qk-fuzz-0a1b2c3d4e5f"
SECRETS = (KEY, PASSWORD, QUERY_KEY)
SILENT_KILL_S = 90.0


def _url(port: int, sc: Scenario) -> str:
    if sc.creds:
        return f"http://fzuser:{PASSWORD}@127.0.0.1:{port}/v1?api_key={QUERY_KEY}&mode=x"
    return f"http://127.0.0.1:{port}/v1"


def judge_run(seed: int, run: int, port: int, folder: Path, only: str | None = None) -> dict[str, Any]:
    """One run → {"run", "family", "variant", "outcome", "detail", "elapsed_s", "cpu_s"}."""
    from gpuscout.errors import GpuscoutError
    from gpuscout.loadgen.plan import make_plan
    from gpuscout.loadgen.session import run_plan

    sc = scenario(seed, run, only)
    dataset = folder / "prompts.jsonl"
    count = max(sc.requests or 8, 8)
    dataset.write_text("".join(json.dumps({"prompt": f"fz {run} {p}"}) + "\n" for p in range(count)))
    options: dict[str, Any] = {
        "url": _url(port, sc), "model": "m", "endpoint": sc.endpoint, "stream": sc.stream, "requests": sc.requests,
        "duration_s": sc.duration_s, "output_tokens": sc.output_tokens, "dataset": dataset, "api_key_env": "FZ_KEY",
        "timeout_s": sc.timeout_s, "percentile": 50, "seed": run}
    if sc.family == "metrics":
        options["metrics_url"] = f"http://127.0.0.1:{port}/metrics?run={run}"
    if sc.rate is not None:
        options |= {"rate": sc.rate, "arrival": "constant"}
    else:
        options["concurrency"] = sc.concurrency
    verdict: dict[str, Any] = {"run": run, "family": sc.family, "variant": sc.variant}
    cpu0, t0 = time.process_time(), time.perf_counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        outcome = run_plan(make_plan(**options))
        verdict |= _judge_result(sc, outcome.result, folder)
    except GpuscoutError as exc:
        leaked = [s for s in SECRETS if s in str(exc)]
        verdict |= {"outcome": "nonsense" if leaked else "error",
                    "detail": ("secret in the error: " if leaked else "") + str(exc).splitlines()[0][:200]}
    except Exception as exc:  # a crash: what a user would see as a traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        verdict |= {"outcome": "crash", "detail": f"{type(exc).__name__}: {str(exc)[:160]} "
                                                  f"({Path(where.filename).name}:{where.lineno})"}
    elapsed = time.perf_counter() - t0
    if elapsed > sc.time_bound_s and verdict["outcome"] != "crash":
        verdict |= {"outcome": "hang", "detail": f"{elapsed:.1f} s > bound {sc.time_bound_s:.1f} s "
                                                 f"({verdict.get('detail', '')})"[:240]}
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return verdict | {"elapsed_s": round(elapsed, 3), "cpu_s": round(time.process_time() - cpu0, 3),
                      "rss_growth_mb": round((rss1 - rss0) / 1024, 1), "maxrss_mb": round(rss1 / 1024, 1)}


def _judge_result(sc: Scenario, result: Any, folder: Path) -> dict[str, Any]:
    from gpuscout.results.schema import check_samples
    from gpuscout.results.store import load_result, save_result

    problems: list[str] = []
    text = result.model_dump_json()
    problems += [f"secret {s[:6]}… in the result" for s in SECRETS if s in text]
    bad = check_samples(result)
    if bad:
        problems.append(f"unstorable number: {bad}")
    valid_cases = 0
    kinds: set[str] = set()
    for case in result.cases:
        valid = "valid" in case.notes
        valid_cases += valid
        metrics = {m.name: m for m in case.metrics}
        for m in case.metrics:
            if not all(math.isfinite(v) for v in (m.value, *m.samples)):
                problems.append(f"{m.name} is not finite")
        kinds |= {name.removeprefix("errors_") for name in metrics if name.startswith("errors_")}
        problems += _server_problems(case.metrics)
        tps = metrics.get("output_tokens_per_s")
        if valid and (tps is None or not tps.value > 0):
            problems.append(f"valid with output_tokens_per_s {tps.value if tps else None}")
        if valid and sc.must_invalid:
            problems.append(f"valid although the server misbehaved ({sc.family}/{sc.variant})")
    wrong = kinds & sc.forbid
    if wrong:
        problems.append(f"errors counted as {sorted(wrong)} for {sc.variant}")
    try:
        save_result(result, folder / "result.json")
        load_result(folder / "result.json")
    except Exception as exc:
        problems.append(f"the result does not round-trip: {type(exc).__name__}: {str(exc)[:100]}")
    if problems:
        return {"outcome": "nonsense", "detail": "; ".join(problems)[:300]}
    if sc.honest and valid_cases < len(result.cases):
        reasons = [n for c in result.cases for n in c.notes if n.startswith(("invalid", "not measured"))]
        return {"outcome": "false_alarm", "detail": "; ".join(reasons)[:300]}
    return {"outcome": "result", "detail": ",".join(sorted(kinds))}


SERVER_FRACTIONS = ("server_kv_cache_usage", "server_prefix_cache_hit_rate")


def _server_problems(metrics: Any) -> list[str]:
    """A server's /metrics reading that no server can have: negative, a fraction past 1, a gauge past 1e9
    requests or a counter past 1e15 tokens, or escape sequences in what will be printed."""
    found = []
    for m in metrics:
        if not m.name.startswith("server_"):
            continue
        top = 1.0 if m.name in SERVER_FRACTIONS else 1e9 if m.name.endswith("_requests") else 1e15
        for v in (m.value, *m.samples):
            if not 0 <= v <= top:
                found.append(f"{m.name} = {v:g}")
                break
        if any(ch in f"{m.note}{m.unit}" for ch in "\x1b\x9b\x07"):
            found.append(f"{m.name}: an escape sequence from the server in its note")
    return found


# ------------------------------------------------------------------------------------ processes

def start_server(seed: int, only: str | None) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, str(ROOT / "tests" / "loadgen" / "garbage_server.py"), "--seed", str(seed)]
    proc = subprocess.Popen(cmd + (["--only", only] if only else []), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        raise RuntimeError(f"the garbage server did not start: {line!r}")
    return proc, int(line.split()[1])


def worker(seed: int, start: int, stop: int, memory_gib: float, only: str | None) -> None:
    """Judge runs start..stop-1: a {"start": i} line before each, its verdict as a JSON line after."""
    server, port = start_server(seed, only)  # before the cap: the server process keeps its own limits
    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ["FZ_KEY"] = KEY
    try:
        with tempfile.TemporaryDirectory(prefix="fuzz-load-") as folder:
            for run in range(start, stop):
                print(json.dumps({"start": run}), flush=True)
                print(json.dumps(judge_run(seed, run, port, Path(folder), only)), flush=True)
    finally:
        server.terminate()
        server.wait(10)


def _spawn(args: argparse.Namespace, start: int, stop: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--worker", f"{start}:{stop}", "--seed", str(args.seed), "--memory-gib",
           str(args.memory_gib)]
    if args.only:
        cmd += ["--only", args.only]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Split the runs over the workers; a worker that dies or falls silent costs its current run only."""
    share = -(-args.runs // args.workers)
    todo = [(w * share, min(args.runs, (w + 1) * share)) for w in range(args.workers)]
    todo = [(a, b) for a, b in todo if a < b]
    verdicts: list[dict[str, Any]] = []
    live: dict[int, dict[str, Any]] = {}
    for a, b in todo:
        proc = _spawn(args, a, b)
        live[proc.stdout.fileno()] = {"proc": proc, "stop": b, "current": None, "seen": time.monotonic()}  # type: ignore[union-attr]
    done = 0
    while live:
        ready, _, _ = select.select(list(live), [], [], 1.0)
        now = time.monotonic()
        for fd in list(live):
            w = live[fd]
            proc = w["proc"]
            if fd in ready:
                line = proc.stdout.readline()
                if line:
                    w["seen"] = now
                    msg = json.loads(line)
                    if "start" in msg:
                        w["current"] = msg["start"]
                    else:
                        verdicts.append(msg)
                        w["current"] = None
                        done += 1
                        if done % 100 == 0:
                            print(f"  {done} runs judged", file=sys.stderr, flush=True)
                    continue
            silent = now - w["seen"] > SILENT_KILL_S
            if (fd in ready or silent) and (silent or proc.poll() is not None):
                if silent:
                    proc.kill()
                proc.wait()
                del live[fd]
                current = w["current"]
                if current is not None:
                    sc = scenario(args.seed, current, args.only)
                    why = f"killed after {SILENT_KILL_S:g} s silent" if silent else "died"
                    verdicts.append({"run": current, "family": sc.family, "variant": sc.variant,
                                     "outcome": "hang" if silent else "crash",
                                     "detail": f"worker {why} (rc {proc.returncode})"})
                    done += 1
                    if current + 1 < w["stop"]:
                        new = _spawn(args, current + 1, w["stop"])
                        live[new.stdout.fileno()] = {"proc": new, "stop": w["stop"], "current": None,  # type: ignore[union-attr]
                                                     "seen": time.monotonic()}
    return sorted(verdicts, key=lambda v: v["run"])


def report(verdicts: list[dict[str, Any]], wall_s: float) -> None:
    by_family: dict[str, Counter[str]] = defaultdict(Counter)
    for v in verdicts:
        by_family[v["family"]][v["outcome"]] += 1
    print(f"\n{len(verdicts)} runs in {wall_s:.0f} s")
    print(f"{'family':<10}" + "".join(f"{o:>12}" for o in OUTCOMES))
    total: Counter[str] = Counter()
    for fam in FAMILIES:
        if fam in by_family:
            total += by_family[fam]
            print(f"{fam:<10}" + "".join(f"{by_family[fam][o]:>12}" for o in OUTCOMES))
    print(f"{'total':<10}" + "".join(f"{total[o]:>12}" for o in OUTCOMES))
    print(f"\ncrashes {total['crash']}, hangs {total['hang']}, silent nonsense {total['nonsense']} "
          f"(false alarms on honest servers {total['false_alarm']})")
    reasons: Counter[str] = Counter()
    for v in verdicts:
        if v["outcome"] == "nonsense":
            for part in v.get("detail", "").split("; "):
                reasons[_reason_kind(part)] += 1
    if reasons:
        print("silent nonsense by reason (a run may have several): "
              + ", ".join(f"{k} {n}" for k, n in reasons.most_common()))
    peaks = [v.get("rss_growth_mb", 0) for v in verdicts]
    cpu = [v.get("cpu_s", 0) for v in verdicts]
    print(f"largest memory growth in one run {max(peaks, default=0):.0f} MB; most client CPU in one run "
          f"{max(cpu, default=0):.1f} s")
    for outcome in ("crash", "hang", "nonsense", "false_alarm"):
        seen: Counter[str] = Counter()
        shown = 0
        for v in verdicts:
            if v["outcome"] != outcome:
                continue
            key = f"{v['family']}/{v['variant']}"
            seen[key] += 1
            if seen[key] == 1 and shown < 12:
                shown += 1
                print(f"  {outcome}: run {v['run']} {key}: {v.get('detail', '')[:200]}")
        if seen:
            print(f"  {outcome} by scenario: {dict(seen.most_common())}")


def _reason_kind(detail: str) -> str:
    for needle, kind in (("secret", "secret leaked"), ("valid although", "valid although the server misbehaved"),
                         ("errors counted as", "wrong error kind"), ("not finite", "non-finite number"),
                         ("unstorable", "unstorable number"), ("round-trip", "result does not round-trip"),
                         ("valid with output_tokens_per_s", "valid with non-positive throughput")):
        if needle in detail:
            return kind
    return detail[:40]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-gib", type=float, default=3.0)
    parser.add_argument("--only", choices=FAMILIES, default=None, help="one family of faults")
    parser.add_argument("--replay", type=int, default=None, help="judge one run here, verbosely")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--from-json", type=Path, default=None, help="print the report of a saved --json-out")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        a, b = (int(x) for x in args.worker.split(":"))
        worker(args.seed, a, b, args.memory_gib, args.only)
        return
    if args.from_json is not None:
        report(json.loads(args.from_json.read_text()), math.nan)
        return
    if args.replay is not None:
        server, port = start_server(args.seed, args.only)
        os.environ["FZ_KEY"] = KEY
        try:
            print(scenario(args.seed, args.replay, args.only))
            with tempfile.TemporaryDirectory() as folder:
                print(json.dumps(judge_run(args.seed, args.replay, port, Path(folder), args.only), indent=2))
        finally:
            server.terminate()
        return
    t0 = time.perf_counter()
    verdicts = run_all(args)
    report(verdicts, time.perf_counter() - t0)
    if args.json_out:
        args.json_out.write_text(json.dumps(verdicts, indent=1))


if __name__ == "__main__":
    main()
