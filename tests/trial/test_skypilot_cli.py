"""`gpuscout trial --engine skypilot` from the command line, end to end on this CPU: the engine built as the
command builds it (no arguments: `sky` imported, `ssh` and `sky` found on PATH), with SkyPilot faked as an
importable `sky` package and `ssh`/`sky` as stand-ins on PATH that run the boxes' commands here. The real
trial script runs on each "cluster" (the doctor, as this machine is not the offer's GPU, says return)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
HERE = Path(__file__).parent

FAKE_PACKAGE = '''
import atexit, json, os, sys
from trial.fake_sky import FakeSky

_fake = FakeSky()
for _name in ("Task", "exceptions", "launch", "down", "get", "api_cancel", "cost_report"):
    setattr(sys.modules[__name__], _name, getattr(_fake, _name))


@atexit.register
def _left_billing():
    with open(os.path.join(os.environ["FAKE_SSH_ROOT"], "sky-state.json"), "w") as out:
        json.dump({"billing": _fake.clusters, "launched": [a["cluster"] for a in _fake.called("launch")],
                   "downed": _fake.called("down")}, out)
'''


@pytest.mark.slow
def test_the_command_line_trial_with_the_skypilot_engine_downs_every_cluster(tmp_path: Path) -> None:
    (tmp_path / "py" / "sky").mkdir(parents=True)
    (tmp_path / "py" / "sky" / "__init__.py").write_text(FAKE_PACKAGE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("ssh", "fake_ssh.py"), ("sky", "fake_sky_cli.py")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / target} "$@"\n')
        shim.chmod(0o755)
    remote = tmp_path / "remote"
    remote.mkdir()
    env = {**os.environ, "FAKE_SSH_ROOT": str(remote), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path / "py"), str(TESTS)]), "COLUMNS": "80"}
    out = tmp_path / "out"
    # the candidates from SkyPilot's own catalog, as docs/trial_skypilot.md §1 has a user take them
    vms = tmp_path / "catalogs" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_bytes((TESTS / "hardware" / "data" / "skypilot_aws_vms.csv").read_bytes())
    offer_ids = ["aws-g6e.xlarge-us-east-1a", "aws-g5.xlarge-us-east-1d"]
    candidates = ["aws-g6e-xlarge-us-east-1a", "aws-g5-xlarge-us-east-1d"]  # their folders
    done = subprocess.run([sys.executable, "-m", "gpuscout", "trial", str(ROOT / "examples" / "tiny-finetune.toml"),
                           "--offers", str(vms), "--candidates", ",".join(offer_ids), "--engine", "skypilot",
                           "--install", "current", "--device", "cpu", "--yes", "-o", str(out), "--no-store"],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    screen = done.stdout + done.stderr
    assert done.returncode == 4, screen  # no verdict: the doctor said return on both (a CPU, not the offer's GPU)
    state = json.loads((remote / "sky-state.json").read_text())
    assert state["billing"] == {} and sorted(state["launched"]) == sorted(state["downed"]), screen
    assert len(state["launched"]) == 2
    # each cluster made reachable as `ssh <cluster>` by SkyPilot's own `sky status <cluster>`
    assert sorted((remote / "sky-cli.log").read_text().splitlines()) == sorted(f"status {c}" for c in state["launched"])
    for name in candidates:
        folder = out / name
        assert "instance_type" in (folder / "sky-task.yaml").read_text()
        assert (folder / "results" / "doctor.json").is_file(), screen  # fetched before the down
        assert "doctor" in (folder / "trial.log").read_text()
    assert screen.count("downed") == 2 and "NOT torn down" not in screen
    # the boxes read the candidates' offers as TOML (their doctor reads no vms.csv), the same offers
    doctor = json.loads((out / candidates[0] / "results" / "doctor.json").read_text())
    assert offer_ids[0] in json.dumps(doctor), "the doctor did not check the candidate's own offer"
