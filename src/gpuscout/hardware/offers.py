"""Offers and price sheets: what a rented GPU server costs, under which billing rules, as of when.

A price is an opinion that changes with time (docs/design.md §3), so every offer carries the date it
was observed and its source, and the schema can express the billing rules a total-cost model needs
(docs/cost.md §2): price basis, billing increment and minimum, when billing starts, startup
and idle tails, stopped-state charges, storage that outlives the instance, tiered egress, spot
interruptions and discounts. This module only reads, validates and converts; the cost arithmetic
over a job lives in `gpuscout.cost`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.hardware.catalog import find_gpu
from gpuscout.userfile import read_user_toml

Tier = Literal["on-demand", "spot", "reserved"]
PriceBasis = Literal["instance", "gpu"]
BillingStart = Literal["request", "created", "running", "healthy"]

_NonNegative = Annotated[float, Field(ge=0)]
_Positive = Annotated[float, Field(gt=0)]

# ISO 4217 codes gpuscout accepts. A closed list catches "USDT", "RMB" or "US$" before they
# silently become a currency nobody can convert.
KNOWN_CURRENCIES = frozenset(
    {
        "USD", "EUR", "CNY", "GBP", "JPY", "KRW", "INR", "SGD", "HKD", "CAD", "AUD", "CHF",
        "SEK", "NOK", "DKK", "PLN", "CZK", "TWD", "NZD", "BRL", "MXN", "ZAR", "AED", "ILS",
        "TRY", "THB", "MYR", "IDR", "VND", "PHP", "SAR",
    }
)  # fmt: skip

# "8x NVIDIA H100 SXM", "4× A100": a product name that states its GPU count.
_COUNT_IN_PRODUCT = re.compile(r"^\s*(\d+)\s*[x×]\s", re.IGNORECASE)


def _check_currency(value: str) -> str:
    code = value.strip().upper()
    if code not in KNOWN_CURRENCIES:
        raise ValueError(
            f"unknown currency {value!r}; use an ISO 4217 code such as USD, EUR or CNY "
            f"(known: {', '.join(sorted(KNOWN_CURRENCIES))})"
        )
    return code


class _Frozen(BaseModel):
    # allow_inf_nan=False: an infinite or NaN price would poison every total it touches.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class StorageItem(_Frozen):
    """A disk, volume or bucket billed per GB-month (docs/cost.md §2.6–§2.8), in the offer's currency."""

    name: str = Field(min_length=1)
    size_gb: _Positive
    price_per_gb_month: _NonNegative
    # RunPod volume disk: $0.10/GB-month running, $0.20 stopped (docs/cost.md §2.6). None = same as running.
    stopped_price_per_gb_month: _NonNegative | None = None
    # How long it exists, in hours; None = as long as the job's billed time (docs/cost.md §2.7).
    lifetime_hours: _NonNegative | None = None
    # Proration basis: 730 h (365 d / 12) or 720 h (a 30-day month, as dstack assumes; docs/cost.md §2.8).
    hours_per_month: float = Field(default=730.0, ge=672.0, le=744.0)


class EgressTier(_Frozen):
    """One band of tiered internet egress: GB up to `up_to_gb` (cumulative) cost `price_per_gb`."""

    up_to_gb: _Positive | None = None  # None (omitted in TOML) = unbounded; only the last tier
    price_per_gb: _NonNegative


class Offer(_Frozen):
    """One rentable configuration at one price, with the billing rules needed to price a whole job."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/+-]*$")
    provider: str = Field(min_length=1)
    product: str = ""
    region: str = ""
    tier: Tier = "on-demand"
    gpu: str
    gpu_count: int = Field(ge=1, le=1024)
    price: _Positive
    price_basis: PriceBasis
    currency: str
    vcpus: _Positive | None = None
    ram_gb: _Positive | None = None
    included_disk_gb: _NonNegative = 0.0
    billing_increment_s: _Positive = 1.0
    min_billed_s: _NonNegative = 0.0
    billing_starts: BillingStart = "running"
    startup_s: _NonNegative = 0.0
    idle_tail_s: _NonNegative = 0.0
    stopped_price_per_hour: _NonNegative = 0.0
    stopped_hours: _NonNegative = 0.0
    storage: tuple[StorageItem, ...] = ()
    egress_free_gb: _NonNegative = 0.0
    egress_tiers: tuple[EgressTier, ...] = ()
    interruptions_per_hour: _NonNegative = 0.0
    restart_overhead_s: _NonNegative = 0.0
    checkpoint_interval_s: _Positive = 1800.0
    discount: float = Field(default=0.0, ge=0.0, lt=1.0)
    observed_at: date
    source: str = Field(min_length=1)
    example: bool = False
    notes: str = ""

    @field_validator("gpu")
    @classmethod
    def _canonical_sku(cls, value: str) -> str:
        try:
            return find_gpu(value).sku
        except UnknownNameError as exc:
            raise ValueError(exc.what) from None

    @field_validator("currency")
    @classmethod
    def _iso_currency(cls, value: str) -> str:
        return _check_currency(value)

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("source is blank; say where the price came from (URL, document, date read)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Offer:
        if self.interruptions_per_hour > 0 and self.tier != "spot":
            raise ValueError(
                f"interruptions_per_hour = {self.interruptions_per_hour} on a {self.tier} offer; "
                'only tier = "spot" capacity is interrupted by the provider'
            )
        stated = _COUNT_IN_PRODUCT.match(self.product)
        if stated and int(stated.group(1)) != self.gpu_count:
            raise ValueError(f"product {self.product!r} says {stated.group(1)} GPUs but gpu_count = {self.gpu_count}")
        _check_egress_tiers(self.egress_tiers)
        return self


def _check_egress_tiers(tiers: Sequence[EgressTier]) -> None:
    """Bands must climb: each bound above the last, and only the last may be unbounded (None)."""
    previous = 0.0
    for index, tier in enumerate(tiers):
        if tier.up_to_gb is None:
            if index != len(tiers) - 1:
                raise ValueError("egress_tiers: only the last tier may omit up_to_gb (unbounded)")
            continue
        if tier.up_to_gb <= previous:
            raise ValueError("egress_tiers must be in ascending order of up_to_gb (cumulative GB bounds)")
        previous = tier.up_to_gb


def instance_price_per_hour(offer: Offer) -> float:
    """Price of the whole instance per hour after discount, in the offer's currency.

    A per-GPU price is multiplied by the GPU count; an instance price never is (docs/cost.md §2.1).
    """
    base = offer.price * offer.gpu_count if offer.price_basis == "gpu" else offer.price
    return base * (1.0 - offer.discount)


def gpu_price_per_hour(offer: Offer) -> float:
    """Price per GPU-hour after discount: the instance price shared over its GPUs."""
    return instance_price_per_hour(offer) / offer.gpu_count


class ExchangeRate(_Frozen):
    """What one unit of `currency` was worth in USD on `observed_at` (e.g. CNY 0.14)."""

    currency: str
    usd_per_unit: _Positive
    observed_at: date
    source: str = Field(min_length=1)

    @field_validator("currency")
    @classmethod
    def _iso_not_usd(cls, value: str) -> str:
        code = _check_currency(value)
        if code == "USD":
            raise ValueError("USD needs no exchange rate; list only the other currencies")
        return code


class PriceSheet(_Frozen):
    """The offers read from one price sheet, plus any exchange rates it gives."""

    path: str
    offers: tuple[Offer, ...]
    exchange_rates: tuple[ExchangeRate, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> PriceSheet:
        duplicates = _duplicate_ids(self.offers)
        if duplicates:
            raise ValueError(f"duplicate offer ids: {', '.join(duplicates)}")
        return self


def _duplicate_ids(offers: Sequence[Offer]) -> list[str]:
    ids = [offer.id for offer in offers]
    return sorted({i for i in ids if ids.count(i) > 1})


_TOP_LEVEL_KEYS = ("offer", "exchange_rate")


def load_price_sheet(path: Path) -> PriceSheet:
    """Read a TOML price sheet: [[offer]] tables (with [[offer.storage]], [[offer.egress_tiers]])
    and optional [[exchange_rate]] tables. Every problem is a SpecError that names where it is."""
    document = read_user_toml(path, "price sheet", "Check the path; examples/prices.example.toml shows the format.")
    return parse_price_sheet(document, path=str(path))


def parse_price_sheet(document: Mapping[str, Any], *, path: str = "price sheet") -> PriceSheet:
    """Validate a price sheet already read into a dict (see `load_price_sheet`)."""
    unknown = [key for key in document if key not in _TOP_LEVEL_KEYS]
    if unknown:
        raise SpecError(
            f"{path} has unknown top-level keys: {', '.join(map(str, unknown))}.",
            "A price sheet holds only [[offer]] and [[exchange_rate]] tables.",
            "Write each offer as an [[offer]] table and each rate as an [[exchange_rate]] table.",
        )
    offer_tables = _tables(document, "offer", path)
    if not offer_tables:
        raise SpecError(
            f"{path} has no offers.",
            "A price sheet needs at least one [[offer]] table to rank.",
            "Add [[offer]] tables; see examples/prices.example.toml.",
        )
    offers = tuple(parse_offer(table, origin=f"{path}: offer #{n}") for n, table in enumerate(offer_tables, 1))
    duplicates = _duplicate_ids(offers)
    if duplicates:
        raise SpecError(
            f"{path}: offer ids must be unique; repeated: {', '.join(duplicates)}.",
            "Reports, comparisons and --offer filters refer to offers by id.",
            "Give each [[offer]] its own id, e.g. with the region or tier appended.",
        )
    rates = tuple(
        _parse_rate(table, origin=f"{path}: exchange_rate #{n}")
        for n, table in enumerate(_tables(document, "exchange_rate", path), 1)
    )
    return PriceSheet(path=path, offers=offers, exchange_rates=rates)


def _tables(document: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise SpecError(
            f"{path}: `{key}` must be an array of tables.",
            f"Each entry is written as a [[{key}]] table with key = value lines.",
            f"Write [[{key}]] (double brackets) above each entry.",
        )
    return value


def parse_offer(data: Mapping[str, Any], *, origin: str = "offer") -> Offer:
    """Validate one offer table; errors name the offer id and the field."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{origin} is not a table.", "An offer is a set of key = value pairs.", "Use [[offer]].")
    offer_id = data.get("id")
    where = f"{origin} ({offer_id!r})" if isinstance(offer_id, str) else origin
    try:
        return Offer.model_validate(dict(data))
    except ValidationError as exc:
        raise _spec_error(where, "offer", exc) from None


def _parse_rate(data: Mapping[str, Any], *, origin: str) -> ExchangeRate:
    try:
        return ExchangeRate.model_validate(dict(data))
    except ValidationError as exc:
        raise _spec_error(origin, "exchange rate", exc) from None


_DATED_FIELDS = frozenset({"observed_at", "source"})


def _spec_error(where: str, what: str, exc: ValidationError) -> SpecError:
    problems: list[str] = []
    missing_dating = False
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) or "(whole table)"
        if err["type"] == "missing" and loc in _DATED_FIELDS:
            missing_dating = True
        problems.append(f"{loc}: {err['msg']}" + _input_hint(err))
    fix = "Correct the named fields; examples/prices.example.toml shows every field."
    if missing_dating:
        fix = (
            "Prices are dated: add observed_at = YYYY-MM-DD (the day you read the price) and "
            'source = "URL or document" to every offer, so reports can say how old each price is.'
        )
    return SpecError(f"{where} is not a valid {what}.", "; ".join(problems), fix)


def _input_hint(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return " (unknown key; check its spelling)"
    if "input" in err and not isinstance(err["input"], (dict, list)):
        shown = repr(err["input"])
        return f" (got {shown[:60]})"
    return ""


def stale_offers(sheet: PriceSheet, today: date, max_age_days: int = 30) -> tuple[Offer, ...]:
    """Offers observed more than `max_age_days` before `today`: their prices may have moved.

    Prices in the observations moved within weeks (docs/prices.md §4).
    """
    return tuple(offer for offer in sheet.offers if (today - offer.observed_at).days > max_age_days)


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
        raise _spec_error(f"--fx {text}", "exchange rate", exc) from None
