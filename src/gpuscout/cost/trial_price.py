"""When a trial pays: the price of measuring the leaders against the money their overlap puts at stake.

When the runner-up's band overlaps the winner's (`cost_band`), the estimate cannot order them; a
short slice of the real job on each box can. The slice is what `gpuscout bench` runs by default:
the offer's billed start-up (launch and setup), then `BENCH_RUNS` runs of `BENCH_WARMUP` warm-up and
`BENCH_REPEATS` timed steps, each step taken at the slow end of the row's runtime band. Each slice
is billed under its offer's own rules (`price_job`: billed start-up, idle tail, minimum billed time,
billing increment), so a box with a one-hour minimum charges the hour. The money at stake is the
largest difference the two bands allow in the runner-up's favour (`cost_band.stake_usd`). A trial
pays when the two slices cost less than that (docs/cost.md §6.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.cost_band import stake_usd
from gpuscout.cost.machine import price_on_machine
from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.spot import SpotNeverFinishes
from gpuscout.cost.spot_prior import with_prior
from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer

# `gpuscout bench`'s defaults (cli/app.py: --warmup 2, --repeats 5, --runs 3): the trial is that bench.
BENCH_WARMUP, BENCH_REPEATS, BENCH_RUNS = 2, 5, 3
# The metric that times one of the bench's steps, per job kind: a training step, one request end to
# end, one batch of images or clips.
STEP_METRICS = ("step_s", "e2e_s", "batch_s")


class TrialBill(Frozen):
    """The trial on one offer: the slice of work it runs, what it is billed, and how to run it."""

    offer_id: str
    work_s: float  # warm-up and timed steps (the billed start-up and idle tail are in the bill)
    billed_s: float
    total_usd: float
    command: str


class TrialAdvice(Frozen):
    """Whether the leaders can be told apart before measuring, and if not, whether a trial pays."""

    winner_id: str
    challenger_id: str | None  # the cheapest row whose band overlaps the winner's (None: the winner is clear)
    overlapping: int  # ranked rows whose band overlaps the winner's
    needed: bool  # the leaders overlap: only a measurement can order them
    stake_usd: float | None = 0.0  # the largest difference the bands allow in the challenger's favour (None: open)
    trials: tuple[TrialBill, ...] = ()
    trial_usd: float = 0.0  # both slices together
    pays: bool = False  # the trial costs less than the money at stake
    compare_command: str = ""
    unpriced: str = ""  # why the trial could not be priced (no step time, no rate), when it could not


def trial_work_s(row: PickRow) -> float | None:
    """Warm-up and timed steps of the default bench, at the slow end of the row's band; never more
    than the whole job (a job shorter than its bench is its own trial). None without a step time."""
    step = next((row.metrics[m] for m in STEP_METRICS if m in row.metrics), None)
    if step is None or row.runtime_s is None or not row.runtime_s > 0:
        return None
    slow = row.runtime_high_s / row.runtime_s if row.runtime_high_s is not None else 1.0
    steps = BENCH_RUNS * (BENCH_WARMUP + BENCH_REPEATS)
    return min(steps * step * slow, row.runtime_high_s if row.runtime_high_s is not None else row.runtime_s)


def trial_bill(row: PickRow, offer: Offer, rates: Sequence[ExchangeRate], command: str) -> TrialBill | None:
    """The slice billed on `offer` in USD; None when it has no step time to slice."""
    work = trial_work_s(row)
    if work is None:
        return None
    # The offer as the ranking priced it: the interruption band the user gave (or the prior) and the
    # machine as this job uses it (the dataset's pull is billed on the trial's box too).
    priced = with_prior(offer, row.interruption_prior)
    bill = (price_on_machine(priced, work, None, row.machine, rates, formulas=False) if row.machine is not None
            else price_job(priced, work, CostOptions(), formulas=False))
    return TrialBill(offer_id=row.offer_id, work_s=work, billed_s=bill.billed_s,
                     total_usd=to_usd(bill.total, offer.currency, rates), command=command)


def bench_command(job_arg: str, offer_id: str, out: str, sheet: str | None) -> str:
    sheet_part = f" --offers {sheet}" if sheet else ""
    job_part = f" {job_arg}" if job_arg else ""
    return f"gpuscout bench{job_part}{sheet_part} --offer {offer_id} -o {out}"


def trial_advice(rows: Sequence[PickRow], offers: Sequence[Offer], rates: Sequence[ExchangeRate] = (), *,
                 job_arg: str = "", sheet: str | None = None) -> TrialAdvice | None:
    """The advice for a ranking (`rows` as `pick` returns them, ranked first); None without two ranked rows.
    `job_arg` and `sheet` are the job and price sheet as the user named them, for the commands."""
    ranked = [r for r in rows if r.excluded is None]
    if len(ranked) < 2:
        return None
    winner = ranked[0]
    overlapping = [r for r in ranked[1:] if r.separable is False]
    if not overlapping:
        return TrialAdvice(winner_id=winner.offer_id, challenger_id=None, overlapping=0, needed=False)
    challenger = overlapping[0]
    stake = stake_usd(winner, challenger)
    advice = TrialAdvice(winner_id=winner.offer_id, challenger_id=challenger.offer_id, overlapping=len(overlapping),
                         needed=True,
                         stake_usd=stake if math.isfinite(stake) else None,
                         compare_command=f"gpuscout compare a.json b.json{f' --offers {sheet}' if sheet else ''}"
                                         f" --offer {winner.offer_id} --offer {challenger.offer_id}")
    by_id = {o.id: o for o in offers}
    bills = []
    for row, out in ((winner, "a.json"), (challenger, "b.json")):
        offer = by_id.get(row.offer_id)
        if offer is None:
            return advice.model_copy(update={"unpriced": f"the offer {row.offer_id} is not on the sheet"})
        try:
            bill = trial_bill(row, offer, rates, bench_command(job_arg, row.offer_id, out, sheet))
        except (SpecError, SpotNeverFinishes) as exc:
            return advice.model_copy(update={"unpriced": f"{row.offer_id}: {exc}"})
        if bill is None:
            return advice.model_copy(update={"unpriced": f"no step time for {row.offer_id} to slice a trial from"})
        bills.append(bill)
    cost = sum(b.total_usd for b in bills)
    return advice.model_copy(update={"trials": tuple(bills), "trial_usd": cost,
                                     "pays": not math.isfinite(stake) or cost < stake})
