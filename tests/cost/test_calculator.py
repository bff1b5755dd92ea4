"""The plain calculator refuses what is not a number a person could mean: NaN, infinity, negatives, absurd sizes."""

from __future__ import annotations

import math

import pytest

from gpuscout.cost.calculator import billed_cost, checked_hours, plain_cost
from gpuscout.errors import SpecError


@pytest.mark.parametrize("hours", [math.nan, math.inf, -1.0, 0.0, 1e300, None])
def test_hours_must_be_finite_positive_and_sane(hours: float | None) -> None:
    with pytest.raises(SpecError, match="hours"):
        checked_hours(hours)


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
