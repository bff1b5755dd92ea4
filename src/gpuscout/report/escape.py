"""Outside text made safe for a terminal: control characters shown, never obeyed.

Text gpuscout prints comes partly from outside: a server's error bodies and /metrics page, the fields
of a result file or a store row, a dataset's names, a URL. A terminal obeys the control characters in
it: ESC starts sequences that move the cursor, clear the screen, retitle the window, write the
clipboard (OSC 52) or hide the text after it; a carriage return or backspace overwrites what was
printed; a bidirectional override (U+202E) shows text in another order than it is stored. So all of
them are written as visible escapes instead (`\\x1b`, `\\u202e`), the way Python's repr writes them:

* `printable(text)`: one string; for text written without rich (`sys.stdout.write` of a plain table,
  Markdown, an error message) and for names that must not break a format (an SVG, a plot label).
* `screen_console(stderr=False)`: a rich Console whose every printed segment goes through
  `printable` (a render hook, rich's public API for rewriting what is printed). Styles and rich's own
  cursor controls (its progress display) are not in the segments' text, so they still work. A string
  that is not valid rich markup (an outside name holding `[/x]`) is printed as plain text on it.

Tabs and newlines stay: tables and notes are laid out with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.errors import MarkupError
from rich.segment import Segment
from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode formatting characters that reorder or
# break lines: the Arabic letter mark, left-to-right and right-to-left marks, the bidirectional embeddings,
# overrides and isolates (Unicode TR #9), the line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control and reordering character written as a visible escape (`\\x1b`)."""
    return _CONTROL.sub(_escaped, text)


class _Printable:
    """A renderable whose segments' text is made `printable` (its styles and control segments kept).

    rich lays the text out before the escapes lengthen it, and the console then crops each line to its
    width: so a line the escapes made too long is folded onto the next lines here, and nothing is cut."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        segments = list(console.render(self.inner, options))
        if not any(not s.control and _CONTROL.search(s.text) for s in segments):
            yield from segments
            return
        width = max(1, options.max_width)
        ends_line = bool(segments) and segments[-1].text.endswith("\n")
        lines = list(Segment.split_lines(_clean(segments)))
        for number, line in enumerate(lines):
            length = Segment.get_line_length(line)
            parts = list(Segment.divide(line, [*range(width, length, width), length])) if length > width else [line]
            for index, part in enumerate(parts):
                yield from part
                if index < len(parts) - 1 or number < len(lines) - 1 or ends_line:
                    yield Segment.line()


def _clean(segments: Iterable[Segment]) -> Iterator[Segment]:
    for segment in segments:
        if segment.control or not _CONTROL.search(segment.text):
            yield segment
        else:
            yield Segment(printable(segment.text), segment.style)


class _EscapeHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Printable(r) for r in renderables]


class _ScreenConsole(Console):
    """A Console on which a string that is not valid rich markup is printed as plain text: a name or a note from
    outside holding `[/x]` would otherwise stop the screen with a MarkupError."""

    def render_str(self, text: str, **options: Any) -> Text:
        try:
            return super().render_str(text, **options)
        except MarkupError:
            return super().render_str(text, **(options | {"markup": False}))


def screen_console(*, stderr: bool = False) -> Console:
    """A rich Console for gpuscout's screens: whatever is printed on it shows control characters escaped, and
    text that is not valid markup is printed as it is."""
    console = _ScreenConsole(stderr=stderr)
    console.push_render_hook(_EscapeHook())
    return console
