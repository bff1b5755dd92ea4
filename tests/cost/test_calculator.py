"""The plain calculator refuses what is not a number a person could mean (NaN, infinity, negatives, absurd
sizes), takes zero hours as a placeholder, and an offer's bill keeps the extras the user typed."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

import pytest

from gpuscout.cost.billing import price_job
from gpuscout.cost.calculator import billed_cost, checked_hours, plain_cost, with_given_extras
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer

CNY_RATE = ExchangeRate(currency="CNY", usd_per_unit=0.14, observed_at=date(2026, 11, 30), source="test rate")


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "t", "provider": "test", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 30),
                            "source": "hand-made test offer"}
    return Offer.model_validate(base | kw)


@pytest.mark.parametrize("hours", [math.nan, math.inf, -1.0, -1e-9, 1e300, None])
def test_hours_must_be_finite_not_negative_and_sane(hours: float | None) -> None:
    with pytest.raises(SpecError, match="hours"):
        checked_hours(hours)


def test_zero_hours_is_a_placeholder_that_costs_nothing() -> None:
    assert checked_hours(0.0) == 0.0
    plain = plain_cost(2.5, 8, checked_hours(0.0))
    assert plain.compute_usd == 0.0 and plain.total_usd == 0.0
    # The real bill of zero work on a per-start-minimum offer is still that minimum, not zero.
    assert billed_cost(plain, min_billed_s=60.0).total_usd == pytest.approx(2.5 * 8 * 60 / 3600)


def test_an_offers_bill_keeps_the_extras_the_user_typed() -> None:
    bill = price_job(offer(price=3.6), 3600)
    more = with_given_extras(bill, (), storage_usd=5.0, transfer_usd=1.0, retry_usd=4.0)
    names = [line.name for line in more.lines]
    assert names[-3:] == ["storage (given)", "transfer (given)", "retries (given)"]
    assert more.total == pytest.approx(3.6 + 10.0) and more.total_p95 == pytest.approx(bill.total_p95 + 10.0)
    assert with_given_extras(bill, ()) == bill


def test_extras_on_a_cny_offer_are_converted_into_yuan_and_need_a_rate() -> None:
    bill = price_job(offer(price=10.0, currency="CNY"), 3600)
    more = with_given_extras(bill, [CNY_RATE], storage_usd=1.4)
    assert more.lines[-1].amount == pytest.approx(10.0) and more.total == pytest.approx(20.0)
    assert "1 CNY = 0.14 USD" in more.lines[-1].formula
    with pytest.raises(SpecError, match="No exchange rate for CNY") as err:
        with_given_extras(bill, [], retry_usd=1.0)
    assert "--fx CNY=" in err.value.fix and "[[exchange_rate]]" in err.value.fix


@pytest.mark.parametrize("kwargs", [{"storage_usd": -1.0}, {"retry_usd": math.nan}, {"transfer_usd": math.inf}])
def test_extras_on_an_offer_are_checked_too(kwargs: dict[str, float]) -> None:
    with pytest.raises(SpecError, match="out of range"):
        with_given_extras(price_job(offer(), 3600), (), **kwargs)


@pytest.mark.parametrize("kwargs", [{"storage_usd": math.inf}, {"transfer_usd": math.nan}, {"retry_usd": -1.0}])
def test_extras_must_be_finite_amounts(kwargs: dict[str, float]) -> None:
    with pytest.raises(SpecError, match="out of range"):
        plain_cost(2.0, 1, 1.0, **kwargs)


@pytest.mark.parametrize("kwargs", [{"increment_s": 0.0}, {"startup_s": math.nan}, {"min_billed_s": -5.0},
                                    {"idle_tail_s": math.inf}])
def test_billing_rules_must_be_finite(kwargs: dict[str, float]) -> None:
    with pytest.raises(SpecError, match="out of range"):
        billed_cost(plain_cost(2.0, 1, 1.0), **kwargs)


def test_the_plain_product_and_its_bill() -> None:
    plain = plain_cost(2.5, 8, 10.0, storage_usd=3.0)
    assert plain.total_usd == 2.5 * 8 * 10 + 3.0
    billed = billed_cost(plain, increment_s=3600.0, startup_s=600.0)
    assert billed.billed_hours == 11.0 and billed.difference_usd == pytest.approx(2.5 * 8)
