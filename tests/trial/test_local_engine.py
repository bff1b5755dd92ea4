"""The local engine against real processes: exit codes, the time bound, fetch, and tear-down of a live script."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from gpuscout.trial.engine import LaunchRequest
from gpuscout.trial.engines.local import LocalEngine
from processes import descendants, gone, running


def request(name: str = "a", wall_s: float = 60.0) -> LaunchRequest:
    return LaunchRequest(candidate=name, offer_id=f"offer-{name}", provider="test", region="", instance_type="",
                         gpu="rtx-4090", gpu_count=1, spot=False, disk_gb=10, max_wall_s=wall_s)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "script.sh"
    path.write_text("set -u\ncd \"$(dirname \"$0\")\"\nmkdir -p results\n" + body)
    return path


def test_a_script_runs_in_its_folder_and_its_results_come_back(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "boxes")
    box = engine.launch(request())
    engine.wait_ready(box, 10)
    assert box.ready_at is not None and box.ready_at >= box.launched_at
    outcome = engine.run(box, script(tmp_path, "echo hello; echo 42 > results/answer.txt\n"
                                               "mkdir -p results/deep; echo x > results/deep/f; exit 3\n"), 60)
    assert outcome.returncode == 3 and not outcome.timed_out
    assert "hello" in outcome.log_tail
    files = engine.fetch(box, tmp_path / "back")
    assert sorted(p.relative_to(tmp_path / "back").as_posix() for p in files) == ["answer.txt", "deep/f"]
    assert (tmp_path / "back" / "answer.txt").read_text() == "42\n"
    down = engine.tear_down(box)
    assert down.done and box.torn_down_at is not None
    assert engine.tear_down(box).done  # idempotent


def test_the_time_bound_kills_the_whole_process_group(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "boxes", stop_grace_s=5)
    box = engine.launch(request())
    engine.wait_ready(box, 10)
    body = "sleep 300 &\necho $! > results/child.pid\nwait\n"
    start = time.monotonic()
    outcome = engine.run(box, script(tmp_path, body), 2)
    assert outcome.timed_out and outcome.returncode is None
    assert time.monotonic() - start < 60
    child = int((Path(box.workdir) / "results" / "child.pid").read_text())
    assert gone([child], 10), "the script's background child outlived the time bound"
    assert engine.tear_down(box).done


def test_tear_down_stops_a_running_script_and_its_children(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "boxes", stop_grace_s=5)
    box = engine.launch(request())
    engine.wait_ready(box, 10)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(engine.run(
        box, script(tmp_path, "sleep 300 &\nsleep 300 &\nwait\n"), 600)))
    worker.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ("pid" not in box.handle or len(descendants(int(box.handle["pid"]))) < 2):
        time.sleep(0.05)
    pids = [int(box.handle["pid"]), *descendants(int(box.handle["pid"]))]
    assert len(running(pids)) == 3
    down = engine.tear_down(box)
    worker.join(60)
    assert not worker.is_alive()
    assert down.done and "stopped its script" in down.message
    assert gone(pids, 10)
    assert box.torn_down_at is not None and box.torn_down_at <= datetime.now(UTC)


def test_tear_down_of_a_box_that_never_ran_is_safe(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "boxes")
    box = engine.launch(request())
    assert engine.tear_down(box).done
    assert engine.fetch(box, tmp_path / "back") == []
    assert engine.reported_cost(box) is None
