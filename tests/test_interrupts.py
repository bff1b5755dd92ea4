"""The stop-signal mechanism with real signals sent to this process: the first stops, the later ones never
cut the cleanup short, a write is never cut short, the exit code names the first signal, and signals a
process was started ignoring (nohup, a background job) stay ignored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuscout import interrupts, outfile
from gpuscout.interrupts import TerminationRequest, deferred_signals, stop_on_signals

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


def kill_self(sig: int) -> None:
    """A real signal to this process; the Python handler runs before this returns (os.kill checks them)."""
    os.kill(os.getpid(), sig)


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_first_signal_stops_and_the_later_ones_are_noted_not_raised(first: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    cleaned = []
    with stop_on_signals(announce=False) as stops:
        with pytest.raises(TerminationRequest) as raised:
            kill_self(first)
        for later in (signal.SIGINT, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            kill_self(later)  # the cleanup goes on
        cleaned.append(True)
    assert raised.value.signum == first and isinstance(raised.value, KeyboardInterrupt)
    assert cleaned and stops.signum == first and stops.repeats == 4
    assert stops.exit_code() == 128 + first
    assert {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS} == before  # handlers restored


def test_nested_scopes_share_the_first_signal_and_only_the_outer_restores() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(announce=False) as outer:
        with stop_on_signals(announce=False) as inner, pytest.raises(TerminationRequest):
            kill_self(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is not before  # the outer scope still holds it
        kill_self(signal.SIGINT)  # still stopping: ignored
        with stop_on_signals(announce=False) as late:
            assert late.signum == signal.SIGTERM  # opened while stopping: it shares that stop
    assert outer.signum == inner.signum == signal.SIGTERM and outer.repeats == 1
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_inside_a_deferred_block_acts_once_the_block_ends() -> None:
    steps = []
    with stop_on_signals(announce=False) as stops, pytest.raises(TerminationRequest) as raised:
        with deferred_signals():
            kill_self(signal.SIGTERM)
            kill_self(signal.SIGINT)
            steps.append("after the signals, still inside")
        steps.append("never: the held signal is raised as the block ends")
    assert steps == ["after the signals, still inside"] and raised.value.signum == signal.SIGTERM
    assert stops.signum == signal.SIGTERM


def test_ctrl_c_during_the_write_is_held_until_the_file_is_whole(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The signal is sent from inside the write (just before the rename): Python's own Ctrl-C handler
    would raise there and leave the old file; held, it raises after the new file is in place."""
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"n": 0}))
    real_replace = os.replace

    def replace_after_ctrl_c(src: str, dst: Path) -> None:
        kill_self(signal.SIGINT)
        real_replace(src, dst)

    monkeypatch.setattr(outfile.os, "replace", replace_after_ctrl_c)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        outfile.write_atomic(out, json.dumps({"n": 1, "pad": "x" * 100_000}))
    assert json.loads(out.read_text())["n"] == 1
    assert not list(tmp_path.glob(".r.json.*.tmp"))


SIGTERM_WRITER = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from gpuscout import outfile
    out = Path(sys.argv[1])
    real_replace = os.replace
    def replace_after_sigterm(src, dst):
        os.kill(os.getpid(), signal.SIGTERM)  # SIGTERM's default: the process would die here, mid-write
        real_replace(src, dst)
    outfile.os.replace = replace_after_sigterm
    outfile.write_atomic(out, json.dumps({"n": 2, "pad": "x" * 1_000_000}))
    print("never reached: SIGTERM's default ends the process once the file is whole")
""")


def test_sigterm_during_the_write_ends_the_process_after_the_file_is_whole(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"n": 1}))
    done = subprocess.run([sys.executable, "-c", SIGTERM_WRITER, str(out)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "never reached" not in done.stdout
    assert json.loads(out.read_text())["n"] == 2
    assert not list(tmp_path.glob(".r.json.*.tmp"))


IGNORING = textwrap.dedent("""
    import os, signal
    from gpuscout.interrupts import hold_stop_signals
    stops = hold_stop_signals()
    os.kill(os.getpid(), signal.SIGHUP)  # ignored since the start (nohup): stays ignored
    print("alive after SIGHUP", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except KeyboardInterrupt as stop:
        print("stopped by", signal.Signals(stop.signum).name)
""")


def test_signals_a_process_was_started_ignoring_stay_ignored() -> None:
    done = subprocess.run([sys.executable, "-c", IGNORING], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["alive after SIGHUP True", "stopped by SIGTERM"]


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the signal mask from /proc")
def test_a_child_starts_with_the_stop_signals_blocked_and_a_signal_meanwhile_waits_for_the_block() -> None:
    reached = []
    with stop_on_signals(announce=False) as stops, pytest.raises(TerminationRequest), interrupts.signals_blocked():
        child = subprocess.Popen([sys.executable, "-c", "print(open('/proc/self/status').read())"],
                                 stdout=subprocess.PIPE, text=True)
        kill_self(signal.SIGTERM)
        reached.append("the start went on")
    status, _ = child.communicate(timeout=60)
    blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    wanted = sum(1 << (s - 1) for s in interrupts.STOP_SIGNALS)
    assert blocked & wanted == wanted
    assert reached and stops.signum == signal.SIGTERM
