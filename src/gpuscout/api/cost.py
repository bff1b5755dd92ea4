"""`cost`: the plain calculator (price × GPUs × hours + extras, the bill under simple rules), or an offer's bill."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError, offer_in, rates_for
from gpuscout.units import HOUR_S

if TYPE_CHECKING:
    from gpuscout.cost.billing import CostOptions, JobCost
    from gpuscout.cost.calculator import BilledCost, PlainCost
    from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate
    from gpuscout.hardware.offers import Offer


@dataclass(frozen=True)
class CostReport:
    """A plain calculation (with the bill under simple rules), or one offer's bill.

    The plain figures are in USD and shown in `currency`; an offer's bill is already in `currency`
    when one was asked for (else in the offer's own).
    """

    hours: float
    plain: PlainCost | None = None
    billed: BilledCost | None = None
    offer: Offer | None = None
    bill: JobCost | None = None
    currency: DisplayCurrency | None = None  # None: USD for the plain figures, the offer's own for a bill
    rates: tuple[ExchangeRate, ...] = ()  # the rates used to convert


def cost(*, hours: float | None, usd_per_gpu_hour: float | None = None, gpus: int = 1, storage_usd: float = 0.0,
         transfer_usd: float = 0.0, retry_usd: float = 0.0, increment_s: float = 0.0, min_billed_s: float = 0.0,
         startup_s: float = 0.0, idle_tail_s: float = 0.0, offers: str | Path | None = None,
         offer: str | None = None, currency: str | None = None, fx: Sequence[str | ExchangeRate] = (),
         options: CostOptions | None = None, today: date | None = None) -> CostReport:
    """price × GPUs × hours + extras (and the real bill under the rules given), or an offer's bill.

    With an offer, the USD extras are added to its bill as their own lines and `options` (days kept
    stopped after the job, egress, failed attempts) apply; `currency` shows every amount in that
    currency, converted with the sheet's rates and `fx`.
    """
    from gpuscout.cost.calculator import billed_cost, checked_hours, plain_cost

    run_hours = checked_hours(hours)
    day = today or date.today()
    extras = {"storage_usd": storage_usd, "transfer_usd": transfer_usd, "retry_usd": retry_usd}
    rules = {"increment_s": increment_s, "min_billed_s": min_billed_s, "startup_s": startup_s,
             "idle_tail_s": idle_tail_s}
    if offers is not None or offer is not None:
        _no_manual_rules({"usd_per_gpu_hour": usd_per_gpu_hour, "gpus": gpus, **rules})
        return _offer_cost(run_hours, offers, offer, extras, currency, fx, options, day)
    if options is not None and options.keep_stopped_days:
        raise InputError("{keep_stopped_days} needs an offer.", "A stopped machine bills at its provider's stopped "
                         "rates (disks, stopped compute), which only an offer in a price sheet states.",
                         "Pass {offers} PRICES.toml {offer} ID with it.")
    rates = rates_for((), fx, day)
    shown = _shown(currency, rates)
    plain = plain_cost(usd_per_gpu_hour, gpus, run_hours, **extras)
    if not any(rules.values()):
        return CostReport(hours=run_hours, plain=plain, currency=shown, rates=_used(rates, shown))
    # A bill needs an increment: with other rules but none, it is billed by the second.
    billed = billed_cost(plain, **rules | {"increment_s": increment_s or 1.0})
    return CostReport(hours=run_hours, plain=plain, billed=billed, currency=shown, rates=_used(rates, shown))


def _offer_cost(hours: float, offers: str | Path | None, offer_id: str | None, extras: dict[str, float],
                currency: str | None, fx: Sequence[str | ExchangeRate], options: CostOptions | None,
                day: date) -> CostReport:
    """One offer's bill for `hours` of work, the given extras added, in `currency` when asked."""
    from gpuscout.cost.billing import bill_in, price_job
    from gpuscout.cost.calculator import with_given_extras

    sheet, the_offer = offer_in(offers, offer_id)
    rates = rates_for(sheet.exchange_rates, fx, day)
    shown = _shown(currency, rates)
    bill = with_given_extras(price_job(the_offer, hours * HOUR_S, options), rates, **extras)
    if shown is not None:
        bill = bill_in(bill, shown, rates)
    converted = {the_offer.currency, shown.code} if shown is not None and shown.code != the_offer.currency else set()
    if any(extras.values()):
        converted.add(the_offer.currency)  # the USD extras were converted into the offer's currency
    used = tuple(r for r in rates if r.currency in converted)
    return CostReport(hours=hours, offer=the_offer, bill=bill, currency=shown, rates=used)


def _shown(currency: str | None, rates: Sequence[ExchangeRate]) -> DisplayCurrency | None:
    from gpuscout.hardware.currency import display_currency

    return display_currency(currency, rates) if currency is not None else None


def _used(rates: Sequence[ExchangeRate], shown: DisplayCurrency | None) -> tuple[ExchangeRate, ...]:
    return tuple(r for r in rates if shown is not None and r.currency == shown.code)


# What each manual billing term is when not given (gpus: one GPU; usd_per_gpu_hour: no price).
_MANUAL_DEFAULTS: dict[str, float | None] = {"usd_per_gpu_hour": None, "gpus": 1, "increment_s": 0.0,
                                             "min_billed_s": 0.0, "startup_s": 0.0, "idle_tail_s": 0.0}


def _no_manual_rules(given: dict[str, float | None]) -> None:
    """An offer brings its own price and billing terms: a term that would be ignored is refused instead."""
    typed = [name for name, default in _MANUAL_DEFAULTS.items() if given[name] != default]
    if typed:
        raise InputError(", ".join(f"{{{name}}}" for name in typed) + " cannot be used with {offer}.",
                         "The offer's price, GPU count and billing terms come from the price sheet; gpuscout will "
                         "not silently ignore a value you typed.",
                         "Drop those flags, or edit the offer in the price sheet (docs/cost.md §8).")
