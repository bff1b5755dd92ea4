"""The verdict of a comparison: who wins on the user's objective, and only when it is measurable.

The objective is total job cost, with time as the tie-breaker. A winner is named only when its
lead is measurable — its cost range lies below every other's, or the speed ratio's 95% CI
excludes 1.0 against every other — and never when the fairness check failed without
--allow-diff (then the text starts with a caution).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gpuscout.results.compare import Comparison, Headline, short_name
from gpuscout.results.schema import Frozen


class CostPoint(Frozen):
    """What the verdict needs of a machine's bill (built by `cost.measured`)."""

    total_usd: float
    low_usd: float | None  # at the ends of the throughput's 95% CI
    high_usd: float | None
    price_note: str  # "Lambda's 2026-09-20 price"


class Verdict(Frozen):
    winner: str | None  # a machine label, or None
    objective: Literal["total cost", "time"]
    text: str


def decide(comparison: Comparison, costs: Sequence[CostPoint] | None = None) -> Verdict:
    """One paragraph: the winner on total cost (time breaks ties), or on time when there are no prices.

    A winner is named only when its lead is measurable: its cost range (from the throughput's 95% CI)
    lies below every other's, or its speed advantage's 95% CI lies above 1.0 against every other.
    """
    objective: Literal["total cost", "time"] = "total cost" if costs else "time"
    fairness = comparison.fairness
    fields = ", ".join(d.field for d in fairness.differences)
    if not fairness.fair and not comparison.allow_diff:
        return Verdict(winner=None, objective=objective, text=f"No winner: the results differ in fixed variables "
                                                               f"({fields}).")
    caution = "" if fairness.fair else (f"Caution: compared with --allow-diff although {fields} differ; this is "
                                        "not a like-for-like comparison. ")
    winner, text = _cost_verdict(comparison, costs) if costs else _time_verdict(comparison)
    return Verdict(winner=winner, objective=objective, text=caution + text)


def _than(comparison: Comparison, j: int) -> str:
    """" than A", or nothing when there are only two machines."""
    return "" if len(comparison.machines) == 2 else f" than {comparison.machines[j].label}"


def _time_verdict(comparison: Comparison) -> tuple[str | None, str]:
    hl, machines = comparison.headline, comparison.machines
    if hl is None:
        return None, ("No whole-job throughput is common to all results, so no winner on time; "
                      "see the per-metric ratios.")
    best = max(range(len(machines)), key=lambda j: hl.advantage[0][j].advantage)
    others = [j for j in range(len(machines)) if j != best]
    tied = [j for j in others if hl.advantage[j][best].finding != "better"]
    speed = " and ".join(_speed_phrase(hl, best, j, _than(comparison, j)) for j in others)
    basis = f", from the measured {hl.metric}{' (extrapolated to full depth)' if hl.extrapolated else ''} " \
            f"of case {hl.case}"
    if tied:
        names = " and ".join(short_name(machines[j]) for j in (best, *tied))
        return None, (f"No measurable difference in speed between {names}: {machines[best].label} {speed}{basis}. "
                      "Add prices (--offers) to decide on total cost.")
    return machines[best].label, f"{short_name(machines[best])} {speed}{basis}."


def _cost_verdict(comparison: Comparison, costs: Sequence[CostPoint]) -> tuple[str | None, str]:
    machines, hl = comparison.machines, comparison.headline
    cheapest = min(range(len(costs)), key=lambda j: costs[j].total_usd)
    others = [j for j in range(len(costs)) if j != cheapest]
    tied = [j for j in others if not _cheaper(costs[cheapest], costs[j])]
    prices = _price_notes([costs[cheapest], *(costs[j] for j in others)])
    if not tied:
        saving = " and ".join(_cost_phrase(costs, cheapest, j, _than(comparison, j), first=n == 0)
                              for n, j in enumerate(others))
        text = f"{short_name(machines[cheapest])} costs {saving}, {prices}"
        if hl is not None:
            text += ", and " + " and ".join(_speed_phrase(hl, cheapest, j, _than(comparison, j)) for j in others)
        return machines[cheapest].label, text + "."
    group = [cheapest, *tied]
    names = " and ".join(short_name(machines[j]) for j in group)
    text = (f"No measurable difference in total cost between {names} "
            f"({' vs '.join(_usd_range(costs[j]) for j in group)}, {prices}); time breaks the tie: ")
    if hl is None:
        return None, text + "but no whole-job throughput is common to all results."
    fastest = max(group, key=lambda j: hl.advantage[0][j].advantage)
    rest = [j for j in group if j != fastest]
    if all(hl.advantage[j][fastest].finding == "better" for j in rest):
        speed = " and ".join(_speed_phrase(hl, fastest, j, f" than {machines[j].label}") for j in rest)
        return machines[fastest].label, text + f"{machines[fastest].label} {speed}."
    return None, text + "there is no measurable difference in speed either; either machine will do."


def _cheaper(a: CostPoint, b: CostPoint) -> bool:
    """a is measurably cheaper than b: a's cost range lies below b's (point totals without ranges)."""
    if a.high_usd is not None and b.low_usd is not None:
        return a.high_usd < b.low_usd
    return a.total_usd < b.total_usd


def _cost_phrase(costs: Sequence[CostPoint], i: int, j: int, than: str, *, first: bool) -> str:
    a, b = costs[i].total_usd, costs[j].total_usd
    share = (b - a) / b if b else 0.0
    return f"{share:.0%} less{' in total' if first else ''}{than} (${a:,.2f} vs ${b:,.2f})"


def _usd_range(cost: CostPoint) -> str:
    if cost.low_usd is None or cost.high_usd is None:
        return f"${cost.total_usd:,.2f}"
    return f"${cost.total_usd:,.2f} (${cost.low_usd:,.2f}–${cost.high_usd:,.2f})"


def _price_notes(costs: Sequence[CostPoint]) -> str:
    notes = list(dict.fromkeys(c.price_note for c in costs))
    return "at " + (notes[0] if len(notes) == 1 else ", ".join(notes[:-1]) + " and " + notes[-1])


def _speed_phrase(hl: Headline, i: int, j: int, than: str) -> str:
    """How machine i's job time compares with machine j's, from the throughput advantage of i over j."""
    r = hl.advantage[j][i]
    if r.ci95_low is None or r.ci95_high is None:
        return f"finishes the job {r.advantage:.2f}× as fast{than.replace('than', 'as')} (single readings, no CI)"
    ci = f"95% CI {r.ci95_low:.2f}–{r.ci95_high:.2f}×"
    if r.finding == "better":
        return f"finishes the job {r.advantage:.2f}× sooner{than} ({ci})"
    if r.finding == "worse":
        return (f"takes {1 / r.advantage:.2f}× as long{than.replace('than', 'as')} "
                f"(95% CI {1 / r.ci95_high:.2f}–{1 / r.ci95_low:.2f}×)")
    return (f"shows no measurable difference in speed{than.replace('than', 'from')} "
            f"({r.advantage:.2f}×, {ci} includes 1.0)")
