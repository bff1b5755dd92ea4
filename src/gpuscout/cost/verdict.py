"""The cost part of a comparison's verdict: which machine finishes the job for the least money.

`results.verdict` gates a comparison (unfair, disturbed, noisy) and decides on time; it knows
nothing of prices. Each side's bill (`CostPoint`, built by `cost.measured`) carries the decision on
total cost: the cheapest side wins when its cost range lies below every other's and it saves at
least the minimum effect; otherwise time breaks the tie (docs/measurement.md §1.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import amount_text
from gpuscout.results.compare import Comparison, short_name
from gpuscout.results.verdict import speed_phrase, than, tie_word


class CostPoint(Frozen):
    """What the verdict needs of a machine's bill (built by `cost.measured`)."""

    total_usd: float
    low_usd: float | None  # at the ends of the throughput's 95% CI
    high_usd: float | None
    price_note: str  # "Lambda's 2026-09-20 price"
    currency: str = "USD"  # the currency the verdict shows amounts in (docs/cost.md §3)
    usd_per_unit: float = 1.0  # what one unit of it is worth in USD

    def cost_verdict(self, comparison: Comparison, costs: Sequence[Any]) -> tuple[str | None, str]:
        return cost_verdict(comparison, costs)


def cost_verdict(comparison: Comparison, costs: Sequence[CostPoint]) -> tuple[str | None, str]:
    """The winner on total cost (a range below every other's by the minimum effect), time breaking a tie."""
    machines, hl = comparison.machines, comparison.headline
    cheapest = min(range(len(costs)), key=lambda j: costs[j].total_usd)
    others = [j for j in range(len(costs)) if j != cheapest]
    tied = [j for j in others if not _cheaper(costs[cheapest], costs[j], comparison.options.min_effect)]
    prices = _price_notes([costs[cheapest], *(costs[j] for j in others)])
    if not tied:
        saving = " and ".join(_cost_phrase(costs, cheapest, j, than(comparison, j), first=n == 0)
                              for n, j in enumerate(others))
        text = f"{short_name(machines[cheapest])} costs {saving}, {prices}"
        if hl is not None:
            text += ", and " + " and ".join(speed_phrase(hl, cheapest, j, than(comparison, j)) for j in others)
        return machines[cheapest].label, text + "."
    group = [cheapest, *tied]
    names = " and ".join(short_name(machines[j]) for j in group)
    overlap = any(not _cheaper(costs[cheapest], costs[j], 0.0) for j in tied)
    text = (f"No {'measurable' if overlap else 'meaningful'} difference in total cost between {names} "
            f"({' vs '.join(_usd_range(costs[j]) for j in group)}, {prices}); time breaks the tie: ")
    if hl is None:
        return None, text + "but no whole-job throughput is common to all results."
    fastest = max(group, key=lambda j: hl.advantage[0][j].advantage or 0.0)
    rest = [j for j in group if j != fastest]
    if all(hl.advantage[j][fastest].finding == "better" for j in rest):
        speed = " and ".join(speed_phrase(hl, fastest, j, f" than {machines[j].label}") for j in rest)
        return machines[fastest].label, text + f"{machines[fastest].label} {speed}."
    word = tie_word([hl.advantage[j][fastest] for j in rest])
    return None, text + f"there is no {word} difference in speed either; either machine will do."


def _cheaper(a: CostPoint, b: CostPoint, min_effect: float) -> bool:
    """a is measurably and meaningfully cheaper than b: its cost range lies below b's, and it saves at
    least the minimum effect (point totals when a side has no range)."""
    meaningful = a.total_usd <= b.total_usd * (1 - min_effect)
    if a.high_usd is not None and b.low_usd is not None:
        return a.high_usd < b.low_usd and meaningful
    return meaningful


def _cost_phrase(costs: Sequence[CostPoint], i: int, j: int, than: str, *, first: bool) -> str:
    a, b = costs[i].total_usd, costs[j].total_usd
    share = (b - a) / b if b else 0.0
    shown = costs[i]
    return f"{share:.0%} less{' in total' if first else ''}{than} ({_amount(a, shown)} vs {_amount(b, shown)})"


def _usd_range(cost: CostPoint) -> str:
    if cost.low_usd is None or cost.high_usd is None:
        return _amount(cost.total_usd, cost)
    return f"{_amount(cost.total_usd, cost)} ({_amount(cost.low_usd, cost)}–{_amount(cost.high_usd, cost)})"


def _amount(usd: float, cost: CostPoint) -> str:
    """A USD amount in the currency the report is shown in: '$12.34', 'CN¥88.14'."""
    return amount_text(usd / cost.usd_per_unit, cost.currency)


def _price_notes(costs: Sequence[CostPoint]) -> str:
    notes = list(dict.fromkeys(c.price_note for c in costs))
    return "at " + (notes[0] if len(notes) == 1 else ", ".join(notes[:-1]) + " and " + notes[-1])
