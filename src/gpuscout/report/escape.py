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
  cursor controls (its progress display) are not in the segments' text, so they still work.

Tabs and newlines stay: tables and notes are laid out with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.segment import Segment

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
    """A renderable whose segments' text is made `printable` (its styles and control segments kept)."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _clean(console.render(self.inner, options))


def _clean(segments: Iterable[Segment]) -> Iterator[Segment]:
    for segment in segments:
        if segment.control or not _CONTROL.search(segment.text):
            yield segment
        else:
            yield Segment(printable(segment.text), segment.style)


class _EscapeHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Printable(r) for r in renderables]


def screen_console(*, stderr: bool = False) -> Console:
    """A rich Console for gpuscout's screens: whatever is printed on it shows control characters escaped."""
    console = Console(stderr=stderr)
    console.push_render_hook(_EscapeHook())
    return console
