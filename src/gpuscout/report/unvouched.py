"""What a ranking rests on that gpuscout cannot vouch for, in words: placeholder prices and spot
interruption rates nobody stated. Pure: rows in, lines out; the terminal, the HTML report and
`--json` share them (docs/cost.md §4, §2.11)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.cost.pick import PLACEHOLDER_NOT_RANKED
from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.spot_prior import InterruptionPrior
from gpuscout.report.layout import some_ids

RANK_PLACEHOLDERS = "add --include-placeholders to rank them"
KNOW_THE_RATE = "pass --interruptions-per-hour RATE or --spot-advisor FILE (docs/cost.md §2.11)"


def unvouched_lines(rows: Sequence[PickRow]) -> list[str]:
    """One line per kind of input the totals cannot vouch for, each naming its offers; none when all is known."""
    lines = []
    held_back = [r.offer_id for r in rows if r.excluded == PLACEHOLDER_NOT_RANKED]
    if held_back:
        lines.append(f"not ranked: placeholder prices (nobody observed them): {some_ids(held_back)}; "
                     f"{RANK_PLACEHOLDERS}")
    ranked_placeholders = [r.offer_id for r in rows if r.placeholder and r.excluded is None]
    if ranked_placeholders:
        lines.append(f"ranked on placeholder prices (nobody observed them): {some_ids(ranked_placeholders)}; "
                     "get a real quote before you rent")
    priced = [r for r in rows if r.interruption_prior is not None and r.total_usd is not None]
    by_band: dict[InterruptionPrior, list[str]] = {}
    for row in priced:
        if row.interruption_prior is not None:
            by_band.setdefault(row.interruption_prior, []).append(row.offer_id)
    for prior, ids in by_band.items():
        lines.append(band_line(prior, ids))
    return lines


def band_line(prior: InterruptionPrior, ids: Sequence[str]) -> str:
    rates = f"interruptions priced at {every(prior.expected_per_hour)}" + (
        f", P95 at {every(prior.high_per_hour)}" if prior.high_per_hour > prior.expected_per_hour else "")
    if prior.unknown:
        return (f"interruption risk unknown (no rate given): {some_ids(ids)}; {rates}, the default "
                f"prior band; {KNOW_THE_RATE}")
    if prior.basis == "spot advisor":
        return f"interruption rate from the Spot Advisor band {prior.detail}: {some_ids(ids)}; {rates}"
    return f"interruption rate from --interruptions-per-hour: {some_ids(ids)}; {rates}"


def every(per_hour: float) -> str:
    """A rate as a reader pictures it: '1 per 24 h', '1 per 5.5 h'; 'no interruptions' at zero."""
    if per_hour <= 0:
        return "no interruptions"
    hours = 1.0 / per_hour
    return f"1 per {hours:,.0f} h" if hours >= 10 else f"1 per {hours:.2g} h"


def unvouched_payload(rows: Sequence[PickRow]) -> dict[str, object]:
    """The same, for `--json`: the offers in each group and the lines as the screen words them."""
    return {"placeholders_not_ranked": [r.offer_id for r in rows if r.excluded == PLACEHOLDER_NOT_RANKED],
            "placeholders_ranked": [r.offer_id for r in rows if r.placeholder and r.excluded is None],
            "interruption_risk_unknown": [r.offer_id for r in rows  # as the screen counts them: the priced ones
                                          if r.interruption_risk_unknown and r.total_usd is not None],
            "lines": unvouched_lines(rows)}
