"""The skypilot engine's lifecycle against a fake `sky` module at its boundary (no cloud is reachable here),
with its ssh commands run for real by a stand-in `ssh` that executes them in a folder per cluster: launch,
ready, run, fetch and down, and a down on every path out (a failed launch, a failed fetch, a launch still in
flight, a down that fails and names its command)."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuscout.trial.engine import Box, EngineError, LaunchRequest
from gpuscout.trial.engines.skypilot import SkyPilotEngine, cost_of
from trial.fake_sky import FakeSky, ResourcesUnavailableError

FAKE_SSH = Path(__file__).with_name("fake_ssh.py")
FAKE_SKY_CLI = Path(__file__).with_name("fake_sky_cli.py")


def request(candidate: str, instance: str = "p4d.24xlarge", region: str = "us-east-1") -> LaunchRequest:
    return LaunchRequest(candidate=candidate, offer_id=f"aws-{instance}-{region}a", provider="AWS", region=region,
                         instance_type=instance, gpu="a100-sxm4-40gb", gpu_count=8, spot=False, disk_gb=120,
                         max_wall_s=600.0)


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "remote"
    root.mkdir()
    monkeypatch.setenv("FAKE_SSH_ROOT", str(root))
    return root


def engine(tmp_path: Path, sky: FakeSky, **kwargs: float) -> SkyPilotEngine:
    return SkyPilotEngine(tmp_path / "out", sky=sky, ssh=(sys.executable, str(FAKE_SSH)), token="t0k3n1",
                          sky_cli=(sys.executable, str(FAKE_SKY_CLI)),
                          stop_grace_s=kwargs.pop("stop_grace_s", 10.0), **kwargs)  # type: ignore[arg-type]


def script(tmp_path: Path, body: str, name: str = "trial.sh") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


BENCHED = 'mkdir -p results/cases; echo \'{"ok": 1}\' > results/bench.json; echo x > results/cases/one.txt; echo done\n'


def test_a_candidate_is_launched_pinned_run_fetched_and_downed(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    cluster = box.handle["cluster"]
    assert sky.clusters == {cluster: "INIT"}  # launched, not yet waited for
    (launch,) = sky.called("launch")
    assert launch["down"] is True and launch["idle"] == 10  # the safety nets on the launch itself
    assert launch["config"]["resources"]["infra"] == "aws/us-east-1"
    assert launch["config"]["resources"]["instance_type"] == "p4d.24xlarge"
    assert Path(box.handle["task_file"]).read_text().count("instance_type") == 1

    eng.wait_ready(box, 30)
    assert box.ready_at is not None and sky.clusters == {cluster: "UP"}
    # SkyPilot's SDK writes no ssh host entry; its `sky status` does, before anything is run over ssh
    assert (remote / "sky-cli.log").read_text() == f"status {cluster}\n"
    outcome = eng.run(box, script(tmp_path, BENCHED), 60)
    assert outcome.returncode == 0 and not outcome.timed_out and "done" in outcome.log_tail
    files = eng.fetch(box, tmp_path / "fetched")
    assert [p.relative_to(tmp_path / "fetched").as_posix() for p in files] == ["bench.json", "cases/one.txt"]
    assert (tmp_path / "fetched" / "bench.json").read_text().strip() == '{"ok": 1}'
    calls = (remote / "calls.log").read_text().splitlines()
    assert all(line.startswith(f"{cluster}\t") and "BatchMode=yes" in line for line in calls)

    down = eng.tear_down(box)
    assert down.done and "downed" in down.message and down.command == ""
    assert sky.clusters == {} and box.torn_down_at is not None
    again = eng.tear_down(box)  # idempotent: the driver may reach tear-down from two paths
    assert again.done and len(sky.called("down")) == 1


def test_the_script_s_exit_code_comes_back_as_it_is(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    outcome = eng.run(box, script(tmp_path, "mkdir -p results; echo '{}' > results/doctor.json; exit 3\n"), 60)
    assert outcome.returncode == 3 and not outcome.timed_out
    assert [p.name for p in eng.fetch(box, tmp_path / "got")] == ["doctor.json"]
    assert eng.tear_down(box).done


def test_all_launches_are_in_flight_at_once(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    names = ["a", "b", "c"]
    boxes = [eng.launch(request(name)) for name in names]
    clusters = [b.handle["cluster"] for b in boxes]
    assert len(set(clusters)) == 3 and sky.clusters == dict.fromkeys(clusters, "INIT")
    # every launch was asked for before any was waited on: they share one time window
    assert [c for c, _ in sky.calls if c in ("launch", "get")][:3] == ["launch"] * 3
    for box in boxes:
        eng.wait_ready(box, 30)
        assert eng.tear_down(box).done
    assert sky.clusters == {}


def test_a_failed_launch_is_downed_with_the_candidates_that_launched(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    good, bad = eng.launch(request("good")), eng.launch(request("bad", instance="p5.48xlarge"))
    sky.launch_errors[bad.handle["cluster"]] = ResourcesUnavailableError("Failed to acquire resources in us-east-1")
    eng.wait_ready(good, 30)
    with pytest.raises(EngineError) as failed:
        eng.wait_ready(bad, 30)
    message = str(failed.value)
    assert bad.handle["cluster"] in message and "p5.48xlarge" in message and "Failed to acquire" in message
    # SkyPilot keeps a cluster whose provisioning failed: it bills until downed, like the one that launched
    assert set(sky.clusters) == {good.handle["cluster"], bad.handle["cluster"]}
    assert eng.fetch(bad, tmp_path / "bad") == []  # nothing ran there
    results = [eng.tear_down(box) for box in (good, bad)]
    assert all(r.done for r in results) and sky.clusters == {}


def test_a_fetch_that_fails_still_downs_the_cluster(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    assert eng.run(box, script(tmp_path, BENCHED), 60).returncode == 0
    cluster = box.handle["cluster"]
    (remote / f"{cluster}.unreachable").touch()
    with pytest.raises(EngineError) as failed:
        eng.fetch(box, tmp_path / "fetched")
    assert "Connection refused" in str(failed.value)
    assert f"scp -r {cluster}:gpuscout-trial/results ." in str(failed.value)  # how to save them by hand
    assert eng.tear_down(box).done and sky.clusters == {}


def test_a_down_that_fails_names_the_command_and_can_be_retried(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    cluster = box.handle["cluster"]
    sky.down_errors[cluster] = [RuntimeError("Could not connect to SkyPilot API server at http://127.0.0.1:46580")]
    result = eng.tear_down(box)
    assert not result.done and result.command == f"sky down {cluster}"
    assert f"`sky down {cluster}`" in result.message and "Could not connect" in result.message
    assert cluster in sky.clusters and box.torn_down_at is None  # still billing, and said so
    retried = eng.tear_down(box)
    assert retried.done and sky.clusters == {} and box.torn_down_at is not None


def test_a_cluster_that_cannot_be_made_reachable_is_a_failed_launch(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    cluster = box.handle["cluster"]
    (remote / f"{cluster}.no-status").touch()
    with pytest.raises(EngineError, match=rf"Cluster {cluster} is up, but .*status {cluster}.* exited 1"):
        eng.wait_ready(box, 30)
    assert box.ready_at is None and eng.tear_down(box).done and sky.clusters == {}


def test_a_down_whose_wait_is_cut_short_is_named_and_still_finishes(tmp_path: Path, remote: Path) -> None:
    """A down SkyPilot takes longer than the engine waits for: reported as not done, with the command to make
    sure, while the request it was sent still takes the cluster down."""
    sky = FakeSky()
    eng = engine(tmp_path, sky, call_timeout_s=0.5)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    cluster = box.handle["cluster"]
    gate = sky.down_gates[cluster] = threading.Event()
    result = eng.tear_down(box)
    assert not result.done and result.command == f"sky down {cluster}" and "did not finish" in result.message
    assert sky.called("down") == [cluster] and cluster in sky.clusters
    gate.set()  # SkyPilot finishes the request it was sent
    deadline = time.monotonic() + 30
    while sky.clusters and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sky.clusters == {}


def test_a_cluster_already_gone_counts_as_down(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    del sky.clusters[box.handle["cluster"]]  # SkyPilot's autostop downed it
    result = eng.tear_down(box)
    assert result.done and "gone" in result.message


def test_a_launch_still_in_flight_is_cancelled_and_downed(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    cluster = box.handle["cluster"]
    gate = sky.launch_gates[cluster] = threading.Event()
    waiting: list[BaseException] = []

    def wait() -> None:
        try:
            eng.wait_ready(box, 60)
        except EngineError as exc:
            waiting.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    result = eng.tear_down(box)  # Ctrl-C while the cluster provisions
    assert result.done and "launch cancelled" in result.message
    assert sky.cancelled == [box.handle["launch_request"]] and sky.clusters == {}
    gate.set()
    waiter.join(30)
    assert waiting and "downed while it launched" in str(waiting[0])


def test_a_launch_that_never_comes_up_times_out(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    gate = sky.launch_gates[box.handle["cluster"]] = threading.Event()
    try:
        with pytest.raises(EngineError, match="did not finish the launch of"):
            eng.wait_ready(box, 0.5)
        assert eng.tear_down(box).done and sky.clusters == {}
    finally:
        gate.set()


def test_a_launch_request_that_could_not_be_sent_is_reported_and_still_downed(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    cluster = engine(tmp_path, FakeSky()).launch(request("a")).handle["cluster"]  # the same token: the same name
    sky.submit_errors[cluster] = ConnectionError("API server refused the connection")
    box = eng.launch(request("a"))
    with pytest.raises(EngineError, match=r"did not take the launch.*refused the connection"):
        eng.wait_ready(box, 5)
    result = eng.tear_down(box)  # the request may have reached the server: a down is still asked for
    assert result.done and sky.called("down") == [cluster]


def test_a_script_past_its_deadline_is_killed_with_its_children(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    outcome = eng.run(box, script(tmp_path, "sleep 300 & sleep 300; wait\n"), 1)
    assert outcome.timed_out and outcome.returncode is None
    pid = int((remote / box.handle["cluster"] / "gpuscout-trial" / "trial.pid").read_text())
    assert _group_ends(pid), "the remote script's process group outlived its deadline"
    assert eng.tear_down(box).done


def test_stopping_during_the_run_keeps_what_finished(tmp_path: Path, remote: Path) -> None:
    """The driver's stop path (Ctrl-C, SIGTERM, --max-usd) fetches while the script runs: the engine stops
    the script first (SIGTERM to its group, as the deadline does), so what it wrote on the way out comes back
    before the cluster, and its disk, are downed."""
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    body = ("mkdir -p results; trap 'echo stopped > results/partial.txt; exit 143' TERM\n"
            "echo '{}' > results/doctor.json; sleep 300 & wait\n")
    outcomes = []
    runner = threading.Thread(target=lambda: outcomes.append(eng.run(box, script(tmp_path, body), 600)))
    runner.start()
    doctor = remote / box.handle["cluster"] / "gpuscout-trial" / "results" / "doctor.json"
    deadline = time.monotonic() + 120
    while not doctor.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    files = eng.fetch(box, tmp_path / "fetched")
    assert sorted(p.name for p in files) == ["doctor.json", "partial.txt"]
    runner.join(120)
    assert outcomes and outcomes[0].returncode == 143
    assert eng.tear_down(box).done and sky.clusters == {}


def test_nothing_runs_on_a_cluster_that_was_downed(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    eng.wait_ready(box, 30)
    assert eng.tear_down(box).done
    with pytest.raises(EngineError, match="already torn down"):
        eng.run(box, script(tmp_path, "echo hi\n"), 10)
    assert eng.fetch(box, tmp_path / "x") == []


def test_the_reported_cost_is_this_trial_s_cluster(tmp_path: Path, remote: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = eng.launch(request("a"))
    cluster = box.handle["cluster"]
    now = box.launched_at.timestamp()
    sky.cost_records = [
        {"name": cluster, "launched_at": int(now - 86400), "total_cost": 99.0},  # an older cluster, same name
        {"name": "someone-else", "launched_at": int(now + 60), "total_cost": 5.0},
        {"name": cluster, "launched_at": int(now + 90), "total_cost": 1.75},
    ]
    assert eng.reported_cost(box) == 1.75
    assert sky.called("cost_report") == [1]
    assert cost_of([{"name": cluster, "launched_at": now, "total_cost": float("nan")}], cluster,
                   box.launched_at) is None


def test_a_box_never_launched_has_no_cost_and_nothing_to_down(tmp_path: Path) -> None:
    sky = FakeSky()
    eng = engine(tmp_path, sky)
    box = Box(request=request("a"), engine="skypilot", launched_at=datetime.now(UTC) - timedelta(minutes=1),
              handle={"cluster": "gst-a-0000-t0k3n1"})
    assert eng.reported_cost(box) is None
    assert eng.tear_down(box).done and sky.called("down") == []


def test_the_engine_finds_sky_as_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sky = FakeSky()
    monkeypatch.setitem(sys.modules, "sky", sky)  # type: ignore[arg-type]
    eng = SkyPilotEngine(tmp_path, token="abc123")
    eng.preflight([request("a")])
    assert [call for call, _ in sky.calls] == ["Task.from_yaml_config"]


def _group_ends(pgid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
