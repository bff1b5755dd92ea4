"""The load run's context: what the loops of one level share (`client`, and `conversation` for sessions).

Kept apart from the client so that the session loop (`conversation`) can take the context and a
`--workers` process's part of the level without importing the client that calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuscout.loadgen import monitor
from gpuscout.loadgen.exchange import Live, Wire
from gpuscout.loadgen.record import PromptLike
from gpuscout.loadgen.request import Bodies


class Progress(Protocol):
    """A level's progress display: `done` of `total` measured requests finished (total 0: not known). With
    `waiting_until` (a wall-clock time, `time.time()`), the client is idle until that send, which is more
    than `schedule.LONG_WAIT_S` away (a trace's or a slow rate's gap); the next call without it ends the wait."""

    def __call__(self, done: int, total: int, waiting_until: float | None = None) -> None: ...


@dataclass(frozen=True)
class WorkerPart:
    """One process's part of a level run by `--workers N` (`workers`): every process keeps the same
    absolute schedule from one t0, process `share` sends the requests i with i % of == share (open
    loop) or takes the next index from the shared `counter` (closed loop)."""

    share: int
    of: int
    ready: Callable[[], float]  # says this process is warmed up; returns t0 (perf_counter) once all are
    next_index: Callable[[], int] | None = None  # closed loop: the next global request index
    warmup_first: int = 0  # the global number of this process's first warm-up request
    warmup_total: int = 0  # warm-up requests of all processes (measured request i sends prompt warmup_total + i)


@dataclass(slots=True)
class RunContext:
    """One level's run as its loops share it: the wire, the bodies, every request started, the clocks at t0."""

    wire: Wire
    shown_url: str  # stored and printed: redacted
    bodies: Bodies
    prompts: Sequence[PromptLike]
    notes: list[str] = field(default_factory=list)
    done: int = 0
    total: int = 0
    progress: Progress | None = None
    lives: list[Live] = field(default_factory=list)  # every request started, warm-up first
    t0: float | None = None  # perf_counter at the start of the measured phase
    cpu0: float = 0.0
    thread0: float = 0.0  # the loop thread's CPU time at t0
    wait0: float | None = None  # its run-queue wait at t0 (None where the kernel does not say)
    thread1: float | None = None  # the loop thread's CPU time when the measured phase ended
    wait1: float | None = None  # its run-queue wait then
    watch: monitor.Watch | None = None
