"""The pick view: total cost against job time for every offer, the Pareto frontier, the excluded and why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.trial_price import TrialAdvice
from gpuscout.documents.kinds import PickDoc
from gpuscout.hardware.currency import DisplayCurrency, from_usd
from gpuscout.report.bill_block import BLOCKS, bill_block, shown_band
from gpuscout.report.compat import finding_text
from gpuscout.report.gpu_layout import layout_words
from gpuscout.report.html.parts import Html, bullets, details, figure, para, shorten, table, tag
from gpuscout.report.html.svg import Canvas, color, log_scale
from gpuscout.report.numbers import duration, duration_band
from gpuscout.report.pick import (
    TIGHT_CAPTION,
    TOP,
    plan_words,
    price_age,
    rates_text,
    shown_money,
    shown_rows,
    tight_words,
    unit_costs,
)
from gpuscout.report.serving_verdict import verdict_lines
from gpuscout.report.trial import trial_lines
from gpuscout.report.unvouched import unvouched_lines
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
    parts += [ranked_table(doc), *compat_table(ranked), *excluded_tables(excluded)]
    notes = [*unvouched_lines(pick.rows),
             *(["Exchange rates: " + rates_text(pick.exchange_rates).removeprefix("Exchange rates used: ")]
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
    lines += verdict_lines(row)
    lines += [finding_text(f) for f in row.compat if row.excluded is None]
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
              shown_band(r, pick.currency) if r.total_usd is not None else "",
              "≈ overlaps the leader" if r.separable is False else "",
              shown_money(r.total_p95_usd, pick.currency), shorten(unit_costs(r.unit_costs_usd, pick.currency), 60),
              "" if r.slo_met is None else ("yes" if r.slo_met else "no") + (f" ({r.slo_source})"
                                                                              if r.slo_source else ""),
              "; ".join(x for x in (plan_words(r.plan) if r.plan else "", tight_words(r, pick.currency).strip()) if x),
              f"{r.observed_at} ({price_age(r, pick.today) or 'age unknown'}{', stale' if r.stale else ''})"]
             for i, r in enumerate(rows)]
    caption = (f"Ranked offers ({pick.currency.code}; bold: on the Pareto frontier; the band runs from the bill at "
               "the fast end of the runtime band to the P95 bill at its slow end; ≈: not separable from the leader "
               "before measuring)")
    out = [table(["#", "offer", "provider", "GPUs", "job time", "total", "band", "vs leader", "P95", "per unit",
                  "SLO", "plan", "observed (age)"], cells, caption=caption, numeric=(0, 4, 5, 6, 8))]
    out += _trial(pick.trial, pick.currency)
    for row in [r for r in pick.rows if r.excluded is None and r.cost is not None][:BLOCKS]:
        out.append(para(" ".join(line.plain.strip() for line in bill_block(row, pick.currency, pick.exchange_rates))))
    if hidden:
        out.append(para(f"… {hidden:,} more ranked offers not shown (`gpuscout pick --json` has every row).",
                        class_="note"))
    if any(r.fit_verdict == "tight" and r.excluded is None for r in rows):
        out.append(para(TIGHT_CAPTION, class_="note"))
    return Html("".join(out))


def _trial(advice: TrialAdvice | None, shown: DisplayCurrency) -> list[Html]:
    """The trial advice: its verdict as prose, its commands in one block to copy."""
    lines = trial_lines(advice, shown)
    prose = " ".join(t.plain for t in lines if not t.plain.startswith("  "))
    commands = "\n".join(t.plain.strip() for t in lines if t.plain.startswith("  "))
    return [para(prose), *([tag("pre", commands)] if commands else [])] if lines else []


def compat_table(rows: Sequence[PickRow]) -> list[Html]:
    """Ranked offers priced with a fallback's slowdown or ranked under a condition: each finding once,
    with its offers (docs/compat.md)."""
    by_text: dict[str, list[PickRow]] = {}
    for row in rows:
        for f in row.compat:
            by_text.setdefault(finding_text(f), []).append(row)
    cells = [[text, f"{len(group):,}", _ids(group)] for text, group in by_text.items()]
    return [table(["compatibility", "offers", "which"], cells, caption="Ranked with a compatibility finding",
                  numeric=(1,))] if cells else []


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
    words = layout_words(row)
    return f"{row.gpu_count} × {row.gpu_sku}" + (f" ({words.split(': ', 1)[1]})" if words else "")


def _runtime(row: PickRow) -> str:
    if row.runtime_s is None:
        return "-"
    if row.runtime_low_s is None or row.runtime_high_s is None or not math.isfinite(row.runtime_high_s):
        return duration(row.runtime_s)
    return f"{duration(row.runtime_s)} ({duration_band(row.runtime_low_s, row.runtime_high_s)})"
