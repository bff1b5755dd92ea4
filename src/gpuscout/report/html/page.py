"""`gpuscout report`: one self-contained HTML file from any of gpuscout's outputs.

The page holds everything it shows: its style inline, each plot as inline SVG (`svg`), no font
file (the browser's own sans-serif) and at most one small inline script, which sorts and filters
the long tables (`interact`); with scripts off every table is still there, whole. A
Content-Security-Policy in the page allows that script alone, by its SHA-256, and forbids every
fetch, so even a string that escaped escaping could not run and the page cannot reach the network.
Views by kind: `estimate`, `pick`,
`compare`, `runs` (bench and load; every result given is drawn on the same axes) and
`checks` (doctor, probe and any other kind: cases × metrics against their bands).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuscout.documents.kinds import ChecksDoc, CompareDoc, Document, EstimateDoc, PickDoc, RunDoc
from gpuscout.report.html.checks import checks_view
from gpuscout.report.html.compare import compare_view
from gpuscout.report.html.estimate import estimate_view
from gpuscout.report.html.interact import CSS as TABLE_CSS
from gpuscout.report.html.interact import SCRIPT, SCRIPT_HASH
from gpuscout.report.html.parts import Html, section, table, tag
from gpuscout.report.html.pick import pick_view
from gpuscout.report.html.runs import runs_view
from gpuscout.report.html.svg import Canvas
from gpuscout.workload.job import Slo

# No script but the page's own may run, and nothing may be fetched; styles are inline (matplotlib's SVG uses
# style attributes).
POLICY = (f"default-src 'none'; script-src '{SCRIPT_HASH}'; style-src 'unsafe-inline'; img-src data:; "
          "base-uri 'none'; form-action 'none'")
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans", "PingFang SC", "Microsoft YaHei",
       sans-serif; margin: 0 auto; max-width: 1100px; padding: 1.5rem; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ccc;
  padding-bottom: 0.2rem; margin-top: 2.2rem; } h3 { font-size: 1.05rem; margin-top: 1.4rem; }
table { border-collapse: collapse; margin: 0.6rem 0 1rem; font-size: 0.85rem; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 0.2rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3rem; }
figure.plot { margin: 1rem 0; } figure.plot svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.82rem; color: #444; max-width: 80ch; }
.note { font-size: 0.85rem; color: #444; max-width: 90ch; } .warn { color: #a33f00; font-weight: 600; }
.verdict { font-size: 1.02rem; border-left: 4px solid #0072B2; padding: 0.4rem 0.8rem; background: #f3f8fc; }
code { font-size: 0.8rem; overflow-wrap: anywhere; } nav ol { columns: 2; font-size: 0.9rem; }
details { margin: 0.4rem 0; } summary { cursor: pointer; }
.table-wrap { overflow-x: auto; }
""" + TABLE_CSS


@dataclass(frozen=True)
class RenderedReport:
    html: str
    plots: int  # SVG figures in the page
    sections: tuple[tuple[str, str], ...]  # (anchor, title) in order


def render_report(docs: Sequence[Document], *, title: str = "gpuscout report", slo: Slo | None = None,
                  generated_at: datetime | None = None, version: str = "") -> RenderedReport:
    """The page: a header naming every source, one section per document (bench and load results share one)."""
    canvas = Canvas()
    parts: list[tuple[str, str, Html]] = []
    runs = [d for d in docs if isinstance(d, RunDoc)]
    for i, doc in enumerate(docs):
        if isinstance(doc, RunDoc):
            if doc is runs[0]:
                parts.append(("measurements", "Measurements", section(
                    "measurements", "Measurements", runs_view(runs, canvas, slo=slo), kind="runs")))
            continue
        anchor, heading = f"doc-{i + 1}", _heading(doc)
        parts.append((anchor, heading, section(anchor, heading, _view(doc, canvas), kind=doc.kind)))
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    header = tag("header", [tag("h1", title),
                            tag("p", f"Made by gpuscout{' ' + version if version else ''} on {when} from "
                                     f"{len(docs)} source(s).", class_="note"),
                            _sources(docs), tag("nav", tag("ol", [tag("li", tag("a", t, href=f"#{a}"))
                                                                  for a, t, _ in parts]))])
    main = tag("main", [p for _, _, p in parts])
    sortable = "data-sortable" in main
    script = [Html(f"<script>{SCRIPT}</script>")] if sortable else []
    body = tag("body", [header, main, _footer(sortable), *script])
    head = tag("head", [Html('<meta charset="utf-8">'),
                        Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
                        Html(f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'),
                        tag("title", title), tag("style", Html(CSS))])
    page = "<!DOCTYPE html>\n" + tag("html", [head, body], lang="en") + "\n"
    return RenderedReport(html=page, plots=canvas.count, sections=tuple((a, t) for a, t, _ in parts))


def _view(doc: Document, canvas: Canvas) -> list[Html]:
    match doc:
        case EstimateDoc():
            return estimate_view(doc, canvas)
        case PickDoc():
            return pick_view(doc, canvas)
        case CompareDoc():
            return compare_view(doc, canvas)
        case ChecksDoc():
            return checks_view(doc, canvas)
    raise AssertionError(f"no view for {type(doc).__name__}")


def _heading(doc: Document) -> str:
    match doc:
        case EstimateDoc():
            return f"Estimate: {doc.screening.job_name}"
        case PickDoc():
            return f"Pick: {doc.pick.job_name}"
        case CompareDoc():
            return f"Compare: {doc.comparison.job_name} ({doc.comparison.kind})"
        case ChecksDoc():
            return f"{doc.result_kind.capitalize()}: {doc.name}"
    return doc.label


def _sources(docs: Sequence[Document]) -> Html:
    rows = [[str(i + 1), d.label, d.kind if not isinstance(d, RunDoc | ChecksDoc) else _result_kind(d)]
            for i, d in enumerate(docs)]
    return table(["#", "source", "kind"], rows, caption="Sources")


def _result_kind(doc: RunDoc | ChecksDoc) -> str:
    return doc.result.kind if isinstance(doc, RunDoc) else doc.result_kind


def _footer(scripted: bool) -> Html:
    script = ("Its one script only sorts and filters the tables; with scripts off they are all there, in "
              "gpuscout's order. " if scripted else "This page runs no script. ")
    return tag("footer", tag("p", "Costs are opinions of the prices given when each output was made; measurements "
                                  "and estimates are facts of their runs. " + script + "It loads nothing: it "
                                  "works offline.", class_="note"))
