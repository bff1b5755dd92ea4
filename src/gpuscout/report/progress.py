"""Progress bars on stderr for the runs that report their steps (`measure.progress`): the bench's
cases and the doctor's steps. stdout stays clean for `--json`; the bar is gone when the run ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpuscout.measure.progress import Advance, StepProgress
from gpuscout.report.escape import screen_console


def step_bar(title: str, console: Console | None = None) -> StepProgress:
    """A bar over a run's steps titled `title` ("bench", "doctor"), showing the step in flight and
    how many of the steps finished; drawn on `console` (stderr by default)."""

    @contextmanager
    def bar(total: int) -> Iterator[Advance]:
        with Progress(SpinnerColumn(), TextColumn(f"[bold]{title}[/] {{task.description}}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console or screen_console(stderr=True),
                      transient=True) as shown:
            task = shown.add_task("", total=total)

            def advance(name: str, done: bool) -> None:
                shown.update(task, description=name, advance=1 if done else 0)

            yield advance

    return bar
