"""Plots as plain inline SVG, drawn by matplotlib: no script, no font file, nothing fetched.

Why matplotlib (docs/results.md §3.2): its SVG backend writes static vector markup that any
browser shows with scripts off and nothing to load, so a report opens offline years later and
cannot raise a console error; the page stays small (tens of kB a plot, where an inlined
Plotly or Bokeh runtime adds 1–4 MB of JavaScript to every file). Hover text is SVG's own
`<title>` element, which browsers show as a tooltip: each mark drawn with a `gid` gets one here.

Text from results reaches matplotlib through `label` (mathtext `$` escaped, one line, cut) and
leaves as `<text>` elements that ElementTree escapes; every id is prefixed per figure, so several
SVGs in one page never share or cross-reference an id.
"""

from __future__ import annotations

import io
import re
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from gpuscout.errors import MissingDependencyError
from gpuscout.report.escape import printable
from gpuscout.report.html.parts import Html

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox
    from numpy.typing import NDArray

SVG_NS, XLINK_NS = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"
_URL_REF = re.compile(r"url\(#([^)]+)\)")
# One calm style for every plot: light grid, no top/right spines, text as <text> (font="none"), so
# it is selectable, searchable and scales with the page; the browser picks a sans-serif font.
STYLE = {
    "svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9.0, "axes.titlesize": 10.0,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#dddddd",
    "grid.linewidth": 0.6, "axes.axisbelow": True, "legend.frameon": False, "legend.fontsize": 8.0,
    "figure.dpi": 100.0,
}
# Okabe–Ito colours: told apart by readers with any common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def label(text: object, limit: int = 60) -> str:
    """A result's string as matplotlib text: one line, cut to `limit`, `$` escaped (no mathtext), control
    characters shown as escapes (XML forbids them, so the SVG would not parse)."""
    line = printable(" ".join(str(text).split()))
    line = line if len(line) <= limit else line[: limit - 1] + "…"
    return line.replace("$", r"\$")  # matplotlib reads "\$" as a plain dollar sign, never as mathtext


class Canvas:
    """Hands out figures and turns them into SVG; numbers them so each page's ids are unique."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def figure(self, width_in: float, height_in: float) -> Iterator[Figure]:
        mpl = _matplotlib()
        from matplotlib.figure import Figure

        with mpl.rc_context(STYLE), warnings.catch_warnings():
            # The browser draws the text with its own fonts; matplotlib only measures it, with DejaVu
            # Sans, which lacks CJK glyphs: a missing glyph changes nothing on the page.
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
            self.count += 1
            yield Figure(figsize=(width_in, height_in), layout="constrained")

    def svg(self, fig: Figure, tips: Mapping[str, str | Sequence[str]]) -> Html:
        """The figure as inline SVG, each tooltip a `<title>` in the group of the artist with that gid."""
        buffer = io.StringIO()
        with _matplotlib().rc_context({"svg.fonttype": "none", "svg.hashsalt": f"gpuscout-{self.count}"}), \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        return Html(_inline(buffer.getvalue(), tips, prefix=f"f{self.count}-"))


def _matplotlib() -> ModuleType:
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("gpuscout report needs matplotlib, which is not installed.",
                                     "It draws the report's plots as plain SVG.",
                                     "pip install 'gpuscout[report]' (or pip install matplotlib).") from None
    return matplotlib


def _inline(text: str, tips: Mapping[str, str | Sequence[str]], *, prefix: str) -> str:
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    root = ET.fromstring(text)
    for metadata in root.findall(f"{{{SVG_NS}}}metadata"):  # matplotlib's RDF block: namespaces, no content
        root.remove(metadata)
    for element in root.iter():
        if element.get("id") in tips:
            _add_titles(element, tips[str(element.get("id"))])
    _prefix_ids(root, prefix)
    width = root.attrib.pop("width", "")
    root.attrib.pop("height", None)
    root.set("style", f"max-width: {width}" if width else "")
    root.set("role", "img")
    return ET.tostring(root, encoding="unicode")


def _add_titles(group: ET.Element, tip: str | Sequence[str]) -> None:
    """One title for the whole group, or one per mark (the <use> or <path> of each point, in order)."""
    if isinstance(tip, str):
        group.insert(0, _title(tip))
        return
    defined = {id(e) for d in group.iter(f"{{{SVG_NS}}}defs") for e in d.iter()}
    marks = [e for e in group.iter() if e.tag in (f"{{{SVG_NS}}}use", f"{{{SVG_NS}}}path") and id(e) not in defined]
    for mark, text in zip(marks, tip, strict=False):
        mark.append(_title(text))


def _title(text: str) -> ET.Element:
    title = ET.Element(f"{{{SVG_NS}}}title")
    title.text = printable(text)
    return title


def _prefix_ids(root: ET.Element, prefix: str) -> None:
    href = f"{{{XLINK_NS}}}href"
    for element in root.iter():
        if "id" in element.attrib:
            element.set("id", prefix + element.attrib["id"])
        for key, value in element.attrib.items():
            if "url(#" in value:
                element.set(key, _URL_REF.sub(lambda m: f"url(#{prefix}{m.group(1)})", value))
        if element.get(href, "").startswith("#"):
            element.set(href, "#" + prefix + element.attrib[href][1:])


def log_scale(ax: Axes, which: str, suffix: str = "", *, fine_decades: float = 2.0) -> None:
    """A log axis labelled in plain figures (0.5, 1, 2, 5 …, not 10⁰), with `suffix` after each.

    Ticks at 1, 2 and 5 of each decade over at most `fine_decades` decades, at each decade over more (and
    fewer past eight): on a wider axis 1-2-5 labels run into each other. Call it once the
    axis's limits are set (the data drawn, or `set_xlim`)."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    low, high = ax.get_xlim() if which == "x" else ax.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= fine_decades else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=10 if decades <= 8 else 6))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    axis.set_minor_formatter(NullFormatter())


def outside_legend(fig: Figure, ax: Axes, *, width_in: float = 7.2, fontsize: float = 8.0) -> None:
    """The axes' legend above the plot, never over its data: as many columns as fit the figure's width.

    A legend inside the axes ("best" or a fixed corner) sits over whatever data reach that corner (an
    SLO line, the cheapest offer); outside it cannot. Widths are estimated from matplotlib's own font
    metrics at ~0.55 em a character, with room for the key, so a column never runs past the figure.
    """
    handles, texts = ax.get_legend_handles_labels()
    if not handles:
        return
    longest = max(len(t) for t in texts)
    column_pt = longest * fontsize * 0.55 + 3.5 * fontsize  # text + key + gap
    ncol = max(1, min(len(texts), int(width_in * 72 * 0.95 // column_pt)))
    fig.legend(handles, texts, loc="outside upper center", ncol=ncol, fontsize=fontsize)


def point_labels(fig: Figure, ax: Axes, points: Sequence[tuple[float, float]], texts: Sequence[str], *,
                 gid: str, others: Sequence[tuple[float, float]] = (), fontsize: float = 7.5) -> int:
    """Label points with short text, each at the first free spot of ten directions around its point, near
    first, then further out with a thin leader line: free where the label overlaps no label placed before it,
    none of `points` or `others`, and stays inside the axes. A label with no free spot is left out (the
    hover text and the table still name it). Returns how many were placed.

    Overlap is judged on matplotlib's own text extents, padded by a sixth of the width each side: the
    browser draws the text with its own sans-serif, which may run a little wider than DejaVu Sans.
    """
    fig.draw_without_rendering()  # lays out the axes, so extents are final
    renderer = fig._get_renderer()  # type: ignore[attr-defined]  # a bare Figure has no canvas renderer of its own
    room = ax.get_window_extent(renderer)
    # Every point's 8-pixel square, then each label placed, as rows of (x0, y0, x1, y1): one vectorised test
    # a spot, where a pick over thousands of offers would take seconds box by box.
    centres = ax.transData.transform(np.array([*points, *others], dtype=float).reshape(-1, 2))
    taken = np.hstack([centres - 4, centres + 4])
    placed = 0
    for n, (xy, text) in enumerate(zip(points, texts, strict=True)):
        for reach in (7.0, 20.0, 36.0, 54.0):
            note, taken = _free_spot(ax, renderer, xy, label(text, 24), reach, fontsize, room, taken)
            if note is not None:
                note.set_gid(f"{gid}-{n}")
                placed += 1
                break
    return placed


_DIRECTIONS = ((1, 0.5), (1, -1), (-1, 0.5), (-1, -1), (0, 1.2), (0, -1.8), (1, 1.5), (-1, 1.5), (0.3, -1.4),
               (-0.3, -1.4))


def _free_spot(ax: Axes, renderer: RendererBase, xy: tuple[float, float], text: str, reach: float, fontsize: float,
               room: Bbox, taken: NDArray[np.float64]) -> tuple[Annotation | None, NDArray[np.float64]]:
    """The label at the first of the directions, `reach` points out, where it is free (with `taken` grown by
    its box); None where none is."""
    from matplotlib.text import Text

    for dx, dy in _DIRECTIONS:
        note = ax.annotate(text, xy, xytext=(dx * reach, dy * reach * 0.6), textcoords="offset points",
                           ha="left" if dx > 0 else "right" if dx < 0 else "center", va="center", fontsize=fontsize,
                           color="#333333", zorder=5,
                           arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.6, "shrinkA": 1,
                                       "shrinkB": 3} if reach > 10 else None)
        note.update_positions(renderer)  # an annotation places its text when drawn: place it now
        box = Text.get_window_extent(note, renderer)  # the text alone, not its leader line
        pad = box.width / 6
        x0, y0, x1, y1 = box.x0 - pad, box.y0 - 1, box.x1 + pad, box.y1 + 1
        clear = not np.any((taken[:, 0] < x1) & (taken[:, 2] > x0) & (taken[:, 1] < y1) & (taken[:, 3] > y0))
        if room.contains(x0, y0) and room.contains(x1, y1) and clear:
            return note, np.vstack([taken, [x0, y0, x1, y1]])
        note.remove()
    return None, taken
