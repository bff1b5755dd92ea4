"""Stopping cleanly: every stop signal behaves like one Ctrl-C, and nothing finished is lost to the next.

The signals: SIGINT (Ctrl-C), SIGTERM (`kill`, `timeout`, a job scheduler) and SIGHUP (a closed
terminal). `stop_on_signals()` holds them for the duration of a command:

* the first one raises `TerminationRequest` (a `KeyboardInterrupt` carrying `signum`) in the main
  thread, exactly where Ctrl-C would, so every path that keeps finished work on Ctrl-C keeps it on
  each of them;
* every later one, while the scope lasts, is noted and ignored: the cleanup that keeps what finished
  (the requests in flight cancelled, the workers' records gathered, the file written) is never cut
  short by an impatient second Ctrl-C. It is bounded (each wait has a deadline), and SIGKILL still
  ends the process at once, losing only what was not yet written;
* the exit code is 128 + the first signal (`Stops.exit_code`: 130 for Ctrl-C, 143 for SIGTERM, 129
  for SIGHUP), the shell's convention.

Scopes nest (the command line holds one for the whole process, the library call its own): they
share the first signal, and the outermost one restores the previous handlers. A signal the process
was started ignoring (`nohup`'s SIGHUP, a background job's SIGINT) stays ignored.

`deferred_signals()` is the critical section of a write: inside it every stop signal is held back
and delivered, to whatever handler is then in place, once the block has ended — so a file being
written is always written whole (`outfile.write_atomic`).

Child processes are started under `signals_blocked()` and take the stop signals once their own
handlers are set (`unblock_stop_signals`), so a Ctrl-C during their start-up is no traceback;
`die_with_parent()`, called first thing in a child, ends it when the process that started it dies,
however it died (SIGKILL included): no case or load worker runs on unowned.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

# SIGHUP does not exist on Windows; take what this platform has.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_REPEAT_NOTE = b"stopping: keeping what finished first; another Ctrl-C will not cut that short\n"


class TerminationRequest(KeyboardInterrupt):
    """A stop signal, raised where Ctrl-C would be; `signum` says which (SIGINT for Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Stops:
    """What stopped the block: the first stop signal received (None: none), and how many came after it."""

    signum: int | None = None
    repeats: int = 0

    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)


_scopes: list[Stops] = []  # the open `stop_on_signals` scopes, outermost first (main thread only)
_announce: list[bool] = []  # per scope: say once, on stderr, that a repeated signal is ignored


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if not _scopes:  # only between the last scope's end and its handlers' restoring
        raise TerminationRequest(signum)
    first = _scopes[0]
    if first.signum is not None:  # already stopping: the cleanup goes on
        for stops in _scopes:
            stops.repeats += 1
        if any(_announce) and first.repeats == 1:
            with contextlib.suppress(OSError):
                os.write(2, _REPEAT_NOTE)  # not sys.stderr: the handler may have interrupted a write to it
        return
    for stops in _scopes:
        stops.signum = signum
    raise TerminationRequest(signum)


@contextmanager
def stop_on_signals(*, announce: bool = True) -> Iterator[Stops]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs (main thread only): the first raises
    `TerminationRequest`, the later ones are ignored (said once on stderr when `announce`)."""
    stops = Stops()
    if threading.current_thread() is not threading.main_thread():
        yield stops  # signal handlers can only be set from the main thread; Ctrl-C still works there
        return
    outermost = not _scopes
    if not outermost and _scopes[0].signum is not None:
        stops.signum = _scopes[0].signum  # opened while already stopping: it shares that stop
    previous = {sig: signal.signal(sig, _on_signal) for sig in _taken()} if outermost else {}
    _scopes.append(stops)
    _announce.append(announce)
    try:
        yield stops
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _scopes.pop()
        _announce.pop()


def hold_stop_signals(*, also: tuple[int, ...] = ()) -> Stops:
    """`stop_on_signals` for the rest of this process's life (the command line, a worker process): never
    restored. `also`: signals to hold even where they were ignored (the one a parent stops its workers with)."""
    stops = Stops()
    if threading.current_thread() is threading.main_thread():
        for sig in {*_taken(), *also}:
            signal.signal(sig, _on_signal)
        _scopes.insert(0, stops)
        _announce.insert(0, False)
    return stops


def begin_stop(signum: int) -> None:
    """Stop as if `signum` had just been received, without raising (the caller raises its own
    interrupt): from now on a stop signal is a repeat, and the exit code says `signum`."""
    if _scopes and _scopes[0].signum is None:
        for stops in _scopes:
            stops.signum = signum


def stopped_by() -> int | None:
    """The first stop signal received in the open scopes (None: none, or no scope is open)."""
    return _scopes[0].signum if _scopes else None


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold every stop signal back while the block runs, then deliver the first one (main thread only).

    For the few milliseconds of a write: the file is written whole, and the signal then acts as it
    would have — raises `TerminationRequest` under `stop_on_signals`, `KeyboardInterrupt` under
    Python's default, or ends the process where SIGTERM's default is in place.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # a handler runs in the main thread only: a write in another thread is never interrupted
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in _taken()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def _taken() -> tuple[int, ...]:
    """The stop signals this process takes: not those it was started with ignored — `nohup` ignores SIGHUP,
    and a non-interactive shell starts a background job with SIGINT ignored; both are meant to last."""
    return tuple(sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN)


def ignore_stop_signals() -> None:
    """In a child process that its parent stops and reaps: no stop signal of a terminal (Ctrl-C reaches the
    whole process group) interrupts it; the parent decides, and kills it."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def signals_blocked() -> Iterator[None]:
    """Block the stop signals in this thread while the block runs: a process started inside it inherits
    them blocked, so a Ctrl-C during its start-up waits until it has set its own handlers and unblocks
    them (`unblock_stop_signals`). A signal for this process is held until the block ends (it may
    reach another thread meanwhile; its handler waits, `deferred_signals`), so a child is never left
    half started.

    multiprocessing's resource tracker is started here if it is not yet running: it unblocks SIGINT
    and SIGTERM (which it ignores) but not SIGHUP, whose default would end it when the terminal hangs
    up on the process group, and the tracker restarted later prints tracebacks for the semaphores the
    first one knew.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        with contextlib.suppress(ImportError, OSError):
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()  # it unblocks SIGINT and SIGTERM here on its way out
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        with deferred_signals():  # another thread may take the signal: its Python handler still waits
            yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock_stop_signals() -> None:
    """In a child started under `signals_blocked`: take the stop signals again (a held one is delivered now)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def set_parent_death_signal() -> None:
    """Linux: have the kernel SIGKILL this process when the thread that started it ends (prctl
    PR_SET_PDEATHSIG); a no-op elsewhere. Safe in a `preexec_fn` (no Python threads, no allocation)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_parent(parent: int, *, also: int | None = None) -> None:
    """End this child process when the process that started it dies, however it died (even SIGKILL).

    On Linux the kernel delivers SIGKILL on the parent's death (`set_parent_death_signal`); elsewhere a
    watchdog thread polls the parent id. Either way a killed parent leaves no child running on (a bench
    case can hold a GPU for minutes, a load worker keeps loading the server, and the late result of
    either has nowhere to go). `also`: a process further up that this one must not outlive either — a
    grandparent, when the parent may have died before this process could ask the kernel.
    """
    set_parent_death_signal()
    if os.getppid() != parent or (also is not None and not _alive(also)):  # died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent, also), daemon=True, name="gpuscout-parent-watch").start()


def _watch_parent(parent: int, also: int | None) -> None:
    while os.getppid() == parent and (also is None or _alive(also)):
        time.sleep(1.0)
    os._exit(1)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (an ended one not yet reaped, a zombie, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc here: it answered the signal, so it exists
