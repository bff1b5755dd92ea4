"""The skypilot engine's ssh side against a real OpenSSH server on 127.0.0.1 (tests/trial/sshd.py), reached
the way SkyPilot makes a cluster reachable: an ssh config whose Host is the cluster's name. SkyPilot itself
is faked at its boundary; the upload, the run under `timeout`, the stop and the tar stream go through real
ssh and sshd, the remote login shell included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscout.trial.engine import LaunchRequest
from gpuscout.trial.engines.skypilot import SkyPilotEngine
from trial.fake_sky import FakeSky
from trial.sshd import SshServer, make_user_key, missing_reason, sshd

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshServer, Path]]:
    folder = tmp_path_factory.mktemp("sky-sshd")
    key = make_user_key(folder / "user")
    with sshd(folder / "server", key) as box:
        # What SkyPilot writes for a cluster (~/.sky/generated/ssh/<cluster>), for every gst-… name here.
        config = folder / "ssh_config"
        config.write_text(f"Host gst-*\n  HostName 127.0.0.1\n  Port {box.port}\n  User {box.user}\n"
                          f"  IdentityFile {key.private}\n  IdentitiesOnly yes\n"
                          f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n")
        yield box, config


def request(candidate: str) -> LaunchRequest:
    return LaunchRequest(candidate=candidate, offer_id=f"aws-g6e.xlarge-{candidate}", provider="AWS",
                         region="us-east-1", instance_type="g6e.xlarge", gpu="l40s", gpu_count=1, spot=False,
                         disk_gb=100, max_wall_s=600.0)


def engine(tmp_path: Path, config: Path) -> tuple[SkyPilotEngine, FakeSky, Path]:
    sky = FakeSky()
    remote = tmp_path / "remote dir"  # a space: the remote commands quote it
    eng = SkyPilotEngine(tmp_path / "out", sky=sky, ssh=("ssh", "-F", str(config)), token="e2e0ss",
                         stop_grace_s=10, remote_dir=str(remote), sky_cli=("true",))  # the config is written
    return eng, sky, remote


def test_run_and_fetch_over_real_ssh(server: tuple[SshServer, Path], tmp_path: Path) -> None:
    _, config = server
    eng, sky, remote = engine(tmp_path, config)
    box = eng.launch(request("real"))
    eng.wait_ready(box, 30)
    script = tmp_path / "trial.sh"
    script.write_text('cd "$(dirname "$0")"; mkdir -p results/sub; echo "$0 in $PWD" > results/where.txt\n'
                      "echo '{}' > results/sub/bench.json; echo on-the-box; exit 3\n")
    outcome = eng.run(box, script, 60)
    assert outcome.returncode == 3 and "on-the-box" in outcome.log_tail
    files = eng.fetch(box, tmp_path / "fetched")
    assert sorted(p.relative_to(tmp_path / "fetched").as_posix() for p in files) == ["sub/bench.json", "where.txt"]
    assert str(remote) in (tmp_path / "fetched" / "where.txt").read_text()
    assert eng.tear_down(box).done and sky.clusters == {}


def test_a_stop_during_the_run_over_real_ssh_keeps_what_finished(server: tuple[SshServer, Path],
                                                                  tmp_path: Path) -> None:
    _, config = server
    eng, sky, remote = engine(tmp_path, config)
    box = eng.launch(request("stop"))
    eng.wait_ready(box, 30)
    script = tmp_path / "trial.sh"
    script.write_text("mkdir -p results; trap 'echo stopped > results/partial.txt; exit 143' TERM\n"
                      "echo '{}' > results/doctor.json; sleep 300 & wait\n")
    outcomes = []
    runner = threading.Thread(target=lambda: outcomes.append(eng.run(box, script, 600)))
    runner.start()
    deadline = time.monotonic() + 120
    while not (remote / "results" / "doctor.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    files = eng.fetch(box, tmp_path / "fetched")
    assert sorted(p.name for p in files) == ["doctor.json", "partial.txt"]
    runner.join(120)
    assert outcomes and outcomes[0].returncode == 143
    assert eng.tear_down(box).done and sky.clusters == {}


def test_the_deadline_over_real_ssh(server: tuple[SshServer, Path], tmp_path: Path) -> None:
    _, config = server
    eng, _, remote = engine(tmp_path, config)
    box = eng.launch(request("late"))
    eng.wait_ready(box, 30)
    script = tmp_path / "trial.sh"
    script.write_text("sleep 300 & sleep 300; wait\n")
    outcome = eng.run(box, script, 2)
    assert outcome.timed_out and outcome.returncode is None
    pgid = int((remote / "trial.pid").read_text())
    deadline = time.monotonic() + 30
    while group(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group(pgid) == [], "the script's process group (the two sleeps) outlived its deadline"
    assert eng.tear_down(box).done


def group(pgid: int) -> list[int]:
    """The live processes of process group `pgid` on this machine (the "box" is this machine)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split() if stat else []
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found
