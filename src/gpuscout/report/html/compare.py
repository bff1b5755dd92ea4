"""The compare view: each metric's ratio with its 95% CI as a forest plot, the fairness findings, the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.documents.kinds import CompareDoc
from gpuscout.report.compare_cells import (
    MACHINE_HEADER,
    difference_rows,
    fairness_headline,
    machine_rows,
    metric_name,
    ratio_note,
    telemetry_lines,
)
from gpuscout.report.html.parts import Html, bullets, figure, para, table, tag
from gpuscout.report.html.svg import Canvas, label, log_scale
from gpuscout.report.numbers import duration, ratio, ratio_band, value_in
from gpuscout.report.pick import shown_money
from gpuscout.results.compare import Comparison, MetricRow
from gpuscout.results.ratios import Ratio

# Colour by finding: a real lead green, a real lag orange-red, everything undecided grey.
FINDING_COLOURS = {"better": "#009E73", "worse": "#D55E00"}
_UNDECIDED = "#777777"
_MAX_ROWS = 60  # forest rows drawn; the tables below keep every metric


@dataclass(frozen=True)
class ForestRow:
    text: str
    ratio: Ratio
    headline: bool
    tip: str


def compare_view(doc: CompareDoc, canvas: Canvas) -> list[Html]:
    c = doc.comparison
    parts = [table(MACHINE_HEADER, machine_rows(c), caption="Machines (A is the baseline)"),
             tag("h3", "Verdict"), tag("div", [tag("p", doc.verdict.text), bullets(doc.verdict.reasons)],
                                         class_="verdict"),
             tag("h3", "Fairness"), *_fairness(c)]
    rows = forest_rows(c)
    if rows:
        parts += [tag("h3", "Ratios with 95% confidence intervals"), forest_plot(rows[:_MAX_ROWS], canvas),
                  para(ratio_note(c.options), class_="note")]
    if doc.costs:
        parts += [tag("h3", "Cost of the whole job"), _cost_table(doc)]
    if doc.warnings:
        parts.append(bullets(doc.warnings, class_="note"))
    return parts


def _fairness(c: Comparison) -> list[Html]:
    f = c.fairness
    labels = [m.label for m in c.machines]
    out = [para(fairness_headline(c), class_=None if f.fair else "warn")]
    if f.differences:
        out.append(table(["fixed variable", *labels], difference_rows(f.differences), caption="Fixed variables that "
                                                                                              "differ"))
    if f.machine_differences:
        out.append(table(["machine", *labels], difference_rows(f.machine_differences),
                         caption="What is being compared (listed, not flagged)"))
    disturbed = any(m.disturbances for m in c.machines)
    out.append(bullets([*f.notes, *telemetry_lines(c)], class_="warn" if disturbed else "note"))
    return out


def forest_rows(c: Comparison) -> list[ForestRow]:
    """One row per metric and non-baseline machine with a ratio; the headline metric first."""
    rows = []
    headline = (c.headline.case, c.headline.metric) if c.headline else None
    for case in c.cases:
        for metric in case.metrics:
            for j, r in enumerate(metric.ratios[1:], start=1):
                if r.advantage is None or not math.isfinite(r.advantage) or r.advantage <= 0:
                    continue
                text = f"{case.name} · {metric_name(metric)} ({c.machines[j].label} vs A)"
                rows.append(ForestRow(text=text, ratio=r, headline=(case.name, metric.name) == headline,
                                      tip=_tip(metric, j, r, c)))
    return sorted(rows, key=lambda row: not row.headline)


def forest_plot(rows: list[ForestRow], canvas: Canvas) -> Html:
    """Advantage (above 1 = better than A) on a log axis, its 95% CI as a bar, the line of no difference at 1."""
    tips: dict[str, str | list[str]] = {}
    ys = list(range(len(rows)))[::-1]
    with canvas.figure(7.2, 1.1 + 0.3 * len(rows)) as fig:
        ax = fig.add_subplot()
        ax.axvline(1.0, color="#333333", linewidth=1.0, zorder=1)
        for y, row in zip(ys, rows, strict=True):
            r = row.ratio
            colour = FINDING_COLOURS.get(r.finding, _UNDECIDED)
            if r.ci95_low is not None and r.ci95_high is not None:
                line = ax.plot([max(r.ci95_low, 1e-3), min(r.ci95_high, 1e3)], [y, y], color=colour, linewidth=2.4,
                               solid_capstyle="butt", zorder=2)[0]
                line.set_gid(f"ci-{y}")
                tips[f"ci-{y}"] = row.tip
        points = ax.scatter([row.ratio.advantage or 1.0 for row in rows], ys, zorder=3, s=[42 if r.headline else 24
                                                                                   for r in rows],
                            color=[FINDING_COLOURS.get(r.ratio.finding, _UNDECIDED) for r in rows],
                            edgecolors="#000000", linewidths=0.6)
        points.set_gid("advantages")
        tips["advantages"] = [row.tip for row in rows]
        ends = [v for row in rows for v in (row.ratio.advantage, row.ratio.ci95_low, row.ratio.ci95_high)
                if v is not None and v > 0]
        ax.set_xscale("log")
        ax.set_xlim(max(min([0.8, *ends]) / 1.15, 1e-3), min(max([1.25, *ends]) * 1.15, 1e3))
        log_scale(ax, "x", "×")  # after the limits: it spaces its ticks by the decades shown
        ax.set_yticks(ys, [label(("★ " if r.headline else "") + r.text, 70) for r in rows])
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("advantage over A (×, log scale; above 1 = better)")
        svg = canvas.svg(fig, tips)
    caption = ("Each row: how many times better than A, with its 95% confidence interval. Green: a real lead; "
               "orange-red: a real lag; grey: no measurable or meaningful difference, noisy, or a single reading. "
               "★ marks the headline metric the verdict rests on. Hover for the figures and the reason.")
    return figure(svg, caption, name="compare-forest", marks=len(rows))


def _tip(metric: MetricRow, j: int, r: Ratio, c: Comparison) -> str:
    base, this = metric.stats[0], metric.stats[j]
    band = ratio_band(r.ci95_low, r.ci95_high) if r.ci95_low is not None and r.ci95_high is not None else "no CI"
    return "\n".join([f"{metric_name(metric)}: {c.machines[j].label} {ratio(r.advantage)} A (95% CI {band})",
                      f"A {value_in(base.mean, metric.unit)}, {c.machines[j].label} {value_in(this.mean, metric.unit)}"
                      f"; runs {r.runs[0]} and {r.runs[1]}",
                      f"{r.finding}{': ' + r.reason if r.reason else ''}"])


def _cost_table(doc: CompareDoc) -> Html:
    labels = [m.label for m in doc.comparison.machines]
    rows = [[label_, c.offer_id, f"{c.provider}, {c.tier}, {c.gpu_count}× {c.gpu_sku}", duration(c.work.work_s),
             shown_money(c.total_usd, doc.currency), shown_money(c.low_usd, doc.currency) + "–"
             + shown_money(c.high_usd, doc.currency), shown_money(c.total_p95_usd, doc.currency), str(c.observed_at)]
            for label_, c in zip(labels, doc.costs, strict=False)]
    return table(["", "offer", "machine", "job time", "total", "95% range", "P95", "price observed"], rows,
                 caption=f"Total job cost on each machine ({doc.currency.code})", numeric=(3, 4, 5, 6))
