"""Stopping cleanly: a termination request behaves like Ctrl-C, so every path that keeps finished
work on Ctrl-C keeps it on SIGTERM and SIGHUP too (a job scheduler, `timeout`, a closed terminal).

`stop_on_signals()` is a context manager for the duration of a command: inside it SIGTERM and
SIGHUP raise `KeyboardInterrupt` in the main thread, exactly where Ctrl-C would. Outside it the
previous handlers are restored. SIGKILL cannot be caught; what finished before it is kept by
writing results as they complete (the bench and the load test checkpoint their cases).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

# SIGHUP does not exist on Windows; take what this platform has.
TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class TerminationRequest(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, raised where Ctrl-C would be; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Stops:
    """What stopped the block, if anything: the termination signal received (None: none, or Ctrl-C)."""

    signum: int | None = None

    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[Stops]:
    """Turn SIGTERM and SIGHUP into `KeyboardInterrupt` while the block runs (main thread only)."""
    stops = Stops()
    if threading.current_thread() is not threading.main_thread():
        yield stops  # signal handlers can only be set from the main thread; Ctrl-C still works there
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        stops.signum = signum
        raise TerminationRequest(signum)

    previous = {sig: signal.signal(sig, stop) for sig in TERMINATION_SIGNALS}
    try:
        yield stops
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
