"""Currencies and exchange rates: which codes gpuscout accepts, and converting amounts to USD.

gpuscout never fetches rates: a rate is what the user gives (in a price sheet or with `--fx`),
dated and sourced like a price, so a report can say which rate it used (docs/cost.md §2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuscout.errors import SpecError

# ISO 4217 codes gpuscout accepts. A closed list catches "USDT", "RMB" or "US$" before they
# silently become a currency nobody can convert.
KNOWN_CURRENCIES = frozenset(
    {
        "USD", "EUR", "CNY", "GBP", "JPY", "KRW", "INR", "SGD", "HKD", "CAD", "AUD", "CHF",
        "SEK", "NOK", "DKK", "PLN", "CZK", "TWD", "NZD", "BRL", "MXN", "ZAR", "AED", "ILS",
        "TRY", "THB", "MYR", "IDR", "VND", "PHP", "SAR",
    }
)  # fmt: skip

def check_currency(value: str) -> str:
    code = value.strip().upper()
    if code not in KNOWN_CURRENCIES:
        raise ValueError(
            f"unknown currency {value!r}; use an ISO 4217 code such as USD, EUR or CNY "
            f"(known: {', '.join(sorted(KNOWN_CURRENCIES))})"
        )
    return code


class ExchangeRate(BaseModel):
    """What one unit of `currency` was worth in USD on `observed_at` (e.g. CNY 0.14)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    currency: str
    usd_per_unit: Annotated[float, Field(gt=0)]
    observed_at: date
    source: str = Field(min_length=1)

    @field_validator("currency")
    @classmethod
    def _iso_not_usd(cls, value: str) -> str:
        code = check_currency(value)
        if code == "USD":
            raise ValueError("USD needs no exchange rate; list only the other currencies")
        return code


def to_usd(amount: float, currency: str, rates: Sequence[ExchangeRate]) -> float:
    """`amount` in `currency` converted to USD with the newest matching rate; USD passes through."""
    code = currency.strip().upper()
    if code == "USD":
        return amount
    matching = [rate for rate in rates if rate.currency == code]
    if not matching:
        raise SpecError(
            f"No exchange rate for {code}.",
            f"offers in {code} can be ranked with USD offers only with an exchange rate you give; "
            "gpuscout does not fetch rates.",
            f'add [[exchange_rate]] currency = "{code}" usd_per_unit = ... observed_at = ... source = ... '
            f"to the price sheet, or pass --fx {code}=<USD per {code}>, e.g. --fx CNY=0.14.",
        )
    newest = max(matching, key=lambda rate: rate.observed_at)
    return amount * newest.usd_per_unit


_FX = re.compile(r"^\s*([A-Za-z]{3})\s*=\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")


def parse_fx(text: str, today: date) -> ExchangeRate:
    """Command-line rate "CNY=0.14" (USD per unit), dated today with source "command line"."""
    match = _FX.match(text)
    if match is None:
        raise SpecError(
            f"Cannot read {text!r} as an exchange rate.",
            "An exchange rate is a currency code, '=', and the USD value of one unit.",
            "Write it like --fx CNY=0.14 (1 CNY = 0.14 USD).",
        )
    try:
        return ExchangeRate(
            currency=match.group(1),
            usd_per_unit=float(match.group(2)),
            observed_at=today,
            source="command line",
        )
    except ValidationError as exc:
        raise SpecError(f"--fx {text} is not a valid exchange rate.", exc.errors()[0]["msg"],
                        "Write it like --fx CNY=0.14 (1 CNY = 0.14 USD), with an ISO code other than USD.") from None


def merge_rates(sheet: Sequence[ExchangeRate], given: Sequence[ExchangeRate]) -> tuple[ExchangeRate, ...]:
    """Rates given on the command line override the sheet's for the same currency."""
    by_currency = {r.currency: r for r in sheet}
    by_currency.update({r.currency: r for r in given})
    return tuple(by_currency.values())
