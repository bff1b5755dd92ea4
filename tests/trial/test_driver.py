"""The trial driver with real processes (the local engine): every path tears every launched box down.

The script body here is a few lines of bash standing in for install, doctor and bench, so each path
(benched, returned, failed, timed out, the money guard, an engine that breaks, Ctrl-C and SIGTERM in a
real process) runs in seconds; the real script is exercised end to end in test_cli_trial.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import parse_offer
from gpuscout.trial.driver import Candidate, Driver, DriverSettings, TrialRun
from gpuscout.trial.engine import Box, RunOutcome
from gpuscout.trial.engines.local import LocalEngine
from gpuscout.trial.money import elapsed_bill_usd
from processes import gone

SRC = Path(__file__).resolve().parents[2] / "src"
TESTS = Path(__file__).resolve().parents[1]


def offer(offer_id: str, price: float = 1.0, **more: Any) -> Offer:
    return parse_offer({"id": offer_id, "provider": "test", "gpu": "rtx-4090", "gpu_count": 1, "price": price,
                        "price_basis": "instance", "currency": "USD", "observed_at": date(2026, 11, 30),
                        "source": "test sheet"} | more)


def candidates(*offers: Offer) -> list[Candidate]:
    return [Candidate(name=o.id, offer=o, predicted_usd=0.01) for o in offers]


# By offer: exit 0 (benched), 3 (the doctor said return), 22 (the bench failed); results written first.
BY_OFFER = """cd "$(dirname "$0")"; mkdir -p results
echo "$OFFER $CREATED_AT" > results/started.txt
case "$OFFER" in
  good*) echo '{}' > results/bench.json; exit 0;;
  sick*) exit 3;;
  *) exit 22;;
esac
"""


def run(tmp_path: Path, cands: Sequence[Candidate], body: str, *, budget_s: float = 120, max_usd: float | None = None,
        parallel: bool = True, engine: Any = None) -> tuple[TrialRun, list[str]]:
    events: list[str] = []
    settings = DriverSettings(out_dir=tmp_path / "out", budget_s=budget_s, max_usd=max_usd, parallel=parallel)
    the_engine = engine or LocalEngine(tmp_path / "boxes", stop_grace_s=5)
    trial = Driver(the_engine, cands, body, "sha", settings, events.append).run()
    return trial, events


@pytest.mark.parametrize("parallel", [True, False])
def test_each_outcome_is_named_and_every_box_is_torn_down(tmp_path: Path, parallel: bool) -> None:
    trial, events = run(tmp_path, candidates(offer("good-a"), offer("sick-b"), offer("bad-c")), BY_OFFER,
                        parallel=parallel)
    status = {r.candidate.name: r.status for r in trial.runs}
    assert status == {"good-a": "benched", "sick-b": "returned", "bad-c": "failed"}
    assert all(r.teardown is not None and r.teardown.done for r in trial.runs)
    assert not trial.not_torn_down and trial.stopped_by is None and not trial.error
    good = next(r for r in trial.runs if r.candidate.name == "good-a")
    assert {p.name for p in good.files} == {"bench.json", "started.txt"}
    assert good.files[0].parent == tmp_path / "out" / "good-a" / "results"
    # Each script was told its own offer and when its box was created.
    assert (tmp_path / "out" / "sick-b" / "results" / "started.txt").read_text().startswith("sick-b 20")
    assert "bench failed" in next(r for r in trial.runs if r.candidate.name == "bad-c").reason
    assert sum("torn down" in e for e in events) == 3


def test_the_real_bill_is_the_time_held_under_the_offers_rules(tmp_path: Path) -> None:
    # Billed by the hour with a one-hour minimum: a few seconds held bill the whole hour.
    hourly = offer("good-hourly", price=2.0, billing_increment_s=3600, min_billed_s=3600)
    trial, _ = run(tmp_path, candidates(hourly), BY_OFFER)
    assert trial.runs[0].real_usd == pytest.approx(2.0)
    assert elapsed_bill_usd(hourly, 1.0) == pytest.approx(2.0)
    assert elapsed_bill_usd(offer("x", price=3600.0), 10.0) == pytest.approx(10.0)


def test_the_time_bound_stops_a_candidate_and_tears_it_down(tmp_path: Path) -> None:
    body = 'cd "$(dirname "$0")"; mkdir -p results; echo $$ > results/pid; sleep 300\n'
    trial, _ = run(tmp_path, candidates(offer("slow")), body, budget_s=3)
    only = trial.runs[0]
    assert only.status == "timed out" and only.teardown is not None and only.teardown.done
    assert gone([int((tmp_path / "out" / "slow" / "results" / "pid").read_text())], 10)


def test_the_money_guard_tears_everything_down_when_the_running_bill_reaches_the_limit(tmp_path: Path) -> None:
    # $36,000 an hour is $10 a second: a $15 limit is reached within two seconds of the launch.
    body = 'cd "$(dirname "$0")"; mkdir -p results; echo $$ > results/pid; echo kept > results/partial.txt; sleep 300\n'
    dear = [offer("dear-a", price=36_000.0), offer("dear-b", price=36_000.0)]
    start = time.monotonic()
    trial, events = run(tmp_path, candidates(*dear), body, max_usd=15.0)
    assert time.monotonic() - start < 90
    assert "--max-usd" in trial.guard and any("stopping" in e for e in events)
    assert {r.status for r in trial.runs} == {"stopped"}
    assert all(r.teardown is not None and r.teardown.done for r in trial.runs)
    pids = [int((tmp_path / "out" / r.candidate.name / "results" / "pid").read_text()) for r in trial.runs]
    assert gone(pids, 10)
    # What the boxes wrote before the guard stopped them came back.
    assert all((tmp_path / "out" / r.candidate.name / "results" / "partial.txt").is_file() for r in trial.runs)


class BrokenRun(LocalEngine):
    """A local engine whose `run` fails the way a bug in an adapter would."""

    def run(self, box: Box, script: Path, timeout_s: float) -> RunOutcome:
        if box.request.candidate == "broken":
            raise RuntimeError("the adapter broke")
        return super().run(box, script, timeout_s)


class StuckTearDown(LocalEngine):
    def tear_down(self, box: Box) -> Any:
        raise OSError("the provider's API is down")


def test_an_adapter_bug_ends_the_trial_and_still_tears_every_box_down(tmp_path: Path) -> None:
    body = 'cd "$(dirname "$0")"; mkdir -p results; echo $$ > results/pid; sleep 300\n'
    engine = BrokenRun(tmp_path / "boxes", stop_grace_s=5)
    trial, _ = run(tmp_path, candidates(offer("slow"), offer("broken")), body, engine=engine)
    assert "the adapter broke" in trial.error
    assert all(r.teardown is not None and r.teardown.done for r in trial.runs)
    pid_file = tmp_path / "out" / "slow" / "results" / "pid"
    if pid_file.is_file():  # the slow one may not have started before the broken one ended the trial
        assert gone([int(pid_file.read_text())], 10)


def test_a_box_that_cannot_be_torn_down_is_named_with_a_command(tmp_path: Path) -> None:
    engine = StuckTearDown(tmp_path / "boxes", stop_grace_s=5)
    trial, events = run(tmp_path, candidates(offer("good-a")), BY_OFFER, engine=engine)
    (left,) = trial.not_torn_down
    assert left.teardown is not None and "API is down" in left.teardown.message and left.teardown.command
    assert any("NOT torn down" in e and left.teardown.command in e for e in events)


HARNESS = textwrap.dedent("""
    import json, sys
    from datetime import date
    from pathlib import Path
    from gpuscout.hardware.price_sheet import parse_offer
    from gpuscout.trial.driver import Candidate, Driver, DriverSettings
    from gpuscout.trial.engines.local import LocalEngine

    out = Path(sys.argv[1])
    body = ('cd "$(dirname "$0")"; mkdir -p results; echo $$ > results/pid; '
            'echo done > results/finished.txt; sleep 300\\n')
    cands = [Candidate(name=n, offer=parse_offer({"id": n, "provider": "t", "gpu": "rtx-4090", "gpu_count": 1,
             "price": 1.0, "price_basis": "instance", "currency": "USD", "observed_at": date(2026, 11, 30),
             "source": "t"}), predicted_usd=0.01) for n in ("a", "b")]
    settings = DriverSettings(out_dir=out, budget_s=600, max_usd=None, parallel=True)
    trial = Driver(LocalEngine(out / "boxes", stop_grace_s=5), cands, body, "sha", settings,
                   lambda t: print("event:", t, flush=True)).run()
    print(json.dumps({r.candidate.name: [r.status, r.teardown.done if r.teardown else None] for r in trial.runs}))
    sys.exit(128 + trial.stopped_by if trial.stopped_by else 0)
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_tears_every_box_down_and_keeps_what_finished(tmp_path: Path, sig: int) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{TESTS}"}
    proc = subprocess.Popen([sys.executable, str(harness), str(tmp_path / "out")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_files = [tmp_path / "out" / "boxes" / n / "results" / "pid" for n in ("a", "b")]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(p.is_file() and p.read_text().strip() for p in pid_files):
        time.sleep(0.1)
    assert all(p.is_file() for p in pid_files), "the boxes never started"
    pids = [int(p.read_text()) for p in pid_files]
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, out
    statuses = json.loads(out.strip().splitlines()[-1])
    assert statuses == {"a": ["stopped", True], "b": ["stopped", True]}, out
    assert "tearing every box down" in out
    assert gone(pids, 10), "a box's script outlived the stop"
    for name in ("a", "b"):  # what finished before the stop was fetched
        assert (tmp_path / "out" / name / "results" / "finished.txt").read_text() == "done\n"
