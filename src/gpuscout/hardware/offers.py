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
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictBool, field_validator, model_validator

from gpuscout.errors import UnknownNameError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.currency import check_currency

Tier = Literal["on-demand", "spot", "reserved"]
PriceBasis = Literal["instance", "gpu"]
BillingStart = Literal["request", "created", "running", "healthy"]

_NonNegative = Annotated[float, Field(ge=0)]
_Positive = Annotated[float, Field(gt=0)]

# "8x NVIDIA H100 SXM", "4× A100": a product name that states its GPU count.
_COUNT_IN_PRODUCT = re.compile(r"^\s*(\d+)\s*[x×]\s", re.IGNORECASE)


class _Finite(Frozen):
    # allow_inf_nan=False: an infinite or NaN price would poison every total it touches.
    model_config = ConfigDict(allow_inf_nan=False)


class StorageItem(_Finite):
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


class EgressTier(_Finite):
    """One band of tiered internet egress: GB up to `up_to_gb` (cumulative) cost `price_per_gb`."""

    up_to_gb: _Positive | None = None  # None (omitted in TOML) = unbounded; only the last tier
    price_per_gb: _NonNegative


class Offer(_Finite):
    """One rentable configuration at one price, with the billing rules needed to price a whole job."""

    # Names are at most 255 characters (docs/design.md §4.10): they end up in file names and tables.
    id: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/+-]*$")
    provider: str = Field(min_length=1, max_length=255)
    product: str = Field("", max_length=255)
    region: str = Field("", max_length=255)
    tier: Tier = "on-demand"
    gpu: str = Field(max_length=255)
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
    # The launch, phase by phase (docs/cost.md §2.4): request → created → running → healthy → first
    # useful step. Only the phases after `billing_starts` are billed; startup_s (setup, image pull,
    # model load after the machine is healthy) always is.
    provision_s: _NonNegative = 0.0  # request → created
    power_on_s: _NonNegative = 0.0  # created → running
    boot_s: _NonNegative = 0.0  # running → healthy (OS boot, health checks)
    startup_s: _NonNegative = 0.0
    idle_tail_s: _NonNegative = 0.0
    stopped_price_per_hour: _NonNegative = 0.0
    stopped_hours: _NonNegative = 0.0
    storage: tuple[StorageItem, ...] = ()
    egress_free_gb: _NonNegative = 0.0
    egress_tiers: tuple[EgressTier, ...] = ()
    # Spot only. None = the sheet does not say: a spot row is then priced under a prior band
    # (`cost.spot_prior`, docs/cost.md §2.11), never as riskless. The high end, when given, is the
    # rate the P95 is simulated at: a sheet (or the prior) that knows the rate only as a band says so.
    interruptions_per_hour: _NonNegative | None = None
    interruptions_per_hour_high: _NonNegative | None = None
    restart_overhead_s: _NonNegative = 0.0
    checkpoint_interval_s: _Positive = 1800.0
    discount: float = Field(default=0.0, ge=0.0, lt=1.0)
    observed_at: date
    source: str = Field(min_length=1)
    example: bool = False
    # A price nobody observed (an illustration of how an offer is written): never ranked unless
    # the user asks for it (`pick --include-placeholders`, docs/cost.md §4).
    placeholder: StrictBool = False  # a real boolean: "no" or 0 would read as a claim either way
    # What the source said of capacity when the sheet was written: `available = false` (the provider
    # lists the offer but cannot rent it now) or a stock count (machines or GPUs free; 0 = none). None =
    # the source does not say. An unavailable offer is listed but ranked after every other one.
    available: StrictBool | None = None
    stock: int | None = Field(default=None, ge=0)
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
        return check_currency(value)

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("source is blank; say where the price came from (URL, document, date read)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Offer:
        _check_interruptions(self)
        if self.source.lstrip().startswith("PLACEHOLDER") and not self.placeholder:
            # The flag, not the wording, keeps a placeholder out of rankings; a source that says so
            # without it is the silent winner this field exists to prevent.
            raise ValueError("source says PLACEHOLDER but placeholder is not true; add placeholder = true (a "
                             "price nobody observed is ranked only when asked for), or write the source it came from")
        stated = _COUNT_IN_PRODUCT.match(self.product)
        if stated and int(stated.group(1)) != self.gpu_count:
            raise ValueError(f"product {self.product!r} says {stated.group(1)} GPUs but gpu_count = {self.gpu_count}")
        _check_egress_tiers(self.egress_tiers)
        if self.available is True and self.stock == 0:
            raise ValueError("available = true but stock = 0; a stock of 0 means none can be rented now: drop one "
                             "of them, or correct the count")
        return self


def _check_interruptions(offer: Offer) -> None:
    """Only spot capacity is interrupted; a band's high end needs its expected rate, at or below it."""
    rate, high = offer.interruptions_per_hour, offer.interruptions_per_hour_high
    for name, value in (("interruptions_per_hour", rate), ("interruptions_per_hour_high", high)):
        if value is not None and value > 0 and offer.tier != "spot":
            raise ValueError(f'{name} = {value} on a {offer.tier} offer; only tier = "spot" capacity is '
                             "interrupted by the provider")
    if high is not None and rate is None:
        raise ValueError("interruptions_per_hour_high is given without interruptions_per_hour; give the expected "
                         "rate too (the high end is the rate the P95 is simulated at)")
    if high is not None and rate is not None and high < rate:
        raise ValueError(f"interruptions_per_hour_high = {high} is below interruptions_per_hour = {rate}; "
                         "the high end of a band is at or above its expected rate")


def unavailable(offer: Offer) -> bool:
    """The source said it cannot be rented now (`available = false`, or a stock of 0)."""
    return offer.available is False or offer.stock == 0


def interruption_rate(offer: Offer) -> float:
    """The expected interruptions per hour the offer states; 0 when it states none (see `cost.spot_prior`
    for how an unstated spot rate is priced)."""
    return offer.interruptions_per_hour or 0.0


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


STALE_AFTER_DAYS = 30  # prices moved within weeks in the observations (docs/prices.md §4)


def is_stale(offer: Offer, today: date, max_age_days: int = STALE_AFTER_DAYS) -> bool:
    """Observed more than `max_age_days` before `today`: the price may have moved."""
    return (today - offer.observed_at).days > max_age_days


def price_warnings(offers: Sequence[Offer], today: date) -> tuple[str, ...]:
    """What a reader must know about these prices: some are old, some are bundled examples."""
    out = []
    stale = [o for o in offers if is_stale(o, today)]
    if stale:
        oldest = min(o.observed_at for o in stale)
        out.append(f"{len(stale)} of {len(offers)} prices are older than {STALE_AFTER_DAYS} days "
                   f"(oldest observed {oldest}); check them before you rent.")
    if any(o.example for o in offers):
        out.append("EXAMPLE prices: this sheet holds bundled example observations, not today's prices. "
                   "Put your own quotes in a price sheet.")
    return tuple(out)
