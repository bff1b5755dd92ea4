"""Stopping a long run (bench, load, doctor) early and keeping what finished: the one Ctrl-C helper."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TypeVar

from gpuscout.interrupts import stop_on_signals

T = TypeVar("T")


def run_stoppable(work: Callable[[], T], interrupted: Callable[[T], bool]) -> tuple[T, int | None]:
    """Run `work` with SIGTERM and SIGHUP stopping it as Ctrl-C does (`interrupts.stop_on_signals`).

    `work` catches the stop itself and returns what finished, written: its final write runs inside
    the same scope, so a second Ctrl-C (or a SIGTERM) during it never costs it. `interrupted` says
    from that result whether it was cut short. Returns the result and the signal that stopped it: the termination
    signal received, else SIGINT (Ctrl-C); None when it ran to the end.
    """
    with stop_on_signals() as stops:
        result = work()
    return result, (stops.signum or signal.SIGINT) if interrupted(result) else None
