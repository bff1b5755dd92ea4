"""The one small interface every trial engine implements: launch, wait ready, run, fetch, tear down, billed time.

An engine knows how to get a box and how to talk to it; it knows nothing of gpuscout's jobs, offers'
prices or verdicts. The trial driver calls these in order for every candidate and calls `tear_down` on
every path out (success, failure, Ctrl-C, SIGTERM, the money guard), so an adapter must make
`tear_down` safe to call more than once and on a box whose launch failed half way.

Times are wall-clock UTC instants (`datetime`, tz-aware): the driver prices a box from `launched_at` to
`torn_down_at` under the offer's billing rules, and an engine that can read the provider's own figure
(SkyPilot's cost report) returns it from `reported_cost`, set beside the prediction, never instead of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

EngineName = Literal["skypilot", "ssh", "local"]


@dataclass(frozen=True)
class LaunchRequest:
    """What one candidate needs: which offer, pinned how, with how much disk, for how long at most."""

    candidate: str  # a short unique name for the box (also its cluster / directory name)
    offer_id: str
    provider: str  # the offer's provider as the price sheet names it (e.g. "aws", "autodl")
    region: str  # "" when the offer names none
    instance_type: str  # the provider's instance/product name; "" when the offer names none
    gpu: str  # gpuscout catalog SKU
    gpu_count: int
    spot: bool
    disk_gb: int  # the job's disk need, rounded up, at least the provider's minimum
    max_wall_s: float  # the candidate's wall-time bound (--budget-minutes); the engine's own safety net
    ssh_target: str | None = None  # ssh engine: "user@host:port" of a box the user already rented


@dataclass
class Box:
    """A launched (or attached) candidate. Engines keep their own handles in `handle`."""

    request: LaunchRequest
    engine: EngineName
    launched_at: datetime  # when the launch was requested (billing may start here)
    ready_at: datetime | None = None
    torn_down_at: datetime | None = None
    workdir: str = ""  # the directory on the box the script runs in and writes results under
    handle: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOutcome:
    returncode: int | None  # None: killed at its deadline or interrupted
    log_tail: str  # the last few kB of the script's stdout+stderr, for the screen and the store
    timed_out: bool = False


@dataclass(frozen=True)
class TearDown:
    done: bool  # True: the box no longer bills (or never was the engine's to stop: ssh, local)
    message: str  # what was done, in words, for the screen
    command: str = ""  # when not done: the exact command the user runs to stop the billing themselves


LOG_TAIL_BYTES = 4000  # what an engine keeps of a script's log for the screen and the store


def log_tail(path: Path) -> str:
    """The last LOG_TAIL_BYTES of a log file an engine wrote beside the script ("" if it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(path.stat().st_size - LOG_TAIL_BYTES, 0))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class EngineError(Exception):
    """A launch, run or fetch that failed; the message says what, why and how to fix it."""


class Engine(Protocol):
    name: EngineName

    def launch(self, request: LaunchRequest) -> Box:
        """Ask for the box and return at once (launches of all candidates overlap in time)."""
        ...

    def wait_ready(self, box: Box, timeout_s: float) -> None:
        """Block until the box accepts commands; set `box.ready_at`; raise EngineError on timeout."""
        ...

    def run(self, box: Box, script: Path, timeout_s: float) -> RunOutcome:
        """Copy `script` onto the box and run it with bash in `box.workdir`; kill it at `timeout_s`."""
        ...

    def fetch(self, box: Box, local_dir: Path) -> Sequence[Path]:
        """Copy everything the script wrote under its results folder into `local_dir`; return the files."""
        ...

    def tear_down(self, box: Box) -> TearDown:
        """Stop the billing (idempotent; safe after a failed launch); set `box.torn_down_at`."""
        ...

    def reported_cost(self, box: Box) -> float | None:
        """The provider's own cost figure for this box in USD, where the engine can read one; else None."""
        ...
