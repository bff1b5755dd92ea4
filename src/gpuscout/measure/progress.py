"""How a long run (the bench's cases, the doctor's steps) reports its progress to whoever draws it.

measure and doctor never draw: rendering lives in `report` (docs/design.md §3), as for the load
generator, whose client calls back `loadgen.client.Progress` and `report.load.load_progress` draws
the bar. A run takes a `StepProgress`: given the number of steps, it opens a display and hands the
run an `Advance` to call as each step starts and ends. `report.progress.step_bar` is the one that
draws a bar on stderr (the CLI passes it through the API); `no_progress` draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

# (the step in flight, whether it has just finished): called with False as a step starts, True as it ends.
Advance = Callable[[str, bool], None]
# A display for a run of `total` steps: a context that gives the run its Advance.
StepProgress = Callable[[int], AbstractContextManager[Advance]]


@contextmanager
def no_progress(total: int) -> Iterator[Advance]:
    """A display that shows nothing."""
    yield lambda name, done: None


def progress_for(progress: StepProgress | None) -> StepProgress:
    """The display a run was given, or one that shows nothing."""
    return progress or no_progress
