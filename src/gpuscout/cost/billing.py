"""Total job cost under a provider's billing rules (docs/cost.md §1, docs/cost.md §2).

    total = Σ attempts  ceil_to_increment(max(minimum, billed startup + work + idle tail)) × rate
          + storage (size × price/GB-month × lifetime, at the stopped rate while stopped)
          + compute billed while stopped (during the job, and when the machine is kept stopped
            after it instead of being released: `keep_stopped_days`)
          + egress (tiers after the free allowance)
          + failed attempts (each pays startup, the work done before it failed, and the minimum)
          + spot interruptions (lost work since the last checkpoint + restart overhead, each
            restart a new billed segment that pays the minimum again)

With every extra at zero this is exactly price × GPU count × hours (tests check it).
All amounts are in the offer's currency; conversion happens when offers are ranked (to USD) and
when a bill is shown in the user's currency (`bill_in`). "Billed startup" is the launch phases after
the provider's meter starts, then setup (`billed_time.billed_startup_s`, docs/cost.md §2.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import ConfigDict, Field, ValidationError

from gpuscout.cost.billed_time import billed_seconds, billed_startup_s, startup_text
from gpuscout.cost.spot import SpotOutcome, expected_spot_run, spot_p95_billed_s
from gpuscout.cost.spot_prior import priced_interruptions, unknown_risk_note
from gpuscout.cost.transfer import DataSource
from gpuscout.errors import option_error
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate, to_display
from gpuscout.hardware.offers import EgressTier, Offer, StorageItem, instance_price_per_hour, interruption_rate
from gpuscout.units import DAY_S, HOUR_S

MAX_KEEP_STOPPED_DAYS = 3650.0  # ten years: past that a number is a typo (docs/design.md §4.10)


class CostOptions(Frozen):
    """What the user knows about the run that no price sheet says."""

    model_config = ConfigDict(allow_inf_nan=False)

    egress_gb: float = Field(0.0, ge=0)  # data moved out (checkpoints, results)
    failed_attempts: float = Field(0.0, ge=0)  # expected failed attempts before the run that succeeds
    failure_progress: float = Field(0.5, ge=0, le=1)  # share of the work a failed attempt gets through
    spot_samples: int = Field(2000, ge=100)  # Monte Carlo runs for the spot P95
    seed: int = 0
    # Days the machine is kept stopped after the job instead of being released: its disks (and,
    # where the provider bills it, stopped compute) keep billing (docs/cost.md §2.6).
    keep_stopped_days: float = Field(0.0, ge=0, le=MAX_KEEP_STOPPED_DAYS)
    # The job's dataset: its size and where it lives; `pick` prices its transfer (docs/cost.md §2.14).
    data: DataSource | None = None


def cost_options(**options: float) -> CostOptions:
    """`CostOptions` from keyword options; an invalid one is a SpecError naming its flag."""
    try:
        return CostOptions(**options)
    except ValidationError as exc:
        raise option_error(exc, "Data moved, failed attempts and days kept stopped are amounts: finite, zero or "
                                f"more (days kept stopped at most {MAX_KEEP_STOPPED_DAYS:g}).",
                           "Pass {flag} with a value in that range.") from None


class CostLine(Frozen):
    name: str
    amount: float
    formula: str


class JobCost(Frozen):
    """The bill for one job on one offer, in the offer's currency."""


    offer_id: str
    currency: str
    work_s: float
    billed_s: float  # expected billed instance time over all attempts and segments
    lines: tuple[CostLine, ...]
    total: float  # expected
    total_p95: float  # 95th percentile (spot: seeded simulation; otherwise equal to the total)
    interruptions: float  # expected spot interruptions
    p95_method: str = ""  # how the spot P95 was found: the simulation, or the normal approximation
    note: str = ""  # how the amounts were converted, when shown in another currency than the offer's
    # A spot offer whose sheet gives no interruption rate: the default prior band priced it (`spot_prior`).
    interruption_note: str = ""
    # What the compute line holds besides the work, for a bill shown line by line: the billed start-up
    # and idle tail of the first start, at `rate_per_hour` (the instance's price, the offer's currency).
    startup_s: float = 0.0
    idle_tail_s: float = 0.0
    rate_per_hour: float = 0.0


def rate_per_s(offer: Offer) -> float:
    return instance_price_per_hour(offer) / HOUR_S


def price_job(offer: Offer, work_s: float, options: CostOptions | None = None, *, formulas: bool = True) -> JobCost:
    """The whole bill for `work_s` seconds of useful work on `offer`. `formulas=False` leaves the compute
    line's formula out: the ends of a ranking's cost bands price every offer twice more, and only the
    amounts are kept."""
    opts = options or CostOptions()
    run = run_outcome(offer, work_s, opts)
    lines = [compute_line(offer, run.expected, formula=formulas)]
    kept_s = opts.keep_stopped_days * DAY_S
    lines += [storage_line(item, offer, run.expected.billed_s, kept_s) for item in offer.storage]
    lines += stopped_compute_lines(offer, kept_s)
    if opts.egress_gb:
        lines.append(CostLine(name="egress", amount=egress_cost(opts.egress_gb, offer),
                              formula=f"{opts.egress_gb:g} GB, {offer.egress_free_gb:g} GB free, then tiers"))
    if opts.failed_attempts:
        lines.append(failed_attempts_line(offer, work_s, opts))
    total = sum(line.amount for line in lines)
    extra_p95 = (run.p95.billed_s - run.expected.billed_s) * rate_per_s(offer)
    return JobCost(offer_id=offer.id, currency=offer.currency, work_s=work_s, billed_s=run.expected.billed_s,
                   lines=tuple(lines), total=total, total_p95=total + max(extra_p95, 0.0),
                   interruptions=run.expected.interruptions, p95_method=run.p95_method,
                   interruption_note=unknown_risk_note(offer),
                   startup_s=billed_startup_s(offer) if formulas else 0.0, idle_tail_s=offer.idle_tail_s,
                   rate_per_hour=instance_price_per_hour(offer))


class RunOutcome(Frozen):
    expected: SpotOutcome
    p95: SpotOutcome
    p95_method: str = ""


def run_outcome(offer: Offer, work_s: float, opts: CostOptions) -> RunOutcome:
    """Billed time of the successful run: one segment, or spot segments between interruptions.

    A spot offer whose sheet gives no rate is priced under the default prior band, never as
    riskless (`spot_prior`); the P95 is simulated at the band's high end when the rate is a band."""
    offer = priced_interruptions(offer)
    rate = interruption_rate(offer)
    high = max(rate, offer.interruptions_per_hour_high or 0.0)
    segment = billed_startup_s(offer) + work_s + offer.idle_tail_s
    plain = SpotOutcome(billed_s=billed_seconds(segment, offer), running_s=segment, interruptions=0.0)
    if high <= 0:
        return RunOutcome(expected=plain, p95=plain)
    expected = expected_spot_run(offer, work_s) if rate > 0 else plain
    at_high = offer.model_copy(update={"interruptions_per_hour": high})
    p95_billed, method = spot_p95_billed_s(at_high, work_s, runs=opts.spot_samples, seed=opts.seed)
    if high > rate:
        method += f", at {high:.3g} interruptions/h (the high end of the rate's band; expected {rate:.3g}/h)"
    return RunOutcome(expected=expected, p95=expected.model_copy(update={"billed_s": p95_billed}), p95_method=method)


def compute_line(offer: Offer, run: SpotOutcome, *, formula: bool = True) -> CostLine:
    hours = run.billed_s / HOUR_S
    if not formula:
        return CostLine(name="compute", amount=hours * instance_price_per_hour(offer), formula="")
    parts = f"{startup_text(offer)} + work + idle tail {offer.idle_tail_s:g} s"
    if run.interruptions:
        restart = offer.restart_overhead_s
        parts += f" + {run.interruptions:.2f} expected interruptions × (lost work + restart {restart:g} s)"
    return CostLine(name="compute", amount=hours * instance_price_per_hour(offer),
                    formula=f"{hours:.4f} billed h ({parts}; ≥ {offer.min_billed_s:g} s per start, "
                            f"rounded up to {offer.billing_increment_s:g} s) × {instance_price_per_hour(offer):g}/h")


def storage_line(item: StorageItem, offer: Offer, billed_s: float, keep_stopped_s: float = 0.0) -> CostLine:
    """Storage bills for its whole lifetime, at the stopped rate while the machine is stopped.

    An item without its own lifetime lives with the instance, so keeping the machine stopped after
    the job (instead of releasing it) keeps it billing at the stopped rate; an item with a lifetime
    already says how long it exists.
    """
    running_h = item.lifetime_hours if item.lifetime_hours is not None else billed_s / HOUR_S
    stopped_rate = item.stopped_price_per_gb_month if item.stopped_price_per_gb_month is not None \
        else item.price_per_gb_month
    kept_h = keep_stopped_s / HOUR_S if item.lifetime_hours is None else 0.0
    stopped_h = offer.stopped_hours + kept_h
    amount = item.size_gb * (item.price_per_gb_month * running_h + stopped_rate * stopped_h) / item.hours_per_month
    kept = f", {kept_h:g} h kept stopped after the job" if kept_h else ""
    return CostLine(name=f"storage: {item.name}", amount=amount,
                    formula=f"{item.size_gb:g} GB × {item.price_per_gb_month:g}/GB-month × {running_h:.3f} h "
                            f"(+ {stopped_h:g} h stopped at {stopped_rate:g}{kept}) / {item.hours_per_month:g} h")


def stopped_compute_lines(offer: Offer, keep_stopped_s: float) -> list[CostLine]:
    """Compute billed while the machine is stopped: during the job, and kept stopped after it.

    Most providers stop billing compute when a machine is stopped; an Azure VM stopped from inside
    its OS is not deallocated and keeps billing (docs/cost.md §2.6). The kept-stopped line is shown
    even at zero, so a bill says that keeping the machine was priced.
    """
    lines = []
    if offer.stopped_hours and offer.stopped_price_per_hour:
        lines.append(CostLine(name="compute while stopped", amount=offer.stopped_hours * offer.stopped_price_per_hour,
                              formula=f"{offer.stopped_hours:g} h × {offer.stopped_price_per_hour:g}/h"))
    if keep_stopped_s:
        hours = keep_stopped_s / HOUR_S
        lines.append(CostLine(name="compute kept stopped after the job", amount=hours * offer.stopped_price_per_hour,
                              formula=f"{hours:g} h × stopped price {offer.stopped_price_per_hour:g}/h "
                                      "(instead of releasing the machine; its disks are in the storage lines)"))
    return lines


def egress_cost(gb: float, offer: Offer) -> float:
    """Tiered egress after the free allowance; tiers give cumulative upper bounds in GB."""
    billable = max(gb - offer.egress_free_gb, 0.0)
    return _tiered(billable, offer.egress_tiers)


def _tiered(gb: float, tiers: tuple[EgressTier, ...]) -> float:
    cost, floor = 0.0, 0.0
    for tier in tiers:
        ceiling = tier.up_to_gb if tier.up_to_gb is not None else math.inf
        cost += max(min(gb, ceiling) - floor, 0.0) * tier.price_per_gb
        floor = ceiling
        if gb <= floor:
            break
    return cost


def failed_attempts_line(offer: Offer, work_s: float, opts: CostOptions) -> CostLine:
    """Each failed attempt pays its startup, the work it got through and the tail, as its own start."""
    startup = billed_startup_s(offer)
    one = billed_seconds(startup + opts.failure_progress * work_s + offer.idle_tail_s, offer)
    amount = opts.failed_attempts * one * rate_per_s(offer)
    return CostLine(name="failed attempts", amount=amount,
                    formula=f"{opts.failed_attempts:g} × billed({startup:g} s + "
                            f"{opts.failure_progress:g} × work + {offer.idle_tail_s:g} s)")


def bill_in(bill: JobCost, shown: DisplayCurrency, rates: Sequence[ExchangeRate]) -> JobCost:
    """The bill with every amount in the display currency; the formulas keep the offer's own prices.

    No rate is needed when the offer is already in that currency; otherwise a missing one is a
    SpecError that names --fx and [[exchange_rate]] (docs/cost.md §3).
    """
    if bill.currency == shown.code:
        return bill
    factor = to_display(1.0, bill.currency, shown, rates)
    lines = tuple(line.model_copy(update={"amount": line.amount * factor}) for line in bill.lines)
    note = (f"Amounts converted from {bill.currency} to {shown.code} with the exchange rates below; the formulas "
            f"keep the offer's {bill.currency} prices.")
    return bill.model_copy(update={"currency": shown.code, "lines": lines, "total": bill.total * factor,
                                   "total_p95": bill.total_p95 * factor, "note": note})
