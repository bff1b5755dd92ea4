"""The `ssh` engine: boxes the user already rented by hand (an AutoDL-style box, a lab machine), reached with
the system's own `ssh` client.

There is nothing to launch or stop: the box was billing before the trial and keeps billing after it, which
tear-down says in words. What the engine does own is every process it starts on the box, and those must not
outlive the trial: the script runs under a small keeper started with `setsid`, so the keeper is the leader of
a session and process group of its own, and its pid (written on the box) names the whole tree. A timeout,
Ctrl-C, SIGTERM or tear-down kills that group over a second connection (TERM, a grace period, then KILL);
the keeper also runs the script under `timeout` as a safety net in case gpuscout itself dies without
cleaning up, and kills whatever the script left running in its group when it ends.

Never hang: every ssh call has `ConnectTimeout`, server keep-alives and a wall-clock bound of its own.
`BatchMode` means ssh never asks for a password or a host key confirmation (there is no one to answer);
host keys go to a known_hosts file of this run only, accepted on first contact and held to for the rest of
the run, so a box that changes identity mid-trial is refused, and the user's own ~/.ssh/known_hosts is
neither read nor written. Files move over the same ssh connection (`cat` up, `tar` down), so the box needs
only a shell, `setsid`, `tar` and `kill`, not an SFTP or rsync server.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from gpuscout.trial.engine import LOG_TAIL_BYTES, Box, EngineError, EngineName, LaunchRequest, RunOutcome, TearDown
from gpuscout.trial.engines.ssh_target import SshTarget, parse_target

RESULTS_DIR = "results"  # under the box's workdir: what `fetch` brings back


# The keeper, written next to the script on the box and started with `setsid`. $1: the wall-clock bound of
# the safety-net `timeout`. run.pid exists exactly while the keeper runs (removed last), so the kill over a
# second connection never hits a process group whose number the system gave to someone else; run.started
# keeps the pid for the starter, which may look only after a quick script has already ended.
KEEPER = r"""# gpuscout trial: keeps one run of trial.sh on this box (started with setsid: its pid is the group's)
cd "$(dirname "$0")" || exit 97
echo $$ > run.pid.part && cp run.pid.part run.started && mv -f run.pid.part run.pid
if command -v timeout >/dev/null 2>&1; then
  timeout --foreground -s TERM -k 30 "$1" bash trial.sh > run.log 2>&1 < /dev/null
else
  bash trial.sh > run.log 2>&1 < /dev/null
fi
echo $? > run.rc.part && mv -f run.rc.part run.rc
trap '' TERM
kill -TERM -- -$$ 2>/dev/null
rm -f run.pid
"""
KEEPER_NAME = ".gpuscout-keeper.sh"

_LIVE = ("starting", "running")  # box.handle["state"] while the engine may have a process on the box

# ssh exits 255 on its own errors (connection, authentication, host key); these never heal by retrying.
_FATAL = (
    ("Permission denied", "the box refused the login: ssh here runs without a password prompt (BatchMode), so "
     "the box must accept your key; install it once with `ssh-copy-id -p {port} {dest}`, or name the key "
     "in GPUSCOUT_SSH_IDENTITY"),
    ("Host key verification failed", "the box's host key changed during this trial (a different machine now "
     "answers at {target}): check the address with your provider and start the trial again"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "the box's host key changed during this trial (a different "
     "machine now answers at {target}): check the address with your provider and start the trial again"),
    ("Could not resolve hostname", "the host name does not resolve: check the address your provider gave"),
    ("Bad configuration option", "the ssh client rejected its configuration; check the ssh config file given"),
    ("no such identity", "the ssh identity file does not exist; check the path given"),
)


@dataclass(frozen=True)
class _Result:
    returncode: int
    stdout: str
    stderr: str


class SshEngine:
    """One trial's ssh engine: its own known_hosts (and control sockets) in a folder removed by `close`."""

    name: EngineName = "ssh"

    def __init__(self, *, identity_file: Path | None = None, config_file: Path | None = None,
                 connect_timeout_s: float = 15.0, command_timeout_s: float = 60.0, kill_grace_s: float = 10.0,
                 fetch_timeout_s: float = 900.0, control_master: bool = False, remote_dir: str | None = None,
                 ssh: str = "ssh") -> None:
        """`identity_file`, `config_file`, `remote_dir` left out are read from GPUSCOUT_SSH_IDENTITY,
        GPUSCOUT_SSH_CONFIG and GPUSCOUT_SSH_REMOTE_DIR (the command line builds the engine with no
        arguments). `remote_dir`: the folder on every box the trial works under (default ~/gpuscout-trial);
        give the box's data disk where the home folder is small (AutoDL's is, beside /root/autodl-tmp)."""
        found = shutil.which(ssh)
        if found is None:
            raise EngineError(f"the ssh engine needs the OpenSSH client ({ssh!r} is not on PATH); install it "
                              "(Debian/Ubuntu: apt-get install openssh-client) or use another engine")
        identity_file = identity_file or _env_path("GPUSCOUT_SSH_IDENTITY")
        config_file = config_file or _env_path("GPUSCOUT_SSH_CONFIG")
        if remote_dir is None:
            remote_dir = os.environ.get("GPUSCOUT_SSH_REMOTE_DIR", "")
        if identity_file is not None and not identity_file.is_file():
            raise EngineError(f"ssh identity file {identity_file} does not exist; give the private key you log in "
                              "to the boxes with (GPUSCOUT_SSH_IDENTITY)")
        if config_file is not None and not config_file.is_file():
            raise EngineError(f"ssh config file {config_file} does not exist; give an existing file "
                              "(GPUSCOUT_SSH_CONFIG) or none")
        self._ssh = found
        self._identity = identity_file
        self._config = config_file
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.kill_grace_s = kill_grace_s
        self.fetch_timeout_s = fetch_timeout_s
        self._control_master = control_master
        if remote_dir and (not remote_dir.startswith("/") or any(c.isspace() for c in remote_dir)):
            raise EngineError(f"remote folder {remote_dir!r}: give an absolute path without spaces "
                              "(GPUSCOUT_SSH_REMOTE_DIR), e.g. /root/autodl-tmp/gpuscout-trial")
        self._remote_dir = remote_dir.rstrip("/") or ""
        # short path on purpose: a control socket's path must fit in a sockaddr_un (about 100 bytes)
        self._state = Path(tempfile.mkdtemp(prefix="gs-ssh-"))
        self._known_hosts = self._state / "known_hosts"
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._state, True)
        self._lock = threading.Lock()  # the driver runs every candidate in a thread of its own
        self._waits: dict[int, subprocess.Popen[bytes]] = {}

    # --- the Engine interface ---------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Box:
        if not request.ssh_target:
            raise EngineError(f"candidate {request.candidate}: the ssh engine needs the box's address as "
                              "user@host:port (a box you rented yourself); give one for every candidate")
        target = parse_target(request.ssh_target)
        return Box(request=request, engine=self.name, launched_at=datetime.now(UTC),
                   handle={"target": str(target)})

    def wait_ready(self, box: Box, timeout_s: float) -> None:
        target = self._target(box)
        deadline = time.monotonic() + timeout_s
        probe = ('printf "home=%s\\n" "$HOME"; '
                 'for t in bash setsid tar kill; do command -v "$t" >/dev/null 2>&1 || printf "missing=%s\\n" "$t"; '
                 'done')
        pause = 1.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineError(f"{target}: not reachable over ssh within {timeout_s:.0f} s "
                                  f"({self._last_error(box)}); check that the box is running and that "
                                  f"`{target.ssh_command()}` logs in")
            result = self._call(target, probe, timeout_s=min(left, self.connect_timeout_s + self.command_timeout_s))
            if result.returncode == 0:
                break
            box.handle["last_error"] = _first_line(result.stderr) or f"exit code {result.returncode}"
            if result.returncode != 255:
                raise EngineError(f"{target}: the login shell failed a plain command (exit code "
                                  f"{result.returncode}: {box.handle['last_error']}); check the account's shell")
            self._raise_if_fatal(target, result.stderr)
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 10.0)
        facts = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        missing = [line.split("=", 1)[1] for line in result.stdout.splitlines() if line.startswith("missing=")]
        if missing:
            raise EngineError(f"{target}: the box lacks {', '.join(missing)}, which the trial needs to run and "
                              "stop its script; install them there (Debian/Ubuntu: apt-get install bash "
                              "util-linux tar procps)")
        base = self._remote_dir
        if not base:
            home = facts.get("home", "").strip()
            if not home.startswith("/"):
                raise EngineError(f"{target}: the account has no home folder ($HOME is {home!r}); give the "
                                  "folder the trial works under in GPUSCOUT_SSH_REMOTE_DIR")
            base = f"{home}/gpuscout-trial"
        stamp = box.launched_at.strftime("%Y%m%dT%H%M%SZ")
        box.workdir = f"{base}/{_safe_name(box.request.candidate)}-{stamp}"
        made = self._call(target, f"mkdir -p {shlex.quote(box.workdir)}", timeout_s=self._small_bound())
        if made.returncode != 0:
            raise EngineError(f"{target}: could not make {box.workdir} ({_first_line(made.stderr)}); check the "
                              "disk and the folder's permissions on the box")
        box.ready_at = datetime.now(UTC)

    def run(self, box: Box, script: Path, timeout_s: float) -> RunOutcome:
        target = self._target(box)
        if not box.workdir:
            raise EngineError(f"{target}: run before the box was ready (wait_ready sets its workdir)")
        work = shlex.quote(box.workdir)
        # the box's own bound sits past ours: it fires only when gpuscout could not stop the run itself
        safety_s = int(timeout_s + self.kill_grace_s + 60)
        start = (f"cd {work} && rm -f run.rc run.pid run.started run.log && cat > trial.sh && "
                 f"printf %s {shlex.quote(KEEPER)} > {KEEPER_NAME} && "
                 f"{{ setsid bash {KEEPER_NAME} {safety_s} < /dev/null > /dev/null 2>&1 & }} && "
                 "i=0; while [ ! -s run.started ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; cat run.started")
        started_at = time.monotonic()
        # "starting" from before the keeper can exist: an interrupt that cuts the start call short still
        # kills whatever the box went on to start (the kill reads the keeper's pid file on the box)
        box.handle["state"] = "starting"
        box.handle.pop("pid", None)
        try:
            with script.open("rb") as stdin:
                begun = self._call(target, start, timeout_s=self._small_bound(), stdin=stdin)
            pid = begun.stdout.strip()
            if begun.returncode == 255:
                self._raise_if_fatal(target, begun.stderr)
            if begun.returncode != 0 or not pid.isdigit():
                raise EngineError(f"{target}: could not start the script in {box.workdir} "
                                  f"({_first_line(begun.stderr) or 'no pid came back'}); "
                                  f"try `{target.ssh_command()}` by hand")
            box.handle["pid"] = pid
            box.handle["state"] = "running"
            returncode, timed_out = self._wait(box, target, pid, started_at + timeout_s)
        except BaseException:
            # Ctrl-C, SIGTERM, an ssh failure: nothing we started may keep running on the box
            if box.handle.get("state") in _LIVE:
                self._kill(box, target)
            raise
        if box.handle.get("state") in _LIVE and (not timed_out or self._kill(box, target)):
            box.handle["state"] = "finished"  # (a kill that failed leaves it live: tear-down tries again)
        return RunOutcome(returncode=returncode, log_tail=self._log_tail(box, target), timed_out=timed_out)

    def fetch(self, box: Box, local_dir: Path) -> Sequence[Path]:
        target = self._target(box)
        if not box.workdir:
            return []
        results = shlex.quote(f"{box.workdir}/{RESULTS_DIR}")
        local_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as archive:
            # fetched while the script may still write (the driver fetches before it tears down): GNU tar's
            # exit 1 says a file changed as it was read; the archive is whole, holding what was there
            got = self._call(target, f"if [ -d {results} ]; then tar -C {results} -cf - .; "
                             "rc=$?; [ $rc -le 1 ] || exit $rc; fi",
                             timeout_s=self.connect_timeout_s + self.fetch_timeout_s, stdout=archive)
            if got.returncode != 0:
                raise EngineError(f"{target}: could not copy {box.workdir}/{RESULTS_DIR} back "
                                  f"({_first_line(got.stderr) or f'exit code {got.returncode}'}); the files stay "
                                  f"on the box: `{target.ssh_command()} tar -C {results} -cf - . | tar -xf -`")
            if archive.tell() == 0:
                return []  # the script wrote no results (it failed before its first)
            archive.seek(0)
            try:
                with tarfile.open(fileobj=archive, mode="r:") as tar:
                    names = [m.name for m in tar.getmembers() if m.isfile()]
                    # "data": no absolute paths, no "..", no links out, no device files from the box
                    tar.extractall(local_dir, filter="data")
            except (tarfile.TarError, OSError) as error:
                raise EngineError(f"{target}: the results copied back are not a readable archive ({error}); "
                                  f"they stay on the box in {box.workdir}/{RESULTS_DIR}") from error
        return sorted(local_dir / Path(name) for name in names)

    def tear_down(self, box: Box) -> TearDown:
        if box.torn_down_at is not None and "teardown" in box.handle:
            return TearDown(done=box.handle.get("teardown_done") == "1", message=box.handle["teardown"],
                            command=box.handle.get("teardown_command", ""))
        try:
            target = self._target(box)
        except EngineError as error:  # a launch that failed on its address: nothing was started
            return self._torn(box, TearDown(done=True, message=f"nothing started ({error})"))
        command = ""
        left = ""
        live = box.handle.get("state") in _LIVE
        if live and not self._kill(box, target):
            box.handle["state"] = "abandoned"  # named below with its command; no worker waits on it
            pid = box.handle.get("pid", "")
            group = pid or f"$(cat {shlex.quote(box.workdir)}/run.pid)"
            command = f"{target.ssh_command()} 'kill -TERM -- -{group}'"
            left = f"the trial's processes (process group {pid or 'named in run.pid'}) may still run there; "
        self._end_wait(box)
        self._close_master(target)
        billing = (f"{target}: a box you rented yourself; the trial stopped nothing there and it keeps billing "
                   "until you stop it at your provider")
        if box.workdir:
            billing += f" (its files stay in {box.workdir})"
        if command:
            return self._torn(box, TearDown(done=False, message=f"{target}: {left}stop them with the command "
                                            f"below. {billing}", command=command))
        return self._torn(box, TearDown(done=True, message=billing))

    def reported_cost(self, box: Box) -> float | None:
        return None  # a hand-rented box: no provider API to ask; the prediction stands alone

    def close(self) -> None:
        """Forget this run's host keys and control sockets (after every box is torn down)."""
        self._cleanup()

    # --- the pieces ---------------------------------------------------------------------------------------

    def _target(self, box: Box) -> SshTarget:
        if "target" in box.handle:
            return parse_target(box.handle["target"])
        if box.request.ssh_target:
            return parse_target(box.request.ssh_target)
        raise EngineError(f"candidate {box.request.candidate}: no ssh address")

    def _small_bound(self) -> float:
        return self.connect_timeout_s + self.command_timeout_s

    def _options(self, target: SshTarget) -> list[str]:
        options = [
            "-T", "-x", "-a",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={max(1, round(self.connect_timeout_s))}",
            "-o", "ConnectionAttempts=1",
            # a connection whose other end vanished is noticed within a minute, not at TCP's hours
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={self._known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "UpdateHostKeys=no",
            "-o", "ClearAllForwardings=yes",
            "-o", "LogLevel=ERROR",
            "-p", str(target.port),
        ]
        if self._config is not None:
            options[:0] = ["-F", str(self._config)]
        if self._identity is not None:
            options += ["-i", str(self._identity), "-o", "IdentitiesOnly=yes"]
        if self._control_master:
            options += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self._state}/%C",
                        "-o", "ControlPersist=120"]
        return options

    def _call(self, target: SshTarget, command: str, *, timeout_s: float, stdin: IO[bytes] | None = None,
              stdout: IO[bytes] | None = None, waiting_for: Box | None = None) -> _Result:
        """Run `command` with bash on the box; bounded by `timeout_s` of wall clock (then ssh is killed and
        the result says so with exit code 255). ssh runs in a session of its own so the terminal's Ctrl-C
        reaches gpuscout alone, which then cleans up over a connection of its own. A call `waiting_for` a
        box's run is ended by that box's tear-down (from another thread), so a worker never outwaits it."""
        argv = [self._ssh, *self._options(target), "--", target.destination, f"bash -c {shlex.quote(command)}"]
        bound = max(timeout_s, 1.0)
        with subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else stdin,
                              stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE,
                              start_new_session=True) as process:
            if waiting_for is not None:
                with self._lock:
                    self._waits[id(waiting_for)] = process
                if waiting_for.handle.get("state") not in _LIVE:  # torn down just before: do not wait
                    process.kill()
            try:
                out, err = process.communicate(timeout=bound)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                return _Result(255, "", f"no answer within {bound:.0f} s (ssh stopped)")
            except BaseException:
                process.kill()
                raise
            finally:
                if waiting_for is not None:
                    with self._lock:
                        self._waits.pop(id(waiting_for), None)
        text = out.decode(errors="replace") if isinstance(out, bytes) else ""
        return _Result(process.returncode, text, err.decode(errors="replace") if err else "")

    def _end_wait(self, box: Box) -> None:
        with self._lock:
            process = self._waits.pop(id(box), None)
        if process is not None and process.poll() is None:
            process.kill()

    def _raise_if_fatal(self, target: SshTarget, stderr: str) -> None:
        for needle, why in _FATAL:
            if needle in stderr:
                raise EngineError(f"{target}: {why.format(port=target.port, dest=target.destination, target=target)}"
                                  f" (ssh said: {_first_line(stderr)})")

    @staticmethod
    def _last_error(box: Box) -> str:
        return box.handle.get("last_error", "no answer")

    def _wait(self, box: Box, target: SshTarget, pid: str, deadline: float) -> tuple[int | None, bool]:
        """Until the script ends (its exit code) or the deadline passes (None, True). One long connection waits
        on the box; a dropped connection is retried until the deadline."""
        work = shlex.quote(box.workdir)
        waiting = (f"cd {work} && while [ ! -e run.rc ] && kill -0 {pid} 2>/dev/null; do sleep 1; done; "
                   "if [ -e run.rc ]; then cat run.rc; else echo gone; fi")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, True
            result = self._call(target, waiting, timeout_s=left, waiting_for=box)
            if box.handle.get("state") not in _LIVE:
                return None, False  # torn down meanwhile (its tear-down killed the run, or gave up on it)
            if result.returncode == 0:
                answer = result.stdout.strip()
                if answer.isdigit():
                    return int(answer), False
                return None, False  # the keeper vanished without an exit code (killed on the box, a reboot)
            if time.monotonic() >= deadline:
                return None, True
            box.handle["last_error"] = _first_line(result.stderr)
            self._raise_if_fatal(target, result.stderr)
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))

    def _kill(self, box: Box, target: SshTarget) -> bool:
        """Stop the run's whole process group on the box (TERM, grace, KILL); True once nothing of it runs.
        The group is the one the keeper's pid file names while the keeper runs, so its number is never
        someone else's; a start cut short is given a few seconds to show its keeper first."""
        if not box.workdir:
            return True
        work = shlex.quote(box.workdir)
        tenths = max(1, round(self.kill_grace_s * 10))
        # "alive": a member of the group that is not a zombie (a killed process stays in its group until
        # reaped, which a busy box or a container's init can take its time over); `ps` where it exists
        kill = (f"cd {work} || exit 0; "
                "alive() { if ps -e -o pgid=,stat= >/dev/null 2>&1; then "
                "ps -e -o pgid=,stat= | awk -v g=\"$1\" '$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}'; "
                "else kill -0 -- -\"$1\" 2>/dev/null; fi; }; i=0; "
                "while [ ! -e run.started ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; "
                "pid=$(cat run.pid 2>/dev/null); "
                "case $pid in ''|*[!0-9]*) echo gone; exit 0;; esac; "
                "kill -TERM -- -$pid 2>/dev/null; i=0; "
                f"while alive $pid && [ $i -lt {tenths} ]; do sleep 0.1; i=$((i+1)); done; "
                "kill -KILL -- -$pid 2>/dev/null; i=0; "
                "while alive $pid && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; "
                "if alive $pid; then echo alive; else rm -f run.pid; echo gone; fi")
        result = self._call(target, kill, timeout_s=self._small_bound() + self.kill_grace_s + 5)
        if result.returncode == 0 and result.stdout.strip().endswith("gone"):
            box.handle["state"] = "killed"
            return True
        box.handle["last_error"] = _first_line(result.stderr) or result.stdout.strip()
        return False

    def _log_tail(self, box: Box, target: SshTarget) -> str:
        tail = self._call(target, f"tail -c {LOG_TAIL_BYTES} {shlex.quote(box.workdir)}/run.log 2>/dev/null",
                          timeout_s=self._small_bound())
        if tail.returncode != 0:
            return f"(the log could not be read back: {_first_line(tail.stderr)})"
        return tail.stdout

    def _close_master(self, target: SshTarget) -> None:
        if not self._control_master:
            return
        argv = [self._ssh, *self._options(target), "-O", "exit", "--", target.destination]
        # nothing to do when no master runs; bounded either way
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=self._small_bound(), start_new_session=True, check=False)

    def _torn(self, box: Box, outcome: TearDown) -> TearDown:
        box.torn_down_at = datetime.now(UTC)
        box.handle["teardown"] = outcome.message
        box.handle["teardown_done"] = "1" if outcome.done else "0"
        box.handle["teardown_command"] = outcome.command
        return outcome


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def _first_line(text: str) -> str:
    """The first line that says something (ssh frames its host key warning in lines of '@')."""
    lines = [line.strip() for line in text.splitlines() if line.strip().strip("@")]
    return lines[0] if lines else ""


def _safe_name(candidate: str) -> str:
    """The candidate's name as a folder name on the box (the offer id can hold '/' or spaces)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", candidate).strip("._") or "candidate"
