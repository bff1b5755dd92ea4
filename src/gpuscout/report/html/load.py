"""Load sweeps and searches: TTFT and TPOT P50/P95 against throughput with the SLO lines, and goodput.

Every load result given is drawn on the same axes, one colour each, so two machines' sweeps read
side by side. A level whose validity gate failed, or could not run one of its checks (docs/measurement.md §2),
is drawn hollow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuscout.documents.kinds import RunDoc
from gpuscout.report.html.parts import Html, bullets, figure, para, table
from gpuscout.report.html.svg import Canvas, color, label, outside_legend
from gpuscout.report.numbers import common_unit, in_unit, money, percent, seconds, sig
from gpuscout.results.schema import TPOT_S, TTFT_S, VALID_NOTE, Case, Metric, level_verdict
from gpuscout.workload.job import Slo

if TYPE_CHECKING:
    from matplotlib.axes import Axes

VERDICT_WORDS = {"valid": "yes", "invalid": "no", "not measured": "not measured"}
# (metric, SLO field, what): the latencies drawn against throughput.
LATENCIES = ((TTFT_S, "ttft_p95_s", "TTFT"), (TPOT_S, "tpot_p95_s", "TPOT"))


@dataclass(frozen=True)
class Level:
    case: Case
    level: float
    throughput: float  # output tokens/s
    valid: bool


@dataclass(frozen=True)
class LoadSeries:
    letter: str  # the result's letter on the page (A, B, C …)
    doc: RunDoc
    levels: list[Level]
    colour: str  # the colour of its letter: a result looks the same in every plot of the page


def sweep_plots(docs: Sequence[RunDoc], letters: Sequence[str], canvas: Canvas, *, slo: Slo | None) -> list[Html]:
    loads = [LoadSeries(letter=letter, doc=doc, levels=levels(doc), colour=color(i))
             for i, (doc, letter) in enumerate(zip(docs, letters, strict=True)) if doc.result.kind == "load"]
    loads = [s for s in loads if s.levels]
    if sum(len(s.levels) for s in loads) < 2:
        return []
    parts = [latency_plot(loads, metric, field, what, canvas, targets(loads, field, slo))
             for metric, field, what in LATENCIES]
    if any(_value(lv.case, "goodput_rps") is not None for s in loads for lv in s.levels):
        parts.append(goodput_plot(loads, canvas))
    else:
        parts.append(para("No goodput: it counts the requests that met the SLO, so it needs targets "
                          "(gpuscout load … --ttft-p95 S --tpot-p95 S).", class_="note"))
    return parts


def levels(doc: RunDoc) -> list[Level]:
    out = []
    for case in doc.result.cases:
        level = case.params.get("concurrency") if case.params.get("arrival") == "concurrency" else case.params.get(
            "rate_rps")
        throughput = _value(case, "output_tokens_per_s")
        if isinstance(level, int | float) and throughput is not None:
            out.append(Level(case=case, level=float(level), throughput=throughput,
                             valid=level_verdict(case) == "valid"))
    return sorted(out, key=lambda lv: lv.level)


def targets(loads: Sequence[LoadSeries], field: str, slo: Slo | None) -> list[float]:
    """The SLO lines to draw: the targets given to `report`, else those the results recorded."""
    given = getattr(slo, field) if slo is not None else None
    if given is not None:
        return [given]
    return sorted({v for s in loads if s.doc.slo is not None and (v := getattr(s.doc.slo, field)) is not None})


def latency_plot(loads: Sequence[LoadSeries], metric: str, field: str, what: str, canvas: Canvas,
                 lines: Sequence[float]) -> Html:
    values = [q for s in loads for lv in s.levels for q in _quantiles(lv.case, metric) if q is not None]
    unit, factor = common_unit([*values, *lines], "s")
    tips: dict[str, str | list[str]] = {}
    marks = 0
    with canvas.figure(7.2, 3.6) as fig:
        ax = fig.add_subplot()
        for i, series in enumerate(loads):
            letter, colour = series.letter, series.colour
            points = [(lv, p50, p95) for lv in series.levels for p50, p95 in (_quantiles(lv.case, metric),)
                      if p50 is not None and p95 is not None]
            if not points:
                continue
            xs = [lv.throughput for lv, _, _ in points]
            name = label(f"{letter}: {series.doc.result.name}", 44) + " " if len(loads) > 1 else ""
            for which, pick, style in (("P95", 1, "-"), ("P50", 0, "--")):
                ys = [(p95 if pick else p50) / factor for _, p50, p95 in points]
                ax.plot(xs, ys, color=colour, linewidth=1.6 if pick else 1.2, linestyle=style, label=name + which)
                dots = ax.scatter(xs, ys, s=26, zorder=3, edgecolors=colour,
                                  facecolors=[colour if lv.valid else "none" for lv, _, _ in points])
                gid = f"{metric}-{which}-{i}"
                dots.set_gid(gid)
                tips[gid] = [_level_tip(letter, lv, what, p95 if pick else p50, which) for lv, p50, p95 in points]
            marks += 2 * len(points)
        for target in lines:
            ax.axhline(target / factor, color="#D55E00", linewidth=1.2, linestyle=":",
                       label=f"SLO: P95 {what} ≤ {seconds(target)}")
        ax.set_xlabel("throughput, output tokens/s")
        ax.set_ylabel(f"{what}, {unit}")
        outside_legend(fig, ax, fontsize=7.5)
        svg = canvas.svg(fig, tips)
    caption = (f"{what} P95 (solid) and P50 (dashed) at each load level, against the throughput it delivered; the "
               "dotted line is the SLO target. Hollow points failed the validity gate. Hover a point for its level.")
    return figure(svg, caption, name=f"sweep-{metric}", marks=marks)


def goodput_plot(loads: Sequence[LoadSeries], canvas: Canvas) -> Html:
    tips: dict[str, str | list[str]] = {}
    marks = 0
    arrival = {str(lv.case.params.get("arrival")) for s in loads for lv in s.levels}
    with canvas.figure(7.2, 3.4) as fig:
        ax = fig.add_subplot()
        for i, series in enumerate(loads):
            letter, colour = series.letter, series.colour
            good = [(lv, g) for lv in series.levels if (g := _value(lv.case, "goodput_rps")) is not None]
            served = [(lv, r) for lv in series.levels if (r := _value(lv.case, "requests_per_s")) is not None]
            name = f"{letter}: " if len(loads) > 1 else ""
            ax.plot([lv.level for lv, _ in served], [r for _, r in served], color=colour, linestyle="--",
                    linewidth=1.1, label=label(f"{name}requests/s served", 44))
            if good:
                dots = ax.scatter([lv.level for lv, _ in good], [g for _, g in good], color=colour, s=26, zorder=3,
                                  label=label(f"{name}goodput (met the SLO)", 44))
                ax.plot([lv.level for lv, _ in good], [g for _, g in good], color=colour, linewidth=1.6)
                dots.set_gid(f"goodput-{i}")
                tips[f"goodput-{i}"] = [f"{letter} · {lv.case.name}: goodput {sig(g)} req/s of "
                                        f"{sig(_value(lv.case, 'requests_per_s') or 0.0)} served" for lv, g in good]
                marks += len(good)
            _mark_best(ax, series, i, tips)
        if arrival == {"concurrency"}:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("concurrency (requests in flight)" if arrival == {"concurrency"} else "load level")
        ax.set_ylabel("requests/s")
        ax.set_ylim(bottom=0)
        outside_legend(fig, ax, fontsize=7.5)
        svg = canvas.svg(fig, tips)
    caption = ("Goodput (solid): requests per second that met every SLO target, against all requests served "
               "(dashed). A star marks the highest level a search found meeting the SLO.")
    return figure(svg, caption, name="sweep-goodput", marks=marks)


def _mark_best(ax: Axes, series: LoadSeries, i: int, tips: dict[str, str | list[str]]) -> None:
    doc = series.doc
    best = doc.search.best_level if doc.search is not None else None
    hit = [lv for lv in series.levels if best is not None and lv.level == float(best)]
    if not hit or doc.search is None:
        return
    y = _value(hit[0].case, "goodput_rps") or 0.0
    star = ax.scatter([hit[0].level], [y], marker="*", s=180, color=series.colour, edgecolors="#000000",
                      linewidths=0.6, zorder=4)
    star.set_gid(f"best-{i}")
    tips[f"best-{i}"] = f"search: {doc.search.message}"


def _level_tip(letter: str, lv: Level, what: str, value: float, which: str) -> str:
    return (f"{letter} · {lv.case.name}{'' if lv.valid else ' (invalid)'}: {which} {what} {seconds(value)} at "
            f"{sig(lv.throughput)} output tokens/s")


def _quantiles(case: Case, metric: str) -> tuple[float | None, float | None]:
    m = _metric(case, metric)
    return (m.summary.p50, m.summary.p95) if m is not None and m.summary is not None else (None, None)


def _metric(case: Case, name: str) -> Metric | None:
    return next((m for m in case.metrics if m.name == name), None)


def _value(case: Case, name: str) -> float | None:
    m = _metric(case, name)
    return m.value if m is not None else None


# ---------------------------------------------------------------- tables ---------------------

def load_tables(doc: RunDoc) -> list[Html]:
    cases = doc.result.cases
    lat = [q for c in cases for name in (TTFT_S, TPOT_S) for q in _quantiles(c, name) if q is not None]
    unit, factor = common_unit(lat, "s")
    rows = [[c.name, _count(c), _sig(_value(c, "requests_per_s")), _sig(_value(c, "output_tokens_per_s")),
             *(in_unit(q, factor) for name in (TTFT_S, TPOT_S) for q in _quantiles(c, name)),
             _sig(_value(c, "goodput_rps")), percent(_value(c, "error_rate") or 0.0, 1),
             VERDICT_WORDS[level_verdict(c)]] for c in cases]
    out = [table(["level", "requests", "req/s", "out tok/s", f"TTFT P50 {unit}", f"TTFT P95 {unit}",
                  f"TPOT P50 {unit}", f"TPOT P95 {unit}", "goodput req/s", "errors", "valid"], rows,
                 caption="Load levels", numeric=tuple(range(1, 10)))]
    if doc.costs:
        out.append(table(["level", "price", "per hour", "per 1M output tokens", "per request", "per 1M goodput tokens"],
                         [[c.case, c.cost.price_source, money(c.cost.usd_per_hour),
                           money(c.cost.usd_per_1m_output_tokens), money(c.cost.usd_per_request),
                           money(c.cost.usd_per_1m_goodput_tokens)] for c in doc.costs],
                         caption="Cost of the load (USD)", numeric=(2, 3, 4, 5)))
    if doc.search is not None:
        out.append(para(f"Search: {doc.search.message}", class_="verdict"))
    notes = [f"{c.name}: {n}" for c in cases for n in c.notes if n != VALID_NOTE]
    return out + ([bullets(notes, class_="note")] if notes else [])


def _count(case: Case) -> str:
    m = _metric(case, TTFT_S)
    return str(m.summary.n) if m is not None and m.summary is not None else "—"


def _sig(value: float | None) -> str:
    return "—" if value is None else sig(value)
