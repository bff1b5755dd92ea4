"""Cost per token and per request at a load test's measured throughput, hand-computed."""

from __future__ import annotations

from datetime import date

import pytest

from gpuscout.cost.load_cost import offer_usd_per_hour, price_load, price_load_cases_on_offer
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import Case, Metric


def load_case(**values: float) -> Case:
    return Case(name="concurrency 8", params={"concurrency": 8},
                metrics=tuple(Metric(name=k, unit="per s", value=v, higher_is_better=True) for k, v in values.items()))


def gpu_offer(**extra: object) -> Offer:
    fields: dict[str, object] = {"id": "h100x2", "provider": "Test", "gpu": "h100-sxm5-80gb", "gpu_count": 2,
                                 "price": 2.0, "price_basis": "gpu", "currency": "USD",
                                 "observed_at": date(2026, 9, 1), "source": "test", **extra}
    return Offer.model_validate(fields)


def test_hand_computed_costs() -> None:
    # $3.60/h = $0.001/s. 500 tokens/s → 0.001 / 500 × 1e6 = $2 per 1M tokens.
    # 4 requests/s → $0.00025 per request. Goodput 3 requests/s × 125 tokens = 375 tokens/s → $2.6667/1M.
    case = load_case(output_tokens_per_s=500.0, requests_per_s=4.0, goodput_rps=3.0)
    cost = price_load(case, 3.60)
    assert cost.usd_per_1m_output_tokens == pytest.approx(2.0)
    assert cost.usd_per_request == pytest.approx(0.00025)
    assert cost.usd_per_1m_goodput_tokens == pytest.approx(0.001 / 375 * 1e6)
    assert cost.price_source == "--usd-per-hour" and "estimated" in cost.notes[0]


def test_goodput_token_metric_is_used_when_present() -> None:
    case = load_case(output_tokens_per_s=500.0, requests_per_s=4.0, goodput_rps=3.0, goodput_output_tokens_per_s=250.0)
    cost = price_load(case, 3.60)
    assert cost.usd_per_1m_goodput_tokens == pytest.approx(4.0)  # 0.001 / 250 × 1e6
    assert cost.notes == ()


def test_nothing_produced_or_no_slo_is_not_priced() -> None:
    cost = price_load(load_case(output_tokens_per_s=0.0, requests_per_s=0.0), 3.60)
    assert cost.usd_per_1m_output_tokens is None and cost.usd_per_request is None
    assert cost.usd_per_1m_goodput_tokens is None and "no goodput" in cost.notes[0]
    zero_goodput = price_load(load_case(output_tokens_per_s=100.0, requests_per_s=1.0, goodput_rps=0.0), 3.6)
    assert zero_goodput.usd_per_1m_goodput_tokens is None and zero_goodput.usd_per_request == pytest.approx(0.001)


def test_offer_price_is_per_instance_after_discount_in_usd() -> None:
    # per-GPU price $2 × 2 GPUs × (1 − 0.25) = $3/h
    assert offer_usd_per_hour(gpu_offer(discount=0.25)) == pytest.approx(3.0)
    eur = gpu_offer(currency="EUR", price_basis="instance", price=3.0, example=True)
    rate = ExchangeRate(currency="EUR", usd_per_unit=1.2, observed_at=date(2026, 9, 1), source="test")
    [cost] = price_load_cases_on_offer([load_case(output_tokens_per_s=1000.0, requests_per_s=10.0)], eur, [rate])
    assert cost.usd_per_hour == pytest.approx(3.6) and cost.price_source == "h100x2"
    assert cost.usd_per_1m_output_tokens == pytest.approx(1.0)  # 0.001 / 1000 × 1e6
    assert any("example price" in note for note in cost.notes)
    with pytest.raises(SpecError, match="No exchange rate for EUR"):
        price_load_cases_on_offer([load_case(output_tokens_per_s=1.0)], eur)


@pytest.mark.parametrize("price", [0.0, -1.0])
def test_price_must_be_positive(price: float) -> None:
    with pytest.raises(SpecError):
        price_load(load_case(output_tokens_per_s=1.0), price)
