"""Currencies and exchange rates: which codes gpuscout accepts, and converting amounts to USD.

gpuscout never fetches rates: a rate is what the user gives (in a price sheet or with `--fx`),
dated and sourced like a price, so a report can say which rate it used (docs/cost.md §3).
Amounts are ranked in USD and shown in the user's currency (`DisplayCurrency`) at the boundary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationError, field_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen

# ISO 4217 codes gpuscout accepts. A closed list catches "USDT", "RMB" or "US$" before they
# silently become a currency nobody can convert.
KNOWN_CURRENCIES = frozenset(
    {
        "USD", "EUR", "CNY", "GBP", "JPY", "KRW", "INR", "SGD", "HKD", "CAD", "AUD", "CHF",
        "SEK", "NOK", "DKK", "PLN", "CZK", "TWD", "NZD", "BRL", "MXN", "ZAR", "AED", "ILS",
        "TRY", "THB", "MYR", "IDR", "VND", "PHP", "SAR",
    }
)  # fmt: skip

# Symbols as Unicode CLDR writes them where they cannot be confused: "CN¥" and "JP¥" (the bare "¥"
# is both), "$" only for the US dollar (HK$, A$, NT$ … are other dollars). Every other currency
# prints its ISO code: "CHF 12.00", "INR 1,234.00" (docs/cost.md §3).
_CURRENCY_SIGN = {"USD": "$", "EUR": "€", "GBP": "£", "CNY": "CN¥", "JPY": "JP¥"}


def currency_sign(code: str) -> str:
    """What prefixes an amount in `code`: '$', 'CN¥', or the code and a space ('CHF ')."""
    return _CURRENCY_SIGN.get(code, f"{code} ")


def amount_text(amount: float, code: str) -> str:
    """An amount with its currency for a sentence: '$1,234.56', 'CN¥300.00', '-€2.50'."""
    return f"{'-' if amount < 0 else ''}{currency_sign(code)}{abs(amount):,.2f}"


def check_currency(value: str) -> str:
    code = value.strip().upper()
    if code not in KNOWN_CURRENCIES:
        raise ValueError(
            f"unknown currency {value!r}; use an ISO 4217 code such as USD, EUR or CNY "
            f"(known: {', '.join(sorted(KNOWN_CURRENCIES))})"
        )
    return code


class ExchangeRate(Frozen):
    """What one unit of `currency` was worth in USD on `observed_at` (e.g. CNY 0.14)."""

    model_config = ConfigDict(allow_inf_nan=False)

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


def missing_rate_fix(code: str) -> str:
    """The two ways to give a rate for `code`, named exactly (the flag, and the sheet's table)."""
    return (f"pass --fx {code}=<USD per {code}> (e.g. --fx CNY=0.14: 1 CNY = 0.14 USD) or add an "
            f"[[exchange_rate]] for {code} to the price sheet")


def _sentence(clause: str) -> str:
    return clause[:1].upper() + clause[1:] + "."


def newest_rate(code: str, rates: Sequence[ExchangeRate]) -> ExchangeRate | None:
    """The newest rate given for `code`, or None when there is none."""
    matching = [rate for rate in rates if rate.currency == code]
    return max(matching, key=lambda rate: rate.observed_at) if matching else None


def to_usd(amount: float, currency: str, rates: Sequence[ExchangeRate]) -> float:
    """`amount` in `currency` converted to USD with the newest matching rate; USD passes through."""
    code = currency.strip().upper()
    if code == "USD":
        return amount
    rate = newest_rate(code, rates)
    if rate is None:
        raise SpecError(
            f"No exchange rate for {code}.",
            f"offers in {code} can be ranked with USD offers only with an exchange rate you give; "
            "gpuscout does not fetch rates.",
            f"Pass --fx {code}=<USD per {code}> (e.g. --fx CNY=0.14: 1 CNY = 0.14 USD) or add "
            f'[[exchange_rate]] currency = "{code}" usd_per_unit = ... observed_at = ... source = ... '
            "to the price sheet.",
        )
    return amount * rate.usd_per_unit


class DisplayCurrency(Frozen):
    """The currency a report shows its amounts in, and what one unit of it is worth in USD.

    Bills are computed in each offer's currency and ranked in USD; this is the last step, at the
    boundary, so a user in China reads yuan and a budget of 300 means 300 of them (docs/cost.md §3).
    """

    model_config = ConfigDict(allow_inf_nan=False)

    code: str = "USD"
    usd_per_unit: Annotated[float, Field(gt=0)] = 1.0
    rate: ExchangeRate | None = None  # the rate it came from; None for USD


USD = DisplayCurrency()


def display_currency(code: str | None, rates: Sequence[ExchangeRate]) -> DisplayCurrency:
    """The display currency `code` (USD when None) with its newest rate, or a SpecError naming the flag."""
    if code is None:
        return USD
    try:
        checked = check_currency(code)
    except ValueError as exc:
        raise SpecError(f"--currency {code!r} is not a currency gpuscout knows.", str(exc),
                        "Pass an ISO 4217 code, e.g. --currency CNY.") from None
    if checked == "USD":
        return USD
    rate = newest_rate(checked, rates)
    if rate is None:
        raise SpecError(f"--currency {checked} needs an exchange rate, and none was given for {checked}.",
                        "Amounts are ranked in USD and shown in your currency at a rate you give; gpuscout "
                        "does not fetch rates.",
                        _sentence(missing_rate_fix(checked)))
    return DisplayCurrency(code=checked, usd_per_unit=rate.usd_per_unit, rate=rate)


def from_usd(amount_usd: float, shown: DisplayCurrency) -> float:
    """A USD amount in the display currency."""
    return amount_usd / shown.usd_per_unit


def to_display(amount: float, currency: str, shown: DisplayCurrency, rates: Sequence[ExchangeRate]) -> float:
    """An amount in `currency` in the display currency; no rate is needed when the two are the same."""
    if currency.strip().upper() == shown.code:
        return amount
    return from_usd(to_usd(amount, currency, rates), shown)


_FX = re.compile(r"^\s*([A-Za-z]{3})\s*=\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")


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
        problem = exc.errors()[0]
        raise SpecError(f"--fx {text} is not a valid exchange rate.",
                        f"{problem['loc'][0]}: {problem['msg']}; one unit of a currency is worth more than zero USD.",
                        "Write it like --fx CNY=0.14 (1 CNY = 0.14 USD), with an ISO code other than USD and a "
                        "value above zero.") from None


def merge_rates(sheet: Sequence[ExchangeRate], given: Sequence[ExchangeRate]) -> tuple[ExchangeRate, ...]:
    """Rates given on the command line override the sheet's for the same currency."""
    by_currency = {r.currency: r for r in sheet}
    by_currency.update({r.currency: r for r in given})
    return tuple(by_currency.values())
