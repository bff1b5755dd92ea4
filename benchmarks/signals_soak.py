"""`gpuscout load` stopped by real signals at random moments, many times: nothing finished is lost.

Run: .venv/bin/python benchmarks/signals_soak.py [--runs 60] [--seed 0] [--kills 6]

Each run starts `gpuscout load` (one process, or `--workers 2`) against the fake OpenAI server of
tests/loadgen in a process of its own on 127.0.0.1, and stops it with a plan drawn from
`random.Random(f"{seed}-{run}")`: Ctrl-C once to five times (to the process group, as a terminal
sends it), SIGTERM or SIGHUP to the process or to one of its workers, then more of any of them, 0 to
100 ms apart, the first
0 to 1.5 s after the server received the run's first request. Each run is checked as
tests/cli/test_load_signals.py checks its few (`stop_runs.problems`): exit code 128 + the first signal,
no traceback, the result file readable, every request the server finished before the signal in it
(but at most one per request in flight, still on its way), no more than the server ever finished,
and none of the command's processes running afterwards. `--kills` more runs of `--workers 2` end
with SIGKILL of the parent: its workers must be gone, and the server must receive nothing more.

Prints one line per run and a summary (JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "loadgen"))
sys.path.insert(0, str(ROOT / "src"))

from fake_openai import FakeProcess, serve_in_process  # noqa: E402
from stop_runs import StopPlan, gpuscout_env, problems, stopped_load  # noqa: E402

from processes import descendants, gone, running  # noqa: E402

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def draw_plan(rng: random.Random) -> StopPlan:
    first = rng.choice(SIGNALS)
    workers = rng.choice((1, 2))
    # a terminal signals the group; kill, the process (now and then one worker of it)
    to = "group" if first != signal.SIGTERM and rng.random() < 0.8 else "parent"
    if workers > 1 and rng.random() < 0.15:
        to = "worker"
    later = tuple(rng.choice(SIGNALS) if rng.random() < 0.3 else first for _ in range(rng.randint(0, 4)))
    name = "+".join(s.name for s in (first, *later)) + f" {to} workers={workers}"
    return StopPlan(name, (first, *later), workers=workers, to=to, max_gap_s=0.1, max_delay_s=1.5)


def killed_parent(server: FakeProcess, out: Path) -> dict[str, Any]:
    """One `load --workers 2` killed with SIGKILL while sending: are its workers, and their load, gone?"""
    proc = subprocess.Popen([sys.executable, "-m", "gpuscout", "load", server.url, "--model", "m", "--concurrency",
                             "4", "--duration", "60s", "--runs", "1", "--output-tokens", "8", "--workers", "2", "-o",
                             str(out), "--no-store"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=gpuscout_env(), start_new_session=True)
    base = len(server.records())
    while len(server.records()) < base + 20 and proc.poll() is None:
        time.sleep(0.05)
    workers = descendants(proc.pid)
    proc.kill()
    proc.wait(60)
    ended = gone(workers, 15.0)
    left = running(workers)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    after = len(server.records())
    time.sleep(1.0)
    return {"workers": len(workers), "left": left, "ended": ended, "requests_after": len(server.records()) - after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tally: dict[str, Any] = {"runs": 0, "signals_sent": 0, "with_file": 0, "files_valid": 0, "nothing_finished": 0,
                             "requests_kept": 0, "requests_ended_before": 0, "dropped_in_flight_max": 0,
                             "processes_seen": 0, "processes_left": 0, "failed": [], "by_first_signal": {},
                             "kills": 0, "kill_workers_left": 0, "kill_requests_after": 0}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, serve_in_process(0.005, 0.002) as server:
        for run in range(args.runs):
            rng = random.Random(f"{args.seed}-{run}")
            plan = draw_plan(rng)
            out = Path(folder) / f"run{run}.json"
            outcome = stopped_load(server, out, plan, rng)
            found = problems(outcome)
            tally["runs"] += 1
            tally["signals_sent"] += outcome.signals_sent
            tally["with_file"] += outcome.kept is not None or outcome.file_error is not None
            tally["files_valid"] += outcome.kept is not None
            tally["nothing_finished"] += outcome.kept is None and outcome.file_error is None
            tally["requests_kept"] += outcome.kept or 0
            tally["requests_ended_before"] += outcome.ended_before
            tally["dropped_in_flight_max"] = max(tally["dropped_in_flight_max"],
                                                 outcome.ended_before - (outcome.kept or 0))
            tally["processes_seen"] += len(outcome.processes)
            tally["processes_left"] += len(outcome.left)
            first = tally["by_first_signal"].setdefault(plan.first.name, 0)
            tally["by_first_signal"][plan.first.name] = first + 1
            if found:
                tally["failed"].append({"run": run, "plan": plan.name, "problems": found})
            if not args.json:
                print(f"{run:4d} {plan.name:<44} rc={outcome.returncode:<4} kept={outcome.kept!s:<5} "
                      f"ended_before={outcome.ended_before:<5} {'OK' if not found else 'FAIL ' + '; '.join(found)}",
                      flush=True)
        for kill in range(args.kills):
            done = killed_parent(server, Path(folder) / f"kill{kill}.json")
            tally["kills"] += 1
            tally["kill_workers_left"] += len(done["left"])
            tally["kill_requests_after"] += done["requests_after"]
            if not args.json:
                print(f"kill {kill}: {done}", flush=True)
    tally["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(tally, indent=2))
    return 1 if tally["failed"] or tally["kill_workers_left"] or tally["kill_requests_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
