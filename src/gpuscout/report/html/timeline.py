"""A load run's requests one by one: each successful request's TTFT and end-to-end latency, in the order sent.

A result keeps every successful request's TTFT and E2E as samples of its `ttft_s` and `e2e_s` metrics,
in the order the requests were sent (`loadgen.record.build_records`: measured records in index order;
a level run several times keeps each run's samples in turn). The plot lays the levels end to end, as
they ran, so a warm-up that did not settle, a stall or a queue building up at a level reads as a
shape, where the percentiles of the sweep plots only say that the tail was long.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.documents.kinds import RunDoc
from gpuscout.report.html.parts import Html, figure
from gpuscout.report.html.svg import Canvas, color, label, log_scale, outside_legend
from gpuscout.report.numbers import common_unit, seconds
from gpuscout.results.schema import E2E_S, TTFT_S, Case
from gpuscout.workload.job import Slo

_MAX_RESULTS = 4  # load results drawn one timeline each; the rest are in their tables
_LOG_SPAN = 30.0  # latencies spanning more than this factor go on a log axis


def timeline_plots(docs: Sequence[RunDoc], letters: Sequence[str], canvas: Canvas, *,
                   slo: Slo | None) -> list[Html]:
    drawn = [(doc, letter) for doc, letter in zip(docs, letters, strict=True)
             if doc.result.kind == "load" and any(_pairs(c) for c in doc.result.cases)][:_MAX_RESULTS]
    return [timeline_plot(doc, letter if len(docs) > 1 else "", canvas, slo=slo) for doc, letter in drawn]


def _pairs(case: Case) -> list[tuple[float, float]]:
    """(TTFT, E2E) of each successful request in the order sent; none when the two lists do not pair up."""
    ttft = next((m.samples for m in case.metrics if m.name == TTFT_S), ())
    e2e = next((m.samples for m in case.metrics if m.name == E2E_S), ())
    return list(zip(ttft, e2e, strict=True)) if ttft and len(ttft) == len(e2e) else []


def _level_word(case: Case) -> str:
    params = case.params
    if params.get("arrival") == "concurrency" and "concurrency" in params:
        return str(params["concurrency"])
    if "rate_rps" in params:
        return f"{params['rate_rps']}/s"
    return label(case.name, 14)


def timeline_plot(doc: RunDoc, letter: str, canvas: Canvas, *, slo: Slo | None) -> Html:
    cases = [(c, p) for c in doc.result.cases if (p := _pairs(c))]
    values = [v for _, pairs in cases for pair in pairs for v in pair]
    target = slo.ttft_p95_s if slo is not None and slo.ttft_p95_s is not None else (
        doc.slo.ttft_p95_s if doc.slo is not None else None)
    unit, factor = common_unit([*values, *([target] if target else [])], "s")
    tips: dict[str, str | Sequence[str]] = {}
    marks, start, middles, bounds = 0, 0, [], []
    with canvas.figure(7.2, 3.4) as fig:
        ax = fig.add_subplot()
        for k, (case, pairs) in enumerate(cases):
            xs = list(range(start + 1, start + len(pairs) + 1))
            for j, (what, pick, size) in enumerate((("TTFT", 0, 9), ("end to end", 1, 7))):
                dots = ax.scatter(xs, [p[pick] / factor for p in pairs], s=size, color=color(j), alpha=0.8,
                                  linewidths=0, label=what if k == 0 else None, zorder=3 - j)
                gid = f"timeline-{k}-{j}"
                dots.set_gid(gid)
                tips[gid] = [f"{case.name} · request {n}: {what} {seconds(p[pick])}"
                             for n, p in enumerate(pairs, start=1)]
                marks += len(pairs)
            middles.append(start + (len(pairs) + 1) / 2)
            start += len(pairs)
            bounds.append(start + 0.5)
        for x in bounds[:-1]:
            ax.axvline(x, color="#999999", linewidth=0.8, linestyle="--", zorder=1)
        if target:
            ax.axhline(target / factor, color="#D55E00", linewidth=1.2, linestyle=":",
                       label=f"SLO: P95 TTFT ≤ {seconds(target)}")
        ax.set_xlim(0.5, start + 0.5)
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > _LOG_SPAN:
            log_scale(ax, "y")
        ax.set_xlabel("request, in the order sent (levels one after another)")
        ax.set_ylabel(f"latency, {unit}")
        top = ax.secondary_xaxis("top")
        top.set_xticks(middles, [_level_word(c) for c, _ in cases])
        top.tick_params(length=0, labelsize=7.5)
        arrival = {c.params.get("arrival") for c, _ in cases}
        top.set_xlabel("concurrency" if arrival == {"concurrency"} else "load level", fontsize=8)
        outside_legend(fig, ax)
        svg = canvas.svg(fig, tips)
    who = f"{letter}: " if letter else ""
    caption = (f"{who}Every successful request of {label(doc.result.name, 60)}, level after level as they ran (dashed "
               "lines part the levels, named on top): its time to first token and its end-to-end latency. A "
               "rising run inside a level is a queue building; a lone high point, a stall. Hover a point for it.")
    return figure(svg, caption, name="load-timeline", marks=marks)
