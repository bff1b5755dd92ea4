"""Offers and price sheets: the example sheet, price arithmetic, staleness, currencies, bad input."""

from __future__ import annotations

import contextlib
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate, parse_fx, to_usd
from gpuscout.hardware.offers import Offer, instance_price_per_hour, is_stale
from gpuscout.hardware.price_sheet import PriceSheet, load_price_sheet, parse_offer, parse_price_sheet

EXAMPLE_SHEET = Path(__file__).resolve().parents[2] / "examples" / "prices.example.toml"
TODAY = date(2026, 11, 30)


def _offer(**overrides: Any) -> Offer:
    fields: dict[str, Any] = {
        "id": "test-offer",
        "provider": "Test",
        "gpu": "h100",
        "gpu_count": 1,
        "price": 2.0,
        "price_basis": "instance",
        "currency": "USD",
        "observed_at": date(2026, 11, 1),
        "source": "unit test",
    }
    fields.update(overrides)
    return Offer.model_validate(fields)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    return path


_VALID_OFFER = """
[[offer]]
id = "{id}"
provider = "Lambda"
gpu = "{gpu}"
gpu_count = 1
price = {price}
price_basis = "instance"
currency = "{currency}"
tier = "{tier}"
interruptions_per_hour = {interruptions}
observed_at = 2026-09-20
source = "S3"
"""


def _offer_toml(**overrides: Any) -> str:
    fields = {"id": "lambda-h100", "gpu": "h100", "price": 2.49, "currency": "USD", "tier": "on-demand"}
    fields["interruptions"] = 0.0
    fields.update(overrides)
    return _VALID_OFFER.format(**fields)


# --- the bundled example sheet ----------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> PriceSheet:
    return load_price_sheet(EXAMPLE_SHEET)


def test_example_sheet_is_valid_labelled_and_dated(example: PriceSheet) -> None:
    assert len(example.offers) >= 12
    assert all(offer.example for offer in example.offers)
    assert all(offer.observed_at and offer.source.strip() for offer in example.offers)
    assert sum(offer.tier == "spot" for offer in example.offers) >= 1
    assert any(offer.tier == "spot" and offer.interruptions_per_hour > 0 for offer in example.offers)
    assert any(offer.currency == "CNY" for offer in example.offers)


def test_example_sheet_covers_the_gpu_classes(example: PriceSheet) -> None:
    skus = {offer.gpu for offer in example.offers}
    expected = {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb"}
    assert expected | {"l40s", "rtx-4090"} <= skus


def test_example_sheet_converts_every_offer_to_usd(example: PriceSheet) -> None:
    for offer in example.offers:
        usd = to_usd(instance_price_per_hour(offer), offer.currency, example.exchange_rates)
        assert 0 < usd < 200


def test_example_sheet_header_says_prices_are_examples() -> None:
    header = EXAMPLE_SHEET.read_text(encoding="utf-8")[:600].lower()
    assert "example prices" in header and "not current" in header and "replace" in header


# --- price arithmetic ---------------------------------------------------------------------------


def test_instance_price_is_shared_over_gpus_never_multiplied() -> None:
    offer = _offer(gpu_count=8, price=24.0, price_basis="instance")
    assert instance_price_per_hour(offer) == pytest.approx(24.0)
    assert instance_price_per_hour(offer) / offer.gpu_count == pytest.approx(3.0)  # $3 a GPU-hour


def test_gpu_price_is_multiplied_by_gpu_count() -> None:
    offer = _offer(gpu_count=8, price=2.5, price_basis="gpu")
    assert instance_price_per_hour(offer) == pytest.approx(20.0)


def test_discount_applies_to_both_prices() -> None:
    offer = _offer(gpu_count=8, price=2.5, price_basis="gpu", discount=0.25)
    assert instance_price_per_hour(offer) == pytest.approx(15.0)


def test_gpu_name_becomes_catalog_sku_and_currency_upper_case() -> None:
    offer = _offer(gpu="H100 SXM", currency="eur")
    assert offer.gpu == "h100-sxm5-80gb"
    assert offer.currency == "EUR"


# --- staleness ----------------------------------------------------------------------------------


def test_stale_offers_older_than_thirty_days() -> None:
    fresh = _offer(id="fresh", observed_at=TODAY - timedelta(days=30))
    old = _offer(id="old", observed_at=TODAY - timedelta(days=31))
    sheet = PriceSheet(path="x", offers=(fresh, old))
    assert [offer.id for offer in sheet.offers if is_stale(offer, TODAY)] == ["old"]
    assert not any(is_stale(offer, TODAY, max_age_days=60) for offer in sheet.offers)


# --- currencies ---------------------------------------------------------------------------------


def test_to_usd_passes_usd_through_and_converts_with_newest_rate() -> None:
    older = ExchangeRate(currency="CNY", usd_per_unit=0.10, observed_at=date(2026, 1, 1), source="old")
    newer = ExchangeRate(currency="CNY", usd_per_unit=0.14, observed_at=date(2026, 11, 1), source="new")
    assert to_usd(5.0, "USD", []) == 5.0
    assert to_usd(10.0, "CNY", [older, newer]) == pytest.approx(1.4)


def test_to_usd_without_a_rate_says_how_to_give_one() -> None:
    with pytest.raises(SpecError) as err:
        to_usd(10.0, "CNY", [])
    message = str(err.value)
    assert "offers in CNY can be ranked with USD offers only with an exchange rate you give" in message
    assert '[[exchange_rate]] currency = "CNY" usd_per_unit' in message
    assert "--fx CNY=" in message


def test_parse_fx_reads_usd_per_unit() -> None:
    rate = parse_fx("cny=0.14", TODAY)
    assert (rate.currency, rate.usd_per_unit, rate.observed_at, rate.source) == ("CNY", 0.14, TODAY, "command line")


@pytest.mark.parametrize("text", ["CNY", "CNY=abc", "USDT=1", "CNY=0", "USD=1", "=0.14", ""])
def test_parse_fx_rejects_bad_input(text: str) -> None:
    with pytest.raises(SpecError):
        parse_fx(text, TODAY)


# --- bad price sheets ----------------------------------------------------------------------------


def test_load_minimal_sheet(tmp_path: Path) -> None:
    sheet = load_price_sheet(_write(tmp_path, _offer_toml()))
    assert sheet.offers[0].gpu == "h100-sxm5-80gb"
    assert sheet.path.endswith("prices.toml")


@pytest.mark.parametrize("price", [0, -1.5])
def test_price_must_be_positive(tmp_path: Path, price: float) -> None:
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, _offer_toml(price=price)))
    assert "'lambda-h100'" in str(err.value) and "price:" in str(err.value)


def test_unknown_currency(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, _offer_toml(currency="USDT")))
    assert "currency" in str(err.value) and "USDT" in str(err.value)


def test_unknown_gpu_suggests_close_names(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, _offer_toml(gpu="h1000")))
    message = str(err.value)
    assert "gpu:" in message and "Did you mean" in message and "h100" in message


def test_missing_observed_at_says_prices_are_dated(tmp_path: Path) -> None:
    text = _offer_toml().replace("observed_at = 2026-09-20\n", "")
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, text))
    assert "observed_at" in str(err.value) and "Prices are dated" in err.value.fix


def test_interruptions_only_on_spot(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, _offer_toml(interruptions=0.1)))
    assert "spot" in str(err.value)
    sheet = load_price_sheet(_write(tmp_path, _offer_toml(interruptions=0.1, tier="spot")))
    assert sheet.offers[0].interruptions_per_hour == 0.1


def test_duplicate_ids(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, _offer_toml() + _offer_toml(price=3.0)))
    assert "lambda-h100" in str(err.value) and "unique" in str(err.value)


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    text = '[[offer]]\nid = "x"\nprice 2.49\n'
    with pytest.raises(SpecError) as err:
        load_price_sheet(_write(tmp_path, text))
    assert "line 3" in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError):
        load_price_sheet(tmp_path / "nope.toml")


def test_product_gpu_count_must_agree() -> None:
    with pytest.raises(SpecError) as err:
        parse_offer({**_offer().model_dump(), "product": "8x NVIDIA H100 SXM", "gpu_count": 1})
    assert "8 GPUs" in str(err.value)


def test_egress_tiers_must_ascend_and_end_unbounded() -> None:
    base = _offer().model_dump()
    with pytest.raises(SpecError):
        parse_offer({**base, "egress_tiers": [{"up_to_gb": 10240, "price_per_gb": 0.1}, {"up_to_gb": 1024}]})
    with pytest.raises(SpecError):
        parse_offer({**base, "egress_tiers": [{"price_per_gb": 0.1}, {"up_to_gb": 1024, "price_per_gb": 0.1}]})
    ok = parse_offer({**base, "egress_tiers": [{"up_to_gb": 1024, "price_per_gb": 0.12}, {"price_per_gb": 0.08}]})
    assert ok.egress_tiers[-1].up_to_gb is None


def test_storage_items_and_unknown_keys() -> None:
    base = _offer().model_dump()
    storage = {"name": "volume", "size_gb": 100, "price_per_gb_month": 0.1, "stopped_price_per_gb_month": 0.2}
    offer = parse_offer({**base, "storage": [storage]})
    assert offer.storage[0].hours_per_month == 730.0
    with pytest.raises(SpecError) as err:
        parse_offer({**base, "prize": 2.0})
    assert "unknown key" in str(err.value)


def test_sheet_shape_errors() -> None:
    with pytest.raises(SpecError):
        parse_price_sheet({})
    with pytest.raises(SpecError):
        parse_price_sheet({"offers": []})
    with pytest.raises(SpecError):
        parse_price_sheet({"offer": {"id": "x"}})


# --- no input crashes the parsers --------------------------------------------------------------

_FIELD_NAMES = [*Offer.model_fields, "prize", "gpus"]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.dates(),
    st.sampled_from(["h100", "A100-80GB", "USD", "CNY", "spot", "gpu", "instance", "2026-01-01"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_FIELD_NAMES), _VALUES, max_size=len(_FIELD_NAMES)))
def test_random_offer_tables_raise_only_spec_errors(data: dict[str, Any]) -> None:
    try:
        offer = parse_offer(data)
    except SpecError:
        return
    assert instance_price_per_hour(offer) > 0


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["offer", "exchange_rate", "other"]), _VALUES, max_size=3))
def test_random_documents_raise_only_spec_errors(document: dict[str, Any]) -> None:
    with contextlib.suppress(SpecError):
        parse_price_sheet(document)


def test_the_billing_types_of_results_are_the_tiers_of_offers() -> None:
    """`bench --billing` and an offer's tier name the same thing (a fixed variable of the result)."""
    from typing import get_args

    from gpuscout.hardware.offers import Tier
    from gpuscout.results.schema import BillingType

    assert get_args(BillingType) == get_args(Tier)


def test_the_bundled_example_sheet_is_found_by_the_name_examples_lists(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscout.hardware.price_sheet import default_price_sheet, load_price_sheet

    monkeypatch.chdir(tmp_path)  # outside the checkout: no examples/ folder here
    for name in ("prices.example", "prices.example.toml"):
        assert load_price_sheet(Path(name)).path == str(default_price_sheet())
    (tmp_path / "prices.example.toml").write_text("")  # a file of that name here wins
    with pytest.raises(SpecError, match=r"prices\.example\.toml has no offers"):
        load_price_sheet(Path("prices.example.toml"))
