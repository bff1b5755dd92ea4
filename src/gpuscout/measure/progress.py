"""How a long run (the bench's cases, the doctor's steps) reports its progress to whoever draws it.

measure and doctor never draw: rendering lives in `report` (docs/design.md §3), as for the load
generator, whose client calls back `loadgen.client.Progress` and `report.load.load_progress` draws
the bar. A run takes a `StepProgress`: given the number of steps, it opens a display and hands the
run an `Advance` to call as each step starts and ends. `report.progress.step_bar` is the one that
draws a bar on stderr; `no_progress` draws nothing.

`progress=True`, what the API passes today, still draws the bar through `_terminal_bar` until the
API passes `report.progress.step_bar` itself (the API may not import `report`; the CLI may).
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


def progress_for(progress: StepProgress | bool, title: str) -> StepProgress:
    """The display a run was given: a StepProgress as it is; True the bar on stderr, False none."""
    if callable(progress):
        return progress
    return _terminal_bar(title) if progress else no_progress


def _terminal_bar(title: str) -> StepProgress:
    # Transitional: the bar `progress=True` drew before report/ drew it, kept so that the API's
    # boolean draws the same bar until it passes `report.progress.step_bar(title)`; then this goes.
    @contextmanager
    def bar(total: int) -> Iterator[Advance]:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn(f"[bold]{title}[/] {{task.description}}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True) as shown:
            task = shown.add_task("", total=total)
            yield lambda name, done: shown.update(task, description=name, advance=1 if done else 0)

    return bar
