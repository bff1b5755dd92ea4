"""`gpuscout cost`: the plain calculator, how the real bill differs from the plain product, and an
offer's bill with the extras the user knows about (docs/cost.md §1.2)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuscout.cost.billed_time import round_bill
from gpuscout.cost.billing import CostLine, JobCost
from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.units import HOUR_S


class PlainCost(Frozen):
    """total = price × GPUs × hours + storage + transfer + retries, in USD."""


    usd_per_gpu_hour: float
    gpus: int
    hours: float
    compute_usd: float
    storage_usd: float
    transfer_usd: float
    retry_usd: float
    total_usd: float


class BilledCost(Frozen):
    """The same run under billing rules: startup and idle tail billed, minimum, rounding."""


    increment_s: float
    min_billed_s: float
    startup_s: float
    idle_tail_s: float
    billed_hours: float
    compute_usd: float
    total_usd: float
    difference_usd: float  # billed total − plain total


# Bounds on what a person can mean (docs/design.md §4.10): a century of compute, a GPU price far
# above any list price, amounts far above any job's bill. Beyond them a number is a typo.
MAX_HOURS = 1e6
MAX_USD = 1e12
MAX_RULE_S = 1e7  # billing increments, minimums, startup and idle tails: under four months


def checked_hours(hours: float | None) -> float:
    """The run's hours, refused when missing, negative or not finite.

    Zero is allowed: a placeholder call (`--hours 0`) prices nothing and says 0.00; the bill of an
    offer still shows what one start costs (startup, minimum, idle tail).
    """
    return _number("hours", hours, minimum=0.0, maximum=MAX_HOURS)


def plain_cost(usd_per_gpu_hour: float | None, gpus: int, hours: float, *, storage_usd: float = 0.0,
               transfer_usd: float = 0.0, retry_usd: float = 0.0) -> PlainCost:
    """price × GPUs × hours + extras; every input is checked (what / why / to fix).

    A zero price is allowed like zero hours: a placeholder call with zeros says 0.00. Negative,
    NaN, infinite and absurd values are refused with the range."""
    price = _number("usd-per-gpu-hour", usd_per_gpu_hour, minimum=0.0, maximum=MAX_USD)
    _number("gpus", gpus, minimum=0.0, maximum=1e6, positive=True)
    extras = {name: _number(name, value, minimum=0.0, maximum=MAX_USD)
              for name, value in (("storage-usd", storage_usd), ("transfer-usd", transfer_usd),
                                  ("retry-usd", retry_usd))}
    compute = price * gpus * hours
    return PlainCost(usd_per_gpu_hour=price, gpus=gpus, hours=hours, compute_usd=compute,
                     storage_usd=extras["storage-usd"], transfer_usd=extras["transfer-usd"],
                     retry_usd=extras["retry-usd"], total_usd=compute + sum(extras.values()))


def billed_cost(plain: PlainCost, *, increment_s: float = 1.0, min_billed_s: float = 0.0,
                startup_s: float = 0.0, idle_tail_s: float = 0.0) -> BilledCost:
    """The plain run as a provider bills it: one start, with startup and idle tail paid for."""
    _number("increment-s", increment_s, minimum=0.0, maximum=MAX_RULE_S, positive=True)
    for flag, value in (("min-billed-s", min_billed_s), ("startup-s", startup_s), ("idle-tail-s", idle_tail_s)):
        _number(flag, value, minimum=0.0, maximum=MAX_RULE_S)
    billed_s = round_bill(startup_s + plain.hours * HOUR_S + idle_tail_s, increment_s, min_billed_s)
    compute = plain.usd_per_gpu_hour * plain.gpus * billed_s / HOUR_S
    total = compute + plain.storage_usd + plain.transfer_usd + plain.retry_usd
    return BilledCost(increment_s=increment_s, min_billed_s=min_billed_s, startup_s=startup_s,
                      idle_tail_s=idle_tail_s, billed_hours=billed_s / HOUR_S, compute_usd=compute,
                      total_usd=total, difference_usd=total - plain.total_usd)


GIVEN_EXTRAS = (("storage", "storage-usd"), ("transfer", "transfer-usd"), ("retries", "retry-usd"))


def with_given_extras(bill: JobCost, rates: Sequence[ExchangeRate], *, storage_usd: float = 0.0,
                      transfer_usd: float = 0.0, retry_usd: float = 0.0) -> JobCost:
    """An offer's bill plus the USD amounts the user gave (--storage-usd, --transfer-usd, --retry-usd).

    Each becomes its own line in the bill's currency, converted with the rates given, so nothing the
    user typed is dropped; an offer in another currency without a rate is an error that names --fx.
    """
    amounts = dict(zip((flag for _, flag in GIVEN_EXTRAS), (storage_usd, transfer_usd, retry_usd), strict=True))
    checked = {flag: _number(flag, value, minimum=0.0, maximum=MAX_USD) for flag, value in amounts.items()}
    given = [(name, flag, checked[flag]) for name, flag in GIVEN_EXTRAS if checked[flag]]
    if not given:
        return bill
    usd_per_unit = to_usd(1.0, bill.currency, rates)
    at = "" if bill.currency == "USD" else f" at 1 {bill.currency} = {usd_per_unit:g} USD"
    lines = tuple(CostLine(name=f"{name} (given)", amount=usd / usd_per_unit, formula=f"--{flag} {usd:g} USD{at}")
                  for name, flag, usd in given)
    added = sum(line.amount for line in lines)
    return bill.model_copy(update={"lines": (*bill.lines, *lines), "total": bill.total + added,
                                   "total_p95": bill.total_p95 + added})


def _number(flag: str, value: float | None, *, minimum: float, maximum: float, positive: bool = False) -> float:
    """A finite number in range, or a SpecError that names the flag and the range."""
    if value is None:
        raise SpecError(f"--{flag} is missing.", f"The calculator needs --{flag}.", f"Pass --{flag}.")
    ok = math.isfinite(value) and (value > minimum if positive else value >= minimum) and value <= maximum
    if not ok:
        low = "above" if positive else "at least"
        raise SpecError(f"--{flag} {value:g} is out of range.",
                        f"--{flag} must be a finite number {low} {minimum:g} and at most {maximum:g}.",
                        f"Pass --{flag} with a value in that range.")
    return float(value)
