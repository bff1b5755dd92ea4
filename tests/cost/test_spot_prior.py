"""A spot row without an interruption rate is priced under a band, never as riskless: the default
prior's numbers, a Spot Advisor band as rates per hour, the order the sources are tried in, and the
P95 simulated at the band's high end (docs/cost.md §2.11)."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

import pytest

from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.spot import spot_p95_billed_s
from gpuscout.cost.spot_prior import (
    ADVISOR_SPREAD,
    DEFAULT_HIGH_PER_HOUR,
    DEFAULT_PRIOR,
    SpotKnowledge,
    advisor_prior,
    monthly_share_rate,
    prior_for,
    with_prior,
)
from gpuscout.errors import SpecError
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import parse_offer
from gpuscout.hardware.spot_advisor import AdvisorBand, SpotAdvisor


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "t", "provider": "test", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 30),
                            "source": "hand-made test offer", "product": "p5.48xlarge", "region": "us-east-1"}
    return Offer.model_validate(base | kw)


SPOT_NO_RATE = {"tier": "spot", "restart_overhead_s": 600, "checkpoint_interval_s": 1800}


def advisor(frequency: str, *, instance: str = "p5.48xlarge", region: str = "us-east-1",
            exposure: float = 730.0) -> SpotAdvisor:
    return SpotAdvisor(path="advisor.toml", observed_at=date(2026, 11, 30), source="test", exposure_hours=exposure,
                       bands=(AdvisorBand(instance_type=instance, region=region, frequency=frequency),))


def test_the_default_prior_is_one_per_24_hours_spread_by_the_advisors_own_scale() -> None:
    assert pytest.approx(4.3503, abs=1e-4) == ADVISOR_SPREAD  # ln(1/0.8) / ln(1/0.95)
    assert DEFAULT_PRIOR.expected_per_hour == pytest.approx(1 / 24)
    assert DEFAULT_PRIOR.high_per_hour == pytest.approx(0.181264, rel=1e-5)  # one per 5.52 h
    assert DEFAULT_PRIOR.low_per_hour == pytest.approx(0.0095778, rel=1e-4)  # one per 104 h
    assert DEFAULT_PRIOR.unknown


def test_a_monthly_share_becomes_a_constant_hazard_over_the_exposure() -> None:
    assert monthly_share_rate(0.05, 730) == pytest.approx(7.02648e-5, rel=1e-5)
    assert monthly_share_rate(0.20, 730) == pytest.approx(3.05676e-4, rel=1e-5)
    assert monthly_share_rate(0.20, 24) == pytest.approx(1 / 107.554, rel=1e-5)
    assert monthly_share_rate(0.0, 730) == 0.0


def test_an_advisor_band_gives_its_edges_and_its_middle() -> None:
    band = advisor_prior("5-10%", 730)
    assert (band.low_per_hour, band.expected_per_hour, band.high_per_hour) == pytest.approx(
        (7.02648e-5, 1.06797e-4, 1.44329e-4), rel=1e-5)
    assert band.basis == "spot advisor" and not band.unknown
    under_5 = advisor_prior("<5%", 730)
    assert under_5.low_per_hour == 0.0 and under_5.high_per_hour == pytest.approx(7.02648e-5, rel=1e-5)


def test_the_open_top_band_is_bounded_above_by_the_default_prior() -> None:
    top = advisor_prior(">20%", 730)
    assert top.expected_per_hour == pytest.approx(3.05676e-4, rel=1e-5)
    assert top.high_per_hour == DEFAULT_HIGH_PER_HOUR
    short = advisor_prior(">20%", 1)  # reclaimed within an hour of running: the edge itself is higher
    assert short.high_per_hour == short.expected_per_hour == pytest.approx(-math.log(0.8))


def test_a_stated_rate_is_used_as_written_and_on_demand_has_none() -> None:
    assert prior_for(offer(tier="spot", interruptions_per_hour=0.0)) is None  # zero, said out loud
    assert prior_for(offer(tier="spot", interruptions_per_hour=0.3)) is None
    assert prior_for(offer()) is None


def test_the_sources_are_tried_advisor_then_rate_then_the_default() -> None:
    spot = offer(**SPOT_NO_RATE)
    assert prior_for(spot) == DEFAULT_PRIOR
    by_rate = prior_for(spot, SpotKnowledge(per_hour=0.25))
    assert by_rate is not None and (by_rate.basis, by_rate.expected_per_hour, by_rate.high_per_hour) == (
        "--interruptions-per-hour", 0.25, 0.25)
    both = prior_for(spot, SpotKnowledge(per_hour=0.25, advisor=advisor("10-15%")))
    assert both is not None and both.basis == "spot advisor" and "p5.48xlarge in us-east-1: 10-15%" in both.detail
    elsewhere = prior_for(spot, SpotKnowledge(per_hour=0.25, advisor=advisor("10-15%", region="us-west-2")))
    assert elsewhere is not None and elsewhere.basis == "--interruptions-per-hour"
    unmatched = prior_for(spot, SpotKnowledge(advisor=advisor("10-15%", instance="p4d.24xlarge")))
    assert unmatched == DEFAULT_PRIOR


@pytest.mark.parametrize(("region", "matches"), [("us-east-1", True), ("us-east-1a", True), ("US-EAST-1", True),
                                                 ("us-east-1-bos-1a", False), ("us-east-2", False), ("", False)])
def test_an_advisor_region_matches_itself_and_its_zones(region: str, matches: bool) -> None:
    band = AdvisorBand(instance_type="p5.48xlarge", region="us-east-1", frequency="<5%")
    assert band.matches(offer(tier="spot", region=region)) is matches


def test_a_spot_row_without_a_rate_is_never_priced_as_riskless() -> None:
    work = 5 * 3600.0
    riskless = price_job(offer(tier="spot", interruptions_per_hour=0.0, restart_overhead_s=600), work)
    unknown = price_job(offer(**SPOT_NO_RATE), work)
    assert riskless.total_p95 == riskless.total
    assert unknown.total > riskless.total
    assert unknown.total_p95 > unknown.total
    assert "high end of the rate's band" in unknown.p95_method


def test_the_prior_prices_exactly_as_the_same_band_written_in_the_sheet() -> None:
    work = 5 * 3600.0
    written = offer(tier="spot", restart_overhead_s=600, interruptions_per_hour=1 / 24,
                    interruptions_per_hour_high=DEFAULT_HIGH_PER_HOUR)
    unknown, stated = price_job(offer(**SPOT_NO_RATE), work), price_job(written, work)
    assert unknown.model_copy(update={"interruption_note": ""}) == stated
    assert stated.interruption_note == ""  # a band the sheet writes is the sheet's to vouch for
    assert unknown.interruption_note.startswith("interruption risk unknown: the sheet gives no interruptions_per_hour")
    assert "0.0417 interruptions/h, the P95 at 0.181/h" in unknown.interruption_note


def test_the_p95_is_simulated_at_the_high_end_and_the_total_at_the_expected_rate() -> None:
    work, opts = 5 * 3600.0, CostOptions(seed=3)
    banded = offer(tier="spot", restart_overhead_s=600, interruptions_per_hour=0.05, interruptions_per_hour_high=0.4)
    point, at_high = (offer(tier="spot", restart_overhead_s=600, interruptions_per_hour=r) for r in (0.05, 0.4))
    bill = price_job(banded, work, opts)
    assert bill.total == price_job(point, work, opts).total
    p95_high, _ = spot_p95_billed_s(at_high, work, runs=opts.spot_samples, seed=opts.seed)
    assert bill.total_p95 == pytest.approx(bill.total + (p95_high - bill.billed_s) * 2.0 / 3600)
    assert bill.total_p95 > price_job(point, work, opts).total_p95


def test_a_zero_rate_with_a_high_end_has_a_riskless_total_and_a_wider_p95() -> None:
    work = 5 * 3600.0
    riskless = price_job(offer(tier="spot", interruptions_per_hour=0.0), work)
    bill = price_job(offer(tier="spot", interruptions_per_hour=0.0, interruptions_per_hour_high=0.2,
                           restart_overhead_s=600), work)
    assert bill.total == riskless.total and bill.interruptions == 0.0
    assert bill.total_p95 > bill.total


def test_with_prior_writes_the_band_into_the_offer() -> None:
    priced = with_prior(offer(**SPOT_NO_RATE), DEFAULT_PRIOR)
    assert (priced.interruptions_per_hour, priced.interruptions_per_hour_high) == (1 / 24, DEFAULT_HIGH_PER_HOUR)
    assert with_prior(offer(), None) == offer()


@pytest.mark.parametrize(("fields", "message"), [
    ({"tier": "spot", "interruptions_per_hour_high": 0.2}, "without interruptions_per_hour"),
    ({"tier": "spot", "interruptions_per_hour": 0.3, "interruptions_per_hour_high": 0.2}, "below"),
    ({"interruptions_per_hour": 0.1, "interruptions_per_hour_high": 0.2}, 'only tier = "spot"'),
    ({"interruptions_per_hour_high": 0.2, "interruptions_per_hour": 0.0}, 'only tier = "spot"'),
])
def test_a_band_in_the_sheet_is_checked(fields: dict[str, Any], message: str) -> None:
    table = {"id": "x", "provider": "p", "gpu": "h100", "gpu_count": 1, "price": 1.0, "price_basis": "gpu",
             "currency": "USD", "observed_at": date(2026, 11, 30), "source": "s"} | fields
    with pytest.raises(SpecError) as err:
        parse_offer(table)
    assert message in str(err.value)


def test_a_source_that_says_placeholder_needs_the_flag() -> None:
    table = {"id": "x", "provider": "p", "gpu": "h100", "gpu_count": 1, "price": 1.0, "price_basis": "gpu",
             "currency": "USD", "observed_at": date(2026, 11, 30), "source": "PLACEHOLDER, not an observation"}
    with pytest.raises(SpecError) as err:
        parse_offer(table)
    assert "add placeholder = true" in str(err.value)
    assert parse_offer(table | {"placeholder": True}).placeholder
    with pytest.raises(SpecError, match="placeholder"):
        parse_offer(table | {"placeholder": "yes"})  # a real boolean, not a word
