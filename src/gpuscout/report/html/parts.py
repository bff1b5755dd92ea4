"""The HTML report's building blocks: every string from a result is escaped on its way in.

`Html` marks text that is already HTML (built here, or an SVG drawn by `svg`); anything else
handed to `tag`, `table` or `para` is escaped with `html.escape(…, quote=True)`, so a model name
like `<script>` or `" onmouseover="` reads as text. No attribute value comes from a result except
through `html.escape`, and the report makes no links from result data at all (a `javascript:` URL
is text like any other). Control characters are shown as escapes (`escape.printable`), as on a screen.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence

from gpuscout.report.escape import printable


class Html(str):
    """Text that is already HTML: passed through as it is."""

    __slots__ = ()


Content = str | Html | Iterable["str | Html"]


def esc(text: object) -> Html:
    return text if isinstance(text, Html) else Html(html.escape(printable(str(text)), quote=True))


def join(parts: Iterable[str | Html]) -> Html:
    return Html("".join(esc(p) for p in parts))


def tag(name: str, content: Content = "", **attrs: str | int | None) -> Html:
    """<name attrs>content</name>; `class_` and `data_x` name `class` and `data-x`."""
    inner = esc(content) if isinstance(content, str) else join(content)
    return Html(f"<{name}{_attrs(attrs)}>{inner}</{name}>")


def _attrs(attrs: dict[str, str | int | None]) -> str:
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{html.escape(str(v), quote=True)}"'
                   for k, v in attrs.items() if v is not None)


def para(text: str | Html, **attrs: str | None) -> Html:
    return tag("p", text, **attrs)


def bullets(items: Iterable[str | Html], **attrs: str | None) -> Html:
    rows = [tag("li", item) for item in items]
    return tag("ul", rows, **attrs) if rows else Html("")


Cell = str | Html | tuple[str | Html, float | None]  # a cell, or a cell and the number it sorts by


def table(header: Sequence[str], rows: Iterable[Sequence[Cell]], *, caption: str = "",
          numeric: Sequence[int] = (), sortable: bool = False, filters: Mapping[int, str] | None = None,
          units: Mapping[int, str] | None = None) -> Html:
    """A table; the columns numbered in `numeric` align right (figures line up). A `sortable` one is sorted
    and filtered in the page by its one script (`interact`): a cell given as (text, number) sorts by the
    number, the columns in `filters` get a filter ("text" or "max", with the number's unit from `units`)."""
    wants = filters or {}
    head = tag("tr", [tag("th", h, class_="num" if i in numeric else None, data_filter=wants.get(i) if sortable
                          else None, data_unit=(units or {}).get(i) if sortable else None)
                      for i, h in enumerate(header)])
    body = [tag("tr", [_cell(c, i in numeric) for i, c in enumerate(row)]) for row in rows]
    parts = ([tag("caption", caption)] if caption else []) + [tag("thead", head), tag("tbody", body)]
    if not sortable:
        return tag("table", parts)
    return tag("div", tag("table", parts, data_sortable=""), class_="table-wrap")  # a wide table scrolls alone


def _cell(cell: Cell, numeric: bool) -> Html:
    if isinstance(cell, tuple):
        text, number = cell
        key = "" if number is None or not math.isfinite(number) else repr(float(number))
        return tag("td", text, class_="num" if numeric else None, data_sort=key)
    return tag("td", cell, class_="num" if numeric else None)


def section(anchor: str, title: str, content: Iterable[str | Html], *, kind: str) -> Html:
    return tag("section", [tag("h2", title), *content], id=anchor, data_kind=kind)


def details(summary: str, content: Iterable[str | Html]) -> Html:
    return tag("details", [tag("summary", summary), *content])


def figure(svg: Html, caption: str | Html, *, name: str, marks: int) -> Html:
    """A plot: its SVG and a caption; `data-marks` counts the data marks that carry a tooltip."""
    return tag("figure", [svg, tag("figcaption", caption)], class_="plot", data_plot=name, data_marks=marks)


def shorten(text: str, limit: int = 80) -> str:
    """One line, at most `limit` characters: for cells and legends (the tooltip keeps the whole)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
