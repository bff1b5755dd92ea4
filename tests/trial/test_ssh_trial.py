"""`gpuscout trial --engine ssh` end to end: the real command, the real script (doctor, then bench, on this
CPU) on candidates that are real OpenSSH servers on 127.0.0.1 (tests/trial/sshd.py), as a user with boxes
rented by hand would run it. Each candidate is its own sshd with its own host key; they share this
machine's one account, so the engine works under a folder of the test's (GPUSCOUT_SSH_REMOTE_DIR) and
what a run left behind is read from /proc by the session id its keeper got.

The boxes differ the way real ones do, not in the script (which is byte for byte the same on all): the
offer a box is checked against (a box that is not what its offer promises makes the doctor say
*return*), and what happens on the box (the bench process killed half way, as the kernel's OOM killer
would). Slow on purpose: each trial runs gpuscout's doctor and bench for real (about a minute each on
a 2-core machine)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from trial.sshd import SshServer, client_config, make_user_key, missing_reason, session_processes, sshd

pytestmark = [pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or ""), pytest.mark.slow]

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src"
JOB = ROOT / "examples" / "tiny-finetune.toml"
TRIAL_S = 900  # the bound on one whole trial here: a failure, not a hang, if the machine is that slow


@dataclass(frozen=True)
class Fleet:
    boxes: tuple[SshServer, ...]
    config: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("fleet")
    key = make_user_key(folder / "user")
    with ExitStack() as stack:
        boxes = tuple(stack.enter_context(sshd(folder / f"box{i}", key)) for i in range(3))
        yield Fleet(boxes, client_config(folder / "client", key))


# An offer this CPU box can pass as: no vCPU or RAM promise the doctor would hold the 2 cores to, so its
# verdict is "inconclusive" (the GPU could not be looked at with --device cpu) and the script benches.
KEEP = """
[[offer]]
id = "{id}"
provider = "TestCloud"
product = "a box rented by hand"
tier = "on-demand"
gpu = "h100-sxm5-80gb"
gpu_count = 1
price = {price}
price_basis = "instance"
currency = "USD"
billing_increment_s = 1
startup_s = 0
idle_tail_s = 0
observed_at = 2026-09-20
source = "the test's own sheet"
"""
# An offer promising 64 vCPUs: the doctor finds 2 and says return.
RETURN = KEEP.replace('currency = "USD"', 'currency = "USD"\nvcpus = 64')


def sheet(tmp_path: Path, *offers: tuple[str, str, float]) -> Path:
    path = tmp_path / "sheet.toml"
    path.write_text("".join(template.format(id=offer_id, price=price) for offer_id, template, price in offers))
    return path


def start_trial(tmp_path: Path, fleet: Fleet, offers: Path, targets: dict[str, SshServer],
                *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "gpuscout", "trial", str(JOB), "--offers", str(offers), "--engine", "ssh",
            "--candidates", ",".join(targets), *[f"--ssh={o}={b.target}" for o, b in targets.items()],
            "--install", "current", "--device", "cpu", "--runs", "1", "--warmup", "0", "--repeats", "1",
            "--yes", "-o", str(tmp_path / "out"), *extra]
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "80", "GPUSCOUT_SSH_CONFIG": str(fleet.config),
           "GPUSCOUT_SSH_REMOTE_DIR": str(tmp_path / "remote")}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)


def finish(child: subprocess.Popen[str], timeout_s: float = TRIAL_S) -> tuple[str, str]:
    """The trial's stdout and stderr, once it ended."""
    try:
        return child.communicate(timeout=timeout_s)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def flat(screen: str) -> str:
    """A screen with its 80-column line breaks undone, to find a sentence wherever it was wrapped."""
    return " ".join(screen.split())


def remote_dir(tmp_path: Path, candidate: str, timeout_s: float = TRIAL_S) -> Path:
    """The candidate's folder on its box, once the engine made it."""
    deadline = time.monotonic() + timeout_s
    while not (found := sorted((tmp_path / "remote").glob(f"{candidate}-*"))):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{candidate}: the engine never made its folder on the box")
        time.sleep(0.1)
    return found[0]


def wait_for_step(folder: Path, step: str, child: subprocess.Popen[str], timeout_s: float = TRIAL_S) -> None:
    """Until the script on the box has logged `step` (results/steps.log: '<UTC time> <step>')."""
    log = folder / "results" / "steps.log"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        if log.exists() and any(line.split(" ", 1)[-1] == step for line in log.read_text().splitlines()):
            return
        time.sleep(0.1)
    raise AssertionError(f"{folder.name}: the script never reached {step!r} "
                         f"(trial exit {child.poll()}; steps: {log.read_text() if log.exists() else 'none'})")


def keeper_sid(folder: Path) -> int:
    return int((folder / "run.started").read_text())


@pytest.fixture
def sessions() -> Iterator[list[int]]:
    """The boxes' run sessions; whatever a failing test left of them is killed after it."""
    started: list[int] = []
    yield started
    for sid in started:
        for pid in session_processes(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def kill_bench_when_it_runs(folder: Path, child: subprocess.Popen[str], killed: list[int]) -> None:
    """On the box: SIGKILL the bench process once the script has started it, as the OOM killer would."""
    wait_for_step(folder, "bench", child)
    sid = keeper_sid(folder)
    deadline = time.monotonic() + TRIAL_S
    while not killed and time.monotonic() < deadline and child.poll() is None:
        for pid in session_processes(sid):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"gpuscout" in argv and b"bench" in argv:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
        time.sleep(0.05)


def test_three_boxes_run_the_same_script_one_benches_one_is_returned_one_fails_mid_bench(
        fleet: Fleet, tmp_path: Path, sessions: list[int]) -> None:
    offers = sheet(tmp_path, ("box-keep", KEEP, 2.0), ("box-return", RETURN, 1.5), ("box-fail", KEEP, 1.0))
    targets = dict(zip(("box-keep", "box-return", "box-fail"), fleet.boxes, strict=True))
    child = start_trial(tmp_path, fleet, offers, targets)
    killed: list[int] = []
    killer = threading.Thread(target=kill_bench_when_it_runs,
                              args=(remote_dir(tmp_path, "box-fail"), child, killed), daemon=True)
    killer.start()
    out, err = finish(child)
    killer.join(timeout=60)
    folders = {name: remote_dir(tmp_path, name, 0) for name in targets}
    sessions.extend(keeper_sid(f) for f in folders.values())
    assert killed, f"the bench on box-fail was never seen running\n{out}\n{err}"
    said, shown = flat(err), flat(out)

    # the screens: the predicted bill first, then each box's end and the decision
    assert "trial of" in shown and "engine ssh" in shown and "predicted trial bill" in shown
    assert "box-keep: benched" in said and "box-fail: failed (the bench failed)" in said
    assert "box-return: returned (the doctor said return" in said
    for name, box in targets.items():  # a hand-rented box: nothing stopped, the billing named
        assert f"{name}: torn down: {box.target}: a box you rented yourself" in said
    assert said.count("keeps billing until you stop it at your provider") == 3
    assert "Only box-keep finished its bench" in shown
    assert child.returncode == 0, f"{out}\n{err}"  # the one that benched is named
    assert max(len(line) for line in out.splitlines()) <= 80

    # what came back: every finished result, from every box
    got = {name: tmp_path / "out" / name / "results" for name in targets}
    assert (got["box-keep"] / "doctor.json").is_file() and (got["box-keep"] / "bench.json").is_file()
    assert (got["box-return"] / "doctor.json").is_file() and not (got["box-return"] / "bench.json").exists()
    assert (got["box-fail"] / "doctor.json").is_file()
    assert "bench exit 137" in (got["box-fail"] / "steps.log").read_text()  # SIGKILL: 128 + 9

    # the same script on every box, but for its header (the offer and the box's creation time)
    bodies = {(f / "trial.sh").read_text().split("# ---- the same on every candidate from here on ----")[1]
              for f in folders.values()}
    assert len(bodies) == 1
    # and nothing the trial started is left running on any box
    assert all(session_processes(sid) == [] for sid in sessions)


def test_ctrl_c_during_the_run_tears_everything_down_and_keeps_what_finished(
        fleet: Fleet, tmp_path: Path, sessions: list[int]) -> None:
    offers = sheet(tmp_path, ("box-a", KEEP, 2.0), ("box-b", KEEP, 1.0))
    child = start_trial(tmp_path, fleet, offers, {"box-a": fleet.boxes[0], "box-b": fleet.boxes[1]})
    try:
        folders = [remote_dir(tmp_path, "box-a"), remote_dir(tmp_path, "box-b")]
        for folder in folders:  # each box has finished its doctor and is in the bench
            wait_for_step(folder, "bench", child)
            sessions.append(keeper_sid(folder))
        assert all(session_processes(sid) for sid in sessions), "a box had finished before the Ctrl-C"
        child.send_signal(signal.SIGINT)
    finally:
        out, err = finish(child)
    assert child.returncode == 130, f"{out}\n{err}"
    said = flat(err)
    assert "stopping on" in said
    for name in ("box-a", "box-b"):
        assert f"{name}: torn down:" in said
        assert (tmp_path / "out" / name / "results" / "doctor.json").is_file()  # finished before: kept
    assert all(session_processes(sid) == [] for sid in sessions), "a remote run outlived the Ctrl-C"


def test_the_money_guard_stops_every_box_when_the_running_bill_reaches_max_usd(
        fleet: Fleet, tmp_path: Path, sessions: list[int]) -> None:
    """Priced at $720 an hour ($0.20 a second) and predicted with 3 s of setup, the trial starts under
    --max-usd $4; the two boxes' running bill reaches it about ten seconds in, during the doctor."""
    offers = sheet(tmp_path, ("box-a", KEEP, 720.0), ("box-b", KEEP, 720.0))
    child = start_trial(tmp_path, fleet, offers, {"box-a": fleet.boxes[0], "box-b": fleet.boxes[1]},
                        "--max-usd", "4", "--setup-minutes", "0.05")
    out, err = finish(child)
    folders = [f for name in ("box-a", "box-b") for f in sorted((tmp_path / "remote").glob(f"{name}-*"))]
    sessions.extend(keeper_sid(f) for f in folders if (f / "run.started").exists())
    said = flat(err)
    assert "predicted trial bill" in flat(out), f"{out}\n{err}"  # it started: the prediction was under the limit
    assert "the --max-usd limit of $4.00" in said
    for name in ("box-a", "box-b"):
        assert f"{name}: torn down:" in said
    assert "benched" not in said
    assert all(session_processes(sid) == [] for sid in sessions), "a remote run outlived the money guard"
