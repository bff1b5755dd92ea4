"""The pick view: total cost against job time for every offer, the Pareto frontier, the excluded and why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.trial_price import TrialAdvice
from gpuscout.documents.kinds import PickDoc
from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate, from_usd
from gpuscout.report.bill_block import BLOCKS, bill_block, bill_parts, shown_band
from gpuscout.report.compat import finding_text
from gpuscout.report.gpu_layout import layout_words
from gpuscout.report.html.parts import Html, bullets, details, figure, para, shorten, table, tag
from gpuscout.report.html.svg import Canvas, color, label, log_scale, outside_legend, point_labels
from gpuscout.report.numbers import duration, duration_band, money
from gpuscout.report.pick import (
    TIGHT_CAPTION,
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
_LABELS = 12  # Pareto points named on the plot (the cheapest first); the rest are in the hover text and table
_BILLS = 10  # ranked offers whose bill is drawn line by line


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
    parts += [ranked_table(doc, canvas), *compat_table(ranked), *excluded_tables(excluded)]
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
        drawn = [r for r in rows if r.runtime_s is not None and r.total_usd is not None]
        _scales(ax, drawn, shown)
        ax.set_xlabel("job time, hours")
        ax.set_ylabel(f"total cost of the job, {shown.code}")
        outside_legend(fig, ax)
        low, high = ax.get_ylim()  # room under the frontier (the cheapest offers) for its names
        ax.set_ylim(low / 1.8 if ax.get_yscale() == "log" else min(0.0, low), high)
        named = _distinct_points(frontier)[:_LABELS]
        placed = point_labels(fig, ax, [(_hours(r), from_usd(r.total_usd or 0.0, shown)) for r in named],
                              [r.offer_id for r in named], gid="pareto-label", others=[
                                  (_hours(r), from_usd(r.total_usd or 0.0, shown)) for r in drawn])
        svg = canvas.svg(fig, tips)
    unnamed = len(named) - placed
    caption = ("Each point is an offer: what the whole job costs there against how long it takes. The line joins "
               "the Pareto frontier (no other offer is both faster and cheaper); its points are named where the "
               "name fits beside them" + (f" ({unnamed} could not be: hover them)" if unnamed else "") + ". Grey "
               "crosses were excluded (deadline, budget, host, SLO): the reason is in the hover text and in the "
               "table below.")
    return figure(svg, caption, name="pick-cost-time", marks=marks)


def _distinct_points(frontier: Sequence[PickRow]) -> list[PickRow]:
    """One row per (runtime, total) point: a catalog lists the same instance in many regions at one price."""
    seen: set[tuple[float | None, float | None]] = set()
    out = []
    for row in frontier:
        if (row.runtime_s, row.total_usd) not in seen:
            seen.add((row.runtime_s, row.total_usd))
            out.append(row)
    return out


def _scales(ax: Axes, rows: Sequence[PickRow], shown: DisplayCurrency) -> None:
    xs = [_hours(r) for r in rows]
    ys = [from_usd(r.total_usd or 0.0, shown) for r in rows]
    for values, which in ((xs, "x"), (ys, "y")):
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > _LOG_SPAN:
            log_scale(ax, which, fine_decades=3.5)  # a 7-inch axis holds 1-2-5 ticks over 3.5 decades


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


def ranked_table(doc: PickDoc, canvas: Canvas | None = None) -> Html:
    """Every ranked offer, sortable and filterable in the page (by GPU, provider, fits, job time, total …);
    then the trial advice, the top offers' bills drawn line by line, and the first few in words."""
    pick = doc.pick
    rows, _ = shown_rows(pick, wide=False, top=0)
    money_of = pick.currency

    def amount(usd: float | None) -> tuple[str, float | None]:
        return shown_money(usd, money_of), None if usd is None else from_usd(usd, money_of)

    cells = [[(str(i + 1), float(i + 1)), Html(tag("strong", r.offer_id) if r.pareto else tag("span", r.offer_id)),
              f"{r.provider}, {r.tier}", _gpus(r), r.fit_verdict,
              (_runtime(r), None if r.runtime_s is None else r.runtime_s / HOUR_S), amount(r.total_usd),
              shown_band(r, pick.currency) if r.total_usd is not None else "",
              "≈ overlaps the leader" if r.separable is False else "",
              amount(r.total_p95_usd), shorten(unit_costs(r.unit_costs_usd, pick.currency), 60),
              "" if r.slo_met is None else ("yes" if r.slo_met else "no") + (f" ({r.slo_source})"
                                                                              if r.slo_source else ""),
              "; ".join(x for x in (plan_words(r.plan) if r.plan else "", tight_words(r, pick.currency).strip()) if x),
              f"{r.observed_at} ({price_age(r, pick.today) or 'age unknown'}{', stale' if r.stale else ''})"]
             for i, r in enumerate(rows)]
    caption = (f"Ranked offers ({pick.currency.code}; bold: on the Pareto frontier; the band runs from the bill at "
               "the fast end of the runtime band to the P95 bill at its slow end; ≈: not separable from the leader "
               "before measuring). Click a header to sort; type in a column's box to filter.")
    code = pick.currency.code
    out = [table(["#", "offer", "provider", "GPUs", "fits", "job time", "total", "band", "vs leader", "P95",
                  "per unit", "SLO", "plan", "observed (age)"], cells, caption=caption, numeric=(0, 5, 6, 7, 9),
                 sortable=True, filters={1: "text", 2: "text", 3: "text", 4: "text", 5: "max", 6: "max", 9: "max",
                                         11: "text"},
                 units={5: "h", 6: code, 9: code})]
    out += _trial(pick.trial, pick.currency)
    if canvas is not None:
        out += bill_plot(rows, pick.currency, pick.exchange_rates, canvas)
    for row in [r for r in pick.rows if r.excluded is None and r.cost is not None][:BLOCKS]:
        out.append(para(" ".join(line.plain.strip() for line in bill_block(row, pick.currency, pick.exchange_rates))))
    if any(r.fit_verdict == "tight" and r.excluded is None for r in rows):
        out.append(para(TIGHT_CAPTION, class_="note"))
    return Html("".join(out))


def bill_plot(rows: Sequence[PickRow], shown: DisplayCurrency, rates: Sequence[ExchangeRate],
              canvas: Canvas) -> list[Html]:
    """The top offers' bills as stacked bars: compute, billed start-up, idle tail, storage (while running and
    while stopped), egress, retries: where a bill's money goes beside the work itself."""
    billed = [r for r in rows if r.cost is not None and r.total_usd is not None][:_BILLS]
    if not billed:
        return []
    # A serving load several instances serve is billed once per instance: the bar is the whole bill (the
    # ranked total), not one instance's, so the bars order as the table does.
    copies = [r.instances for r in billed]
    bills = [{n: a * k for n, a in bill_parts(r.cost, shown, rates)}
             for r, k in zip(billed, copies, strict=True) if r.cost is not None]
    names = [n for n in dict.fromkeys(n for b in bills for n in b) if any(b.get(n, 0.0) > 0 for b in bills)]
    tips: dict[str, str | Sequence[str]] = {}
    ys = list(range(len(billed)))[::-1]
    marks = 0
    with canvas.figure(7.2, 1.3 + 0.34 * len(billed)) as fig:
        ax = fig.add_subplot()
        left = [0.0] * len(billed)
        for j, name in enumerate(names):
            widths = [b.get(name, 0.0) for b in bills]
            bars = ax.barh(ys, widths, left=left, height=0.62, color=color(j), label=name, edgecolor="white",
                           linewidth=0.5)
            for k, (bar, width, row) in enumerate(zip(bars, widths, billed, strict=True)):
                if width > 0:
                    bar.set_gid(f"bill-{k}-{j}")
                    share = width / sum(bills[k].values()) if sum(bills[k].values()) > 0 else 0.0
                    over = f", {copies[k]:.0f} instances" if copies[k] > 1 else ""
                    tips[f"bill-{k}-{j}"] = (f"{row.offer_id} · {name}: {money(width, shown.code)} "
                                             f"({share:.0%} of {money(sum(bills[k].values()), shown.code)}{over})")
                    marks += 1
            left = [a + w for a, w in zip(left, widths, strict=True)]
        ax.set_yticks(ys, [label(r.offer_id, 34) for r in billed])
        ax.set_ylim(-0.6, len(billed) - 0.4)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"expected bill, {shown.code}")
        outside_legend(fig, ax)
        svg = canvas.svg(fig, tips)
    several = " An offer served by several instances shows all of them (the ranked total)." if max(copies) > 1 else ""
    caption = (f"The bills of the {len(billed)} cheapest ranked offers, line by line: the work itself (compute), the "
               "billed start-up and idle tail of the first start, storage while running and while stopped, egress "
               f"and expected retries.{several} Hover a segment for its amount and share.")
    return [figure(svg, caption, name="pick-bills", marks=marks)]


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
