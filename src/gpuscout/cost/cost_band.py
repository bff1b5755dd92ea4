"""A ranked row's total as a band, and whether two bands tell their offers apart before measuring.

The band (docs/cost.md §6.1): its low end is the bill at the fast end of the runtime band, its
high end the spot P95 bill at the slow end (the runtime band already holds the efficiency factors'
spread and the plan's pessimistic slowdown), plus each risk the row carries as a whole bill. The
expected total still orders the rows; the band only says how sure that order is.

Two rows are told apart when their bands do not overlap; bands that touch (one's low end equal to
the other's high end) overlap, since a shared end is a tie the estimate cannot break. Two offers of
the same instance shape under the same layout and plan run one unknown runtime, so their bills move
together: they are told apart when one is dearer at both ends of that shared band.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuscout.cost.billing import JobCost
from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.spot import SpotNeverFinishes


def total_band(low_usd: float, high_usd: float | None, risks_usd: Sequence[float] = ()) -> tuple[float, float | None]:
    """(low, high) of a total: `risks_usd` are whole-bill risks added to the high end (one term each)."""
    return low_usd, None if high_usd is None else sum((high_usd, *risks_usd))


def priced_band(price: Callable[[float], JobCost], to_usd: Callable[[float], float], low_s: float,
                high_s: float) -> tuple[float, float | None]:
    """The expected bill at `low_s` and the P95 bill at `high_s`, in USD. A spot run that never
    finishes at the slow end has no high end (None): the band is open, never made up."""
    low = to_usd(price(low_s).total)
    try:
        high: float | None = to_usd(price(high_s).total_p95)
    except SpotNeverFinishes:
        high = None
    return low, high


def band_of(row: PickRow) -> tuple[float, float | None]:
    """The row's band; a row priced without one (a measured capacity) spans its total to its P95."""
    total = row.total_usd or 0.0
    low = row.total_low_usd if row.total_low_usd is not None else total
    high = row.total_high_usd if row.total_low_usd is not None else (row.total_p95_usd or total)
    return min(low, total), None if high is None else max(high, total)


def overlaps(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    """Whether two bands share a point; touching ends count (an open high end reaches everything)."""
    (a_low, a_high), (b_low, b_high) = a, b
    return (a_high is None or b_low <= a_high) and (b_high is None or a_low <= b_high)


def same_runtime(a: PickRow, b: PickRow) -> bool:
    """Same GPU, count, layout and plan: both rows run the one unknown runtime."""
    return (a.gpu_sku, a.gpu_count, a.gpus_per_replica, a.replicas, a.plan, a.bound) == \
        (b.gpu_sku, b.gpu_count, b.gpus_per_replica, b.replicas, b.plan, b.bound) and a.bound != "measured"


def separable(winner: PickRow, row: PickRow) -> bool:
    """Whether `row` is told apart from the `winner` before anything is measured."""
    w, r = band_of(winner), band_of(row)
    if same_runtime(winner, row):
        return r[0] > w[0] and (r[1] is None or (w[1] is not None and r[1] > w[1]))
    return not overlaps(w, r)


def stake_usd(winner: PickRow, row: PickRow) -> float:
    """The most taking the expected winner over `row` can cost: the largest difference the bands allow
    in `row`'s favour (at one shared runtime when both run the same one). None-ended bands: inf."""
    (w_low, w_high), (r_low, r_high) = band_of(winner), band_of(row)
    if w_high is None:
        return float("inf")
    if same_runtime(winner, row):
        return max(w_low - r_low, w_high - (r_high if r_high is not None else w_high), 0.0)
    return max(w_high - r_low, 0.0)


def separable_flags(ranked: Sequence[PickRow]) -> list[bool | None]:
    """For each ranked row, whether it is told apart from the first (the winner, cheapest expected
    total): None for the winner itself."""
    return [None if i == 0 else separable(ranked[0], r) for i, r in enumerate(ranked)]


def mark_separable(ranked: Sequence[PickRow]) -> list[PickRow]:
    """The ranked rows with their `separable` flag set (`separable_flags`)."""
    return [r.model_copy(update={"separable": f}) for r, f in zip(ranked, separable_flags(ranked), strict=True)]
