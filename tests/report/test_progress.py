"""The bar a bench or doctor run draws from the steps it reports (`measure.progress`), on a real terminal
console: the title, the step in flight and how many finished; gone when the run ends."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gpuscout.report.progress import step_bar

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_bar_shows_the_step_in_flight_and_the_steps_done() -> None:
    out = io.StringIO()
    with step_bar("bench", Console(file=out, force_terminal=True, width=80))(2) as advance:
        advance("case a", False)
        advance("case a", True)
        advance("case b", False)
    frames = ANSI.sub("", out.getvalue()).split("\r")
    last = [f for f in frames if f.strip()][-1]
    assert "bench case b" in last and "1/2" in last
    assert out.getvalue().endswith("\x1b[2K")  # transient: the last frame is erased when the run ends


def test_nothing_is_drawn_on_a_console_that_is_not_a_terminal() -> None:
    out = io.StringIO()
    with step_bar("doctor", Console(file=out, force_terminal=False))(1) as advance:
        advance("disk", False)
        advance("disk", True)
    assert "disk" not in out.getvalue()
