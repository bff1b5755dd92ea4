"""The trial driver with the skypilot engine, SkyPilot faked at the adapter's boundary (tests/trial/fake_sky.py)
and the ssh commands run for real by a stand-in ssh: whatever ends the trial, no cluster is left billing, or the
one left is named with `sky down <cluster>`."""

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

import pytest

from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.hardware.skypilot import import_skypilot_catalog
from gpuscout.trial.driver import Candidate, Driver, DriverSettings, TrialRun, safe_name
from gpuscout.trial.engines.skypilot import SkyPilotEngine, cluster_name
from trial.fake_sky import FakeSky, ResourcesUnavailableError

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
FAKE_SSH = Path(__file__).with_name("fake_ssh.py")
TOKEN = "d0d0d0"
AWS = {o.id: o for o in import_skypilot_catalog(TESTS / "hardware" / "data" / "skypilot_aws_vms.csv", cloud="aws",
                                                observed_at=date(2026, 11, 1)).offers}
P4D, G6E, G5 = AWS["aws-p4d.24xlarge-us-east-1a"], AWS["aws-g6e.xlarge-us-east-1a"], AWS["aws-g5.xlarge-us-east-1d"]

# Writes what it was told, then results; the g5 box stops answering ssh once its script is done.
BODY = """cd "$(dirname "$0")"; mkdir -p results; echo "$OFFER" > results/started.txt
echo '{}' > results/bench.json
case "$OFFER" in *g5*) touch "$HOME.unreachable";; esac
exit 0
"""


def cluster(offer: Offer) -> str:
    return cluster_name(safe_name(offer.id), TOKEN)


def trial_of(tmp_path: Path, sky: FakeSky, offers: Sequence[Offer], body: str = BODY) -> tuple[TrialRun, list[str]]:
    engine = SkyPilotEngine(tmp_path / "sky", sky=sky, ssh=(sys.executable, str(FAKE_SSH)), token=TOKEN,
                            sky_cli=(sys.executable, str(FAKE_SSH.with_name("fake_sky_cli.py"))), stop_grace_s=10)
    cands = [Candidate(name=safe_name(o.id), offer=o, predicted_usd=0.5) for o in offers]
    events: list[str] = []
    settings = DriverSettings(out_dir=tmp_path / "out", budget_s=300, max_usd=None, parallel=True)
    return Driver(engine, cands, body, "sha", settings, events.append).run(), events


@pytest.fixture(autouse=True)
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "remote"
    root.mkdir()
    monkeypatch.setenv("FAKE_SSH_ROOT", str(root))
    return root


def test_a_failed_launch_and_the_candidates_that_launched_are_all_downed(tmp_path: Path) -> None:
    sky = FakeSky()
    sky.launch_errors[cluster(P4D)] = ResourcesUnavailableError("Failed to acquire resources in us-east-1 for "
                                                                "p4d.24xlarge: InsufficientInstanceCapacity")
    trial, events = trial_of(tmp_path, sky, [P4D, G6E])
    status = {r.candidate.offer.id: (r.status, r.reason) for r in trial.runs}
    assert status[G6E.id] == ("benched", "")
    assert status[P4D.id][0] == "failed" and "InsufficientInstanceCapacity" in status[P4D.id][1]
    assert sky.clusters == {} and trial.not_torn_down == [] and not trial.error
    assert sorted(sky.called("down")) == sorted([cluster(P4D), cluster(G6E)])
    assert sum("torn down" in e for e in events) == 2
    good = next(r for r in trial.runs if r.candidate.offer == G6E)
    assert {p.name for p in good.files} == {"bench.json", "started.txt"}
    assert (tmp_path / "out" / safe_name(G6E.id) / "results" / "started.txt").read_text().strip() == G6E.id
    # the task file that was launched sits beside the candidate's script
    assert "g6e.xlarge" in (tmp_path / "out" / safe_name(G6E.id) / "sky-task.yaml").read_text()


def test_a_fetch_that_fails_still_downs_the_cluster(tmp_path: Path) -> None:
    sky = FakeSky()
    trial, events = trial_of(tmp_path, sky, [G5, G6E])
    g5 = next(r for r in trial.runs if r.candidate.offer == G5)
    assert g5.status == "benched" and g5.files == ()
    assert any("could not fetch its results" in e and "Connection refused" in e for e in events)
    assert sky.clusters == {} and trial.not_torn_down == []


def test_a_down_that_fails_is_named_with_its_command(tmp_path: Path) -> None:
    sky = FakeSky()
    sky.down_errors[cluster(G6E)] = [RuntimeError("Could not connect to SkyPilot API server")]
    trial, events = trial_of(tmp_path, sky, [P4D, G6E])
    (left,) = trial.not_torn_down
    assert left.candidate.offer == G6E and left.teardown is not None
    assert left.teardown.command == f"sky down {cluster(G6E)}"
    assert any("NOT torn down" in e and f"sky down {cluster(G6E)}" in e for e in events)
    assert list(sky.clusters) == [cluster(G6E)]  # the one the user was told about, and only it


def test_an_offer_that_cannot_be_pinned_stops_the_trial_before_anything_is_launched(tmp_path: Path) -> None:
    lambda_h100 = next(o for o in load_price_sheet(TESTS.parent / "examples" / "prices.example.toml").offers
                       if o.id == "lambda-h100-sxm-8x")
    sky = FakeSky()
    trial, _ = trial_of(tmp_path, sky, [G6E, lambda_h100])
    assert "cannot be pinned on SkyPilot" in trial.error and "names no region" in trial.error
    assert sky.called("launch") == [] and all(r.box is None for r in trial.runs)


HARNESS = textwrap.dedent("""
    import json, sys
    from datetime import date
    from pathlib import Path
    from gpuscout.hardware.skypilot import import_skypilot_catalog
    from gpuscout.trial.driver import Candidate, Driver, DriverSettings, safe_name
    from gpuscout.trial.engines.skypilot import SkyPilotEngine
    from trial.fake_sky import FakeSky

    tmp, catalog, fake_ssh = (Path(a) for a in sys.argv[1:4])
    offers = {o.id: o for o in import_skypilot_catalog(catalog, cloud="aws", observed_at=date(2026, 11, 1)).offers}
    body = ('cd "$(dirname "$0")"; mkdir -p results; echo $$ > results/pid; '
            "trap 'echo stopped > results/partial.txt; exit 143' TERM; "
            'echo done > results/finished.txt; sleep 300 & wait\\n')
    sky = FakeSky()
    engine = SkyPilotEngine(tmp / "sky", sky=sky, ssh=(sys.executable, str(fake_ssh)), token="c7c7c7",
                            sky_cli=(sys.executable, str(fake_ssh.with_name("fake_sky_cli.py"))), stop_grace_s=10)
    cands = [Candidate(name=safe_name(i), offer=offers[i], predicted_usd=0.5)
             for i in ("aws-g6e.xlarge-us-east-1a", "aws-g5.xlarge-us-east-1d")]
    settings = DriverSettings(out_dir=tmp / "out", budget_s=600, max_usd=None, parallel=True)
    trial = Driver(engine, cands, body, "sha", settings, lambda t: print("event:", t, flush=True)).run()
    print(json.dumps({"status": {r.candidate.name: [r.status, r.teardown.done if r.teardown else None]
                                 for r in trial.runs},
                      "files": {r.candidate.name: sorted(p.name for p in r.files) for r in trial.runs},
                      "billing": sky.clusters, "downs": len(sky.called("down"))}))
    sys.exit(128 + trial.stopped_by if trial.stopped_by else 0)
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_downs_every_cluster_and_keeps_what_finished(tmp_path: Path, remote: Path, sig: int) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{TESTS}"}
    proc = subprocess.Popen([sys.executable, str(harness), str(tmp_path), str(TESTS / "hardware" / "data" /
                             "skypilot_aws_vms.csv"), str(FAKE_SSH)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    pid_files: list[Path] = []
    while time.monotonic() < deadline and len(pid_files) < 2:
        pid_files = [p for p in remote.glob("*/gpuscout-trial/results/pid") if p.read_text().strip()]
        time.sleep(0.1)
    assert len(pid_files) == 2, "the scripts never started"
    pids = [int(p.read_text()) for p in pid_files]
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 128 + sig, out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["billing"] == {} and report["downs"] == 2, out
    assert {s for s, _ in report["status"].values()} == {"stopped"} and all(d for _, d in report["status"].values())
    # what each script wrote before the stop, and on its way out, came back before its cluster went
    assert all(files == ["finished.txt", "partial.txt", "pid"] for files in report["files"].values()), out
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
