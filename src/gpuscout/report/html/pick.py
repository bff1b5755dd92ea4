"""The pick view: total cost against job time for every offer, the Pareto frontier, the excluded and why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscout.cost.pick_row import PickRow
from gpuscout.documents.kinds import PickDoc
from gpuscout.hardware.currency import DisplayCurrency, from_usd
from gpuscout.report.html.parts import Html, bullets, details, figure, para, shorten, table, tag
from gpuscout.report.html.svg import Canvas, color, log_scale
from gpuscout.report.numbers import duration, duration_band
from gpuscout.report.pick import (
    TIGHT_CAPTION,
    TOP,
    plan_words,
    rates_text,
    shown_money,
    shown_rows,
    tight_words,
    unit_costs,
)
from gpuscout.units import HOUR_S

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_LOG_SPAN = 30.0  # an axis spanning more than this factor is drawn on a log scale
_IDS_SHOWN = 12  # offer ids listed per reason before the rest fold away


def pick_view(doc: PickDoc, canvas: Canvas) -> list[Html]:
    pick = doc.pick
    ranked = [r for r in pick.rows if r.excluded is None]
    excluded = [r for r in pick.rows if r.excluded is not None]
    written = " (the job as written, no plans)" if pick.as_written else ""
    intro = para(f"{len(pick.rows):,} offers: {len(ranked):,} ranked by total job cost, {len(excluded):,} "
                 f"excluded{written}. Amounts in {pick.currency.code}.")
    parts = [intro]
    if any(r.runtime_s is not None and r.total_usd is not None for r in pick.rows):
        parts.append(cost_time_plot(pick.rows, pick.currency, canvas))
    parts += [ranked_table(doc), *excluded_tables(excluded)]
    notes = [*(["Exchange rates: " + rates_text(pick.exchange_rates).removeprefix("Exchange rates used: ")]
               if pick.exchange_rates else []), *pick.warnings, *doc.notes]
    return parts + ([bullets(notes, class_="note")] if notes else [])


def cost_time_plot(rows: Sequence[PickRow], shown: DisplayCurrency, canvas: Canvas) -> Html:
    """Every offer with a runtime and a bill as a point; the frontier as a staircase; excluded ones greyed."""
    groups = (("ranked", [r for r in rows if r.excluded is None and not r.pareto], color(5), "o", 18),
              ("Pareto frontier", [r for r in rows if r.excluded is None and r.pareto], color(0), "D", 30),
              ("excluded", [r for r in rows if r.excluded is not None], "#aaaaaa", "x", 18))
    tips: dict[str, str | Sequence[str]] = {}
    marks = 0
    with canvas.figure(7.2, 4.2) as fig:
        ax = fig.add_subplot()
        for name, group, colour, marker, size in groups:
            group = [r for r in group if r.runtime_s is not None and r.total_usd is not None]
            if not group:
                continue
            xs, ys = [_hours(r) for r in group], [from_usd(r.total_usd or 0.0, shown) for r in group]
            dots = ax.scatter(xs, ys, marker=marker, s=size, color=colour, label=f"{name} ({len(group):,})",
                              zorder=3 if name == "Pareto frontier" else 2, linewidths=1.0)
            dots.set_gid(f"offers-{name.split()[0].lower()}")
            tips[f"offers-{name.split()[0].lower()}"] = [_tip(r, shown) for r in group]
            marks += len(group)
        frontier = sorted((r for r in rows if r.pareto and r.excluded is None and r.runtime_s is not None),
                          key=lambda r: r.runtime_s or 0.0)
        if len(frontier) > 1:
            ax.plot([_hours(r) for r in frontier], [from_usd(r.total_usd or 0.0, shown) for r in frontier],
                    drawstyle="steps-post", color=color(0), linewidth=1.2, zorder=1)
        _scales(ax, [r for r in rows if r.runtime_s is not None and r.total_usd is not None], shown)
        ax.set_xlabel("job time, hours")
        ax.set_ylabel(f"total cost of the job, {shown.code}")
        ax.legend(loc="upper right")
        svg = canvas.svg(fig, tips)
    caption = ("Each point is an offer: what the whole job costs there against how long it takes. The line joins "
               "the Pareto frontier (no other offer is both faster and cheaper). Grey crosses were excluded (deadline, "
               "budget, host, SLO): the reason is in the hover text and in the table below.")
    return figure(svg, caption, name="pick-cost-time", marks=marks)


def _scales(ax: Axes, rows: Sequence[PickRow], shown: DisplayCurrency) -> None:
    xs = [_hours(r) for r in rows]
    ys = [from_usd(r.total_usd or 0.0, shown) for r in rows]
    for values, which in ((xs, "x"), (ys, "y")):
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > _LOG_SPAN:
            log_scale(ax, which)


def _hours(row: PickRow) -> float:
    return (row.runtime_s or 0.0) / HOUR_S


def _tip(row: PickRow, shown: DisplayCurrency) -> str:
    band = (f" ({duration_band(row.runtime_low_s, row.runtime_high_s)})"
            if row.runtime_low_s is not None and row.runtime_high_s is not None else "")
    lines = [f"{row.offer_id}{' (Pareto frontier)' if row.pareto else ''}",
             f"{row.provider}, {row.tier}, {_gpus(row)}",
             f"job time {duration(row.runtime_s or 0.0)}{band}",
             f"total {shown_money(row.total_usd, shown)}, P95 {shown_money(row.total_p95_usd, shown)}"]
    if row.plan:
        lines.append(f"plan: {plan_words(row.plan)}")
    if tight_words(row, shown):
        lines.append(tight_words(row, shown).strip())
    if row.excluded is not None:
        lines.append(f"excluded: {row.excluded}")
    return "\n".join(lines)


def ranked_table(doc: PickDoc) -> Html:
    pick = doc.pick
    rows, hidden = shown_rows(pick, wide=False, top=TOP)
    cells = [[str(i + 1), Html(tag("strong", r.offer_id) if r.pareto else tag("span", r.offer_id)),
              f"{r.provider}, {r.tier}", _gpus(r), _runtime(r), shown_money(r.total_usd, pick.currency),
              shown_money(r.total_p95_usd, pick.currency), shorten(unit_costs(r.unit_costs_usd, pick.currency), 60),
              "" if r.slo_met is None else ("yes" if r.slo_met else "no"),
              "; ".join(x for x in (plan_words(r.plan) if r.plan else "", tight_words(r, pick.currency).strip()) if x),
              f"{r.observed_at}{' (stale)' if r.stale else ''}"] for i, r in enumerate(rows)]
    caption = f"Ranked offers ({pick.currency.code}; bold: on the Pareto frontier)"
    out = [table(["#", "offer", "provider", "GPUs", "job time", "total", "P95", "per unit", "SLO", "plan",
                  "observed"], cells, caption=caption, numeric=(0, 4, 5, 6))]
    if hidden:
        out.append(para(f"… {hidden:,} more ranked offers not shown (`gpuscout pick --json` has every row).",
                        class_="note"))
    if any(r.fit_verdict == "tight" and r.excluded is None for r in rows):
        out.append(para(TIGHT_CAPTION, class_="note"))
    return Html("".join(out))


def excluded_tables(rows: Sequence[PickRow]) -> list[Html]:
    """The excluded offers, one row per reason with its offers (the long lists fold away)."""
    if not rows:
        return []
    by_reason: dict[str, list[PickRow]] = {}
    for row in rows:
        by_reason.setdefault(row.excluded or "", []).append(row)
    cells = [[reason, f"{len(group):,}", _ids(group)] for reason, group in by_reason.items()]
    return [table(["why excluded", "offers", "which"], cells, caption="Excluded offers", numeric=(1,))]


def _ids(group: Sequence[PickRow]) -> Html:
    ids = [r.offer_id for r in group]
    shown = tag("span", ", ".join(ids[:_IDS_SHOWN]))
    if len(ids) <= _IDS_SHOWN:
        return shown
    return Html(shown + details(f"and {len(ids) - _IDS_SHOWN:,} more", [tag("span", ", ".join(ids[_IDS_SHOWN:]))]))


def _gpus(row: PickRow) -> str:
    used = f"{row.gpus_needed}/" if row.gpus_needed is not None and row.excluded is None else ""
    return f"{used}{row.gpu_count}× {row.gpu_sku}"


def _runtime(row: PickRow) -> str:
    if row.runtime_s is None:
        return "-"
    if row.runtime_low_s is None or row.runtime_high_s is None or not math.isfinite(row.runtime_high_s):
        return duration(row.runtime_s)
    return f"{duration(row.runtime_s)} ({duration_band(row.runtime_low_s, row.runtime_high_s)})"
