"""A real OpenSSH server on 127.0.0.1 for the ssh engine's tests: Debian's `openssh-server`, started by the
test itself with a config, host key and user key of its own, generated per run.

No root is needed: sshd started by an ordinary user runs without privilege separation and lets in only that
user, which is all the tests need (`UsePAM no` because PAM wants root, `StrictModes no` because the key files
live in a pytest temporary folder whose modes sshd would otherwise judge). Run as root (CI, this machine) it
needs the privilege separation folder /run/sshd, which a container without an init never created; the
fixture makes it, as the Debian package's own start script does.

Two servers on two free ports are the trial's "two candidates": two boxes as far as the engine can tell
(each has its own host key, so the per-run known_hosts file tells them apart), one account on this machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen")
SSH = shutil.which("ssh")

# Said by every test that cannot run: a skip is not a pass, and the line says how to make it run.
MISSING = ("not tested: the ssh engine's tests need a real OpenSSH server (Debian's openssh-server, "
           "/usr/sbin/sshd) and client (ssh, ssh-keygen); `make test` installs them, or run "
           "`apt-get install -y openssh-server openssh-client`")


def missing_reason() -> str | None:
    """Why the real-server tests cannot run here, or None when they can."""
    if not SSHD.exists() or SSH_KEYGEN is None or SSH is None:
        return MISSING
    return None


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    host_key: Path
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def target(self) -> str:
        """The `user@host:port` a user would give the ssh engine for this box."""
        return f"{self.user}@127.0.0.1:{self.port}"


@dataclass(frozen=True)
class UserKey:
    private: Path
    public: Path


def make_user_key(folder: Path) -> UserKey:
    """The client's key pair, made for this run only (no passphrase: the engine runs with BatchMode)."""
    assert SSH_KEYGEN is not None
    folder.mkdir(parents=True, exist_ok=True)
    private = folder / "id_ed25519"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "gpuscout-test-user", "-f", str(private)],
                   check=True, timeout=60)
    os.chmod(private, 0o600)
    return UserKey(private, private.with_suffix(".pub"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _banner(port: int) -> bool:
    """True once the server on `port` answers with an SSH banner (it accepts connections)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _user() -> str:
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


@contextmanager
def sshd(folder: Path, key: UserKey, *, port: int | None = None,
         start_timeout_s: float = 60.0) -> Iterator[SshServer]:
    """Start one sshd on a free port of 127.0.0.1 (or on `port`) that lets in `key`, with a host key made
    now; stop it (and wait for it) on exit."""
    assert SSH_KEYGEN is not None
    folder.mkdir(parents=True, exist_ok=True)
    host_key = folder / "ssh_host_ed25519_key"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True, timeout=60)
    os.chmod(host_key, 0o600)
    authorized = folder / "authorized_keys"
    shutil.copyfile(key.public, authorized)
    if os.getuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = folder / "sshd.log"
    wanted = port
    for _attempt in range(5):  # the free port can be taken between the probe and sshd's bind
        port = wanted or _free_port()
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress 127.0.0.1:{port}",
            f"HostKey {host_key}",
            f"PidFile {folder / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            f"AllowUsers {_user()}",
            "MaxStartups 100",
            "MaxSessions 100",
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
            "",
        ]))
        with log.open("ab") as out:
            # -D: stay in the foreground (the fixture owns the process); -e: log to stderr (the log file)
            process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline and process.poll() is None and not _banner(port):
            time.sleep(0.05)
        if process.poll() is None and _banner(port):
            break
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if wanted or "Address already in use" not in log.read_text(errors="replace"):
            raise RuntimeError(f"sshd did not start (exit {process.returncode}); its log:\n{log.read_text()}")
    else:
        raise RuntimeError(f"sshd found no free port in 5 tries; its log:\n{log.read_text()}")
    try:
        yield SshServer(port, _user(), host_key, log, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def client_config(folder: Path, key: UserKey) -> Path:
    """An ssh client config that uses only this run's key and ignores the developer's ~/.ssh/config."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ssh_config"
    path.write_text(f"Host *\n  IdentityFile {key.private}\n  IdentitiesOnly yes\n")
    return path


def session_processes(sid: int) -> list[int]:
    """The live processes (not zombies) of session `sid` on this machine, read from /proc: what a remote
    run left behind, since the 'remote' box is this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # after the command name: state, ppid, pgrp, session
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found
