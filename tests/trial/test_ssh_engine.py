"""The ssh engine against a real OpenSSH server started here on 127.0.0.1 (tests/trial/sshd.py): two sshd on
two ports are two candidates. The "box" is this machine, so what a run left behind on it is read straight
from /proc by the session id the engine's keeper got."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuscout.trial.engine import Box, EngineError, LaunchRequest, RunOutcome
from gpuscout.trial.engines.ssh import SshEngine
from trial.sshd import SshServer, UserKey, client_config, make_user_key, missing_reason, session_processes, sshd

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")

SRC = Path(__file__).parents[2] / "src"


@dataclass(frozen=True)
class Boxes:
    a: SshServer
    b: SshServer
    key: UserKey
    config: Path
    folder: Path


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boxes]:
    folder = tmp_path_factory.mktemp("sshd")
    key = make_user_key(folder / "user")
    with ExitStack() as stack:
        a = stack.enter_context(sshd(folder / "a", key))
        b = stack.enter_context(sshd(folder / "b", key))
        yield Boxes(a, b, key, client_config(folder / "client", key), folder)


def request(target: str | None, candidate: str = "cand-a", max_wall_s: float = 600) -> LaunchRequest:
    return LaunchRequest(candidate=candidate, offer_id=f"offer-{candidate}", provider="autodl", region="",
                         instance_type="", gpu="rtx-4090", gpu_count=1, spot=False, disk_gb=20,
                         max_wall_s=max_wall_s, ssh_target=target)


def engine(boxes: Boxes, remote: Path, **options: object) -> SshEngine:
    return SshEngine(config_file=boxes.config, remote_dir=str(remote), **options)  # type: ignore[arg-type]


def ready_box(eng: SshEngine, server: SshServer, candidate: str = "cand-a") -> Box:
    box = eng.launch(request(server.target, candidate))
    eng.wait_ready(box, timeout_s=120)
    return box


def script(tmp_path: Path, body: str, name: str = "trial.sh") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def sessions() -> Iterator[list[int]]:
    """The remote runs' sessions a test started; whatever a failing test left of them is killed after it, so
    one failure never leaves processes running on this machine."""
    started: list[int] = []
    yield started
    for sid in started:
        for pid in session_processes(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def started_pid(workdir: str | Path, timeout_s: float = 120) -> int:
    """The keeper's pid (= its session and process group), once the box has started the run."""
    started = Path(workdir) / "run.started"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = started.read_text().strip() if started.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"the run never started in {workdir}")


def wait_until_empty(sid: int, timeout_s: float = 60) -> list[int]:
    """The processes of session `sid` still alive once they are all gone, or at the bound (then the leftovers)."""
    deadline = time.monotonic() + timeout_s
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_two_candidates_get_their_own_folder_and_host_key_in_a_known_hosts_of_this_run(
        boxes: Boxes, tmp_path: Path) -> None:
    user_known = Path.home() / ".ssh" / "known_hosts"
    before = user_known.read_bytes() if user_known.exists() else None
    eng = engine(boxes, tmp_path / "remote")
    a, b = ready_box(eng, boxes.a, "cand-a"), ready_box(eng, boxes.b, "cand/b x")
    assert a.ready_at is not None and b.ready_at is not None and a.launched_at <= a.ready_at
    assert Path(a.workdir).is_dir() and Path(b.workdir).is_dir() and a.workdir != b.workdir
    assert Path(b.workdir).name.startswith("cand_b_x-")  # the candidate's name made a safe folder name
    known = (eng._state / "known_hosts").read_text()
    for server in (boxes.a, boxes.b):
        assert f"[127.0.0.1]:{server.port}" in known
        assert server.host_key.with_suffix(".pub").read_text().split()[1] in known
    assert (user_known.read_bytes() if user_known.exists() else None) == before  # the user's file untouched
    eng.close()
    assert not eng._state.exists()


def test_run_gives_the_exit_code_and_log_and_fetch_brings_back_the_results(boxes: Boxes, tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote")
    box = ready_box(eng, boxes.a)
    outcome = eng.run(box, script(tmp_path, """\
        echo "running in $PWD"
        mkdir -p results/bench
        echo '{"ok": true}' > results/doctor.json
        printf 'x%.0s' $(seq 1 10) > results/bench/run-1.json
        echo "bench failed" >&2
        exit 3
        """), timeout_s=120)
    assert outcome == RunOutcome(returncode=3, log_tail=f"running in {box.workdir}\nbench failed\n", timed_out=False)
    files = eng.fetch(box, tmp_path / "back")
    assert files == [tmp_path / "back" / "bench" / "run-1.json", tmp_path / "back" / "doctor.json"]
    assert files[1].read_text() == '{"ok": true}\n' and files[0].read_text() == "x" * 10

    ok = eng.run(box, script(tmp_path, "echo done\n"), timeout_s=120)
    assert ok.returncode == 0 and ok.log_tail == "done\n" and not ok.timed_out


def test_a_script_that_wrote_no_results_fetches_nothing(boxes: Boxes, tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote")
    box = ready_box(eng, boxes.b)
    assert eng.run(box, script(tmp_path, "exit 0\n"), timeout_s=120).returncode == 0
    assert eng.fetch(box, tmp_path / "back") == []


def test_results_that_point_outside_their_folder_are_not_written_here(boxes: Boxes, tmp_path: Path) -> None:
    """A box is someone else's machine: a link in its results must not write outside the local folder."""
    eng = engine(boxes, tmp_path / "remote")
    box = ready_box(eng, boxes.a)
    outside = tmp_path / "outside.txt"
    eng.run(box, script(tmp_path, f"mkdir -p results && ln -s {outside} results/evil && echo ok > results/a\n"),
            timeout_s=120)
    with pytest.raises(EngineError, match="not a readable archive"):
        eng.fetch(box, tmp_path / "back")
    assert not outside.exists()


def test_the_timeout_kills_the_whole_process_tree_on_the_box(boxes: Boxes, tmp_path: Path,
                                                             sessions: list[int]) -> None:
    eng = engine(boxes, tmp_path / "remote", kill_grace_s=2)
    box = ready_box(eng, boxes.a)
    body = """\
        sleep 600 &
        bash -c 'trap "" TERM; sleep 600' &
        echo started
        sleep 600
        """
    began = time.monotonic()
    outcome = eng.run(box, script(tmp_path, body), timeout_s=5)
    assert outcome.timed_out and outcome.returncode is None and "started" in outcome.log_tail
    assert time.monotonic() - began < 300  # bounded (the script alone would take 600 s)
    sid = started_pid(box.workdir)
    sessions.append(sid)
    assert wait_until_empty(sid) == []  # the one that ignores TERM too (KILL after the grace)
    assert eng.tear_down(box).done


def test_what_a_finished_script_left_running_is_stopped(boxes: Boxes, tmp_path: Path, sessions: list[int]) -> None:
    eng = engine(boxes, tmp_path / "remote")
    box = ready_box(eng, boxes.b)
    outcome = eng.run(box, script(tmp_path, "sleep 600 > /dev/null 2>&1 &\necho left one running\n"), timeout_s=120)
    assert outcome.returncode == 0
    sessions.append(started_pid(box.workdir))
    assert wait_until_empty(sessions[-1]) == []


def test_tear_down_during_a_run_kills_it_says_what_keeps_billing_and_is_idempotent(
        boxes: Boxes, tmp_path: Path, sessions: list[int]) -> None:
    eng = engine(boxes, tmp_path / "remote")
    box = ready_box(eng, boxes.a)
    outcomes: list[RunOutcome] = []
    runner = threading.Thread(target=lambda: outcomes.append(eng.run(box, script(tmp_path, "sleep 600\n"), 600)))
    runner.start()
    sid = started_pid(box.workdir)
    sessions.append(sid)
    while box.handle.get("state") != "running":  # the engine has the pid: tear-down knows what to kill
        time.sleep(0.05)
    first = eng.tear_down(box)
    runner.join(timeout=300)
    assert not runner.is_alive()
    assert wait_until_empty(sid) == []
    assert first.done and first.command == ""
    assert "keeps billing until you stop it at your provider" in first.message and boxes.a.target in first.message
    assert box.torn_down_at is not None
    when = box.torn_down_at
    assert eng.tear_down(box) == first and box.torn_down_at == when  # a second call changes nothing
    assert outcomes and outcomes[0].returncode is None and not outcomes[0].timed_out


def test_tear_down_that_cannot_reach_the_box_names_the_command_to_stop_it(boxes: Boxes, tmp_path: Path) -> None:
    """The run was started, then the box stopped answering: not done, and the exact command is given."""
    eng = engine(boxes, tmp_path / "remote", connect_timeout_s=2, command_timeout_s=5, kill_grace_s=1)
    port = closed_port()
    box = eng.launch(request(f"{boxes.a.user}@127.0.0.1:{port}"))
    box.workdir = str(tmp_path / "remote" / "gone")
    box.handle.update(pid="424242", state="running")
    down = eng.tear_down(box)
    assert not down.done
    assert down.command == f"ssh -p {port} {boxes.a.user}@127.0.0.1 'kill -TERM -- -424242'"
    assert "may still run there" in down.message and "keeps billing" in down.message


def test_a_failed_launch_tears_down_to_nothing(boxes: Boxes, tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote")
    with pytest.raises(EngineError, match="needs the box's address"):
        eng.launch(request(None))
    with pytest.raises(EngineError, match="not a host name"):
        eng.launch(request("root@-oProxyCommand=touch:22"))
    when = eng.launch(request(boxes.a.target)).launched_at
    box = Box(request=request("root@-bad:22"), engine="ssh", launched_at=when)
    down = eng.tear_down(box)
    assert down.done and "nothing started" in down.message


def test_a_key_the_box_refuses_fails_at_once_with_the_fix(boxes: Boxes, tmp_path: Path) -> None:
    other = make_user_key(tmp_path / "other")
    eng = SshEngine(config_file=client_config(tmp_path / "client", other), remote_dir=str(tmp_path / "remote"))
    box = eng.launch(request(boxes.a.target))
    began = time.monotonic()
    with pytest.raises(EngineError) as raised:
        eng.wait_ready(box, timeout_s=600)
    assert time.monotonic() - began < 300  # refused, not retried until the bound
    assert "ssh-copy-id -p" in str(raised.value) and str(boxes.a.port) in str(raised.value)


def test_a_box_that_never_answers_is_given_up_at_the_bound(boxes: Boxes, tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote", connect_timeout_s=2)
    port = closed_port()
    box = eng.launch(request(f"{boxes.a.user}@127.0.0.1:{port}"))
    with pytest.raises(EngineError) as raised:
        eng.wait_ready(box, timeout_s=3)
    assert "not reachable over ssh within 3 s" in str(raised.value)
    assert f"ssh -p {port} {boxes.a.user}@127.0.0.1" in str(raised.value)


def test_a_box_that_changes_identity_mid_trial_is_refused(boxes: Boxes, tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote")
    with sshd(tmp_path / "first", boxes.key) as first:
        box = ready_box(eng, first)
        port = first.port
    # same address, a new host key
    with sshd(tmp_path / "second", boxes.key, port=port), pytest.raises(EngineError, match="host key changed"):
        eng.run(box, script(tmp_path, "echo never\n"), timeout_s=120)
    assert not list(Path(box.workdir).glob("run.*"))  # nothing ran on the impostor


def test_with_a_control_master_one_connection_is_shared_and_closed_at_tear_down(boxes: Boxes,
                                                                                 tmp_path: Path) -> None:
    eng = engine(boxes, tmp_path / "remote", control_master=True)
    box = ready_box(eng, boxes.b)
    assert [p for p in eng._state.iterdir() if p.is_socket()]  # the master's socket
    assert eng.run(box, script(tmp_path, "echo via master\n"), timeout_s=120).log_tail == "via master\n"
    assert eng.tear_down(box).done
    assert not [p for p in eng._state.iterdir() if p.is_socket()]


def test_bad_engine_options_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"identity file .* does not exist"):
        SshEngine(identity_file=tmp_path / "nope")
    with pytest.raises(EngineError, match="absolute path"):
        SshEngine(remote_dir="relative/dir")
    with pytest.raises(EngineError, match="OpenSSH client"):
        SshEngine(ssh="no-such-ssh-binary")


CHILD = """
import json, sys
from pathlib import Path
from gpuscout.interrupts import stop_on_signals
from gpuscout.trial.engine import LaunchRequest
from gpuscout.trial.engines.ssh import SshEngine

config, remote, target, body = sys.argv[1:5]
eng = SshEngine(config_file=Path(config), remote_dir=remote)
box = eng.launch(LaunchRequest("cand", "o", "autodl", "", "", "rtx-4090", 1, False, 20, 600, target))
eng.wait_ready(box, 120)
print(json.dumps({"workdir": box.workdir}), flush=True)
try:
    with stop_on_signals(announce=False):
        eng.run(box, Path(body), 600)
except KeyboardInterrupt as stop:
    print(json.dumps({"stopped": str(stop), "state": box.handle.get("state")}), flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_ctrl_c_or_sigterm_during_a_remote_run_leaves_nothing_running_there(
        boxes: Boxes, tmp_path: Path, sig: signal.Signals, sessions: list[int]) -> None:
    body = script(tmp_path, """\
        sleep 600 &
        mkdir -p results && echo first > results/finished-1.json
        sleep 600
        """)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(boxes.config), str(tmp_path / "remote"),
                              boxes.a.target, str(body)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert child.stdout is not None
        workdir = Path(json.loads(child.stdout.readline())["workdir"])
        sid = started_pid(workdir)
        sessions.append(sid)
        finished = workdir / "results" / "finished-1.json"
        while not finished.exists() and child.poll() is None:
            time.sleep(0.05)
        assert session_processes(sid), "the remote run was not running when the signal was sent"
        child.send_signal(sig)
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert sig.name in out and '"state": "killed"' in out
    assert wait_until_empty(sid) == []
    assert finished.read_text() == "first\n"  # what finished before the signal is kept on the box


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, read and closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_engine_built_without_arguments_reads_its_options_from_the_environment(
        boxes: Boxes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line builds the engine with no arguments: the key, config and folder come from there."""
    monkeypatch.setenv("GPUSCOUT_SSH_CONFIG", str(boxes.config))
    monkeypatch.setenv("GPUSCOUT_SSH_REMOTE_DIR", str(tmp_path / "data-disk"))
    eng = SshEngine()
    box = ready_box(eng, boxes.a)
    assert Path(box.workdir).parent == tmp_path / "data-disk"
    monkeypatch.setenv("GPUSCOUT_SSH_IDENTITY", str(tmp_path / "no-key"))
    with pytest.raises(EngineError, match="GPUSCOUT_SSH_IDENTITY"):
        SshEngine()


def test_a_box_gone_unreachable_mid_run_is_named_with_its_command_and_no_worker_outwaits_it(
        boxes: Boxes, tmp_path: Path, sessions: list[int]) -> None:
    """The box stops taking connections while the script runs (its sshd stopped; the session already open
    lives on, as a cut network would leave it): tear-down cannot kill the run, says so with the command,
    and the thread waiting on the run returns at once instead of at the run's deadline."""
    eng = engine(boxes, tmp_path / "remote", connect_timeout_s=3, command_timeout_s=10, kill_grace_s=1)
    with sshd(tmp_path / "lonely", boxes.key) as server:
        box = ready_box(eng, server)
        outcomes: list[RunOutcome] = []
        runner = threading.Thread(target=lambda: outcomes.append(eng.run(box, script(tmp_path, "sleep 600\n"), 600)))
        runner.start()
        sessions.append(started_pid(box.workdir))
        while box.handle.get("state") != "running":
            time.sleep(0.05)
        server.process.terminate()  # the listener goes; the open sessions stay
        server.process.wait(timeout=60)
        down = eng.tear_down(box)
        runner.join(timeout=120)  # the run's own deadline is 600 s away
    assert not runner.is_alive(), "the run kept waiting on a box that was given up"
    assert outcomes and outcomes[0].returncode is None
    assert not down.done
    assert down.command == f"ssh -p {server.port} {server.user}@127.0.0.1 'kill -TERM -- -{sessions[0]}'"
    assert session_processes(sessions[0]), "the run should still be there: the command above is what stops it"
