"""The sheet a box reads when the trial's offers came from a SkyPilot vms.csv: the candidates' offers as a
TOML price sheet that reads back to the very same offers (the box's doctor and bench price exactly what the
trial priced)."""

from __future__ import annotations

import tomllib
from datetime import date
from pathlib import Path

import pytest

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_offers, load_price_sheet, parse_price_sheet
from gpuscout.hardware.skypilot import import_skypilot_catalog
from gpuscout.trial.sheet import SHEET_NAME, sheet_for_boxes, sheet_toml

TESTS = Path(__file__).resolve().parents[1]
EXAMPLE = TESTS.parent / "examples" / "prices.example.toml"


def catalog(cloud: str) -> tuple[Offer, ...]:
    return import_skypilot_catalog(TESTS / "hardware" / "data" / f"skypilot_{cloud}_vms.csv", cloud=cloud,
                                   observed_at=date(2026, 11, 1)).offers


@pytest.mark.parametrize("offers", [catalog("aws"), catalog("gcp"), catalog("lambda"),
                                    load_price_sheet(EXAMPLE).offers], ids=["aws", "gcp", "lambda", "example"])
def test_offers_survive_the_round_trip_field_for_field(offers: tuple[Offer, ...]) -> None:
    text = sheet_toml(offers, origin="somewhere/vms.csv")
    back = parse_price_sheet(tomllib.loads(text), path="round trip")
    assert back.offers == offers


def test_odd_strings_and_rates_survive_too() -> None:
    base = catalog("aws")[0]
    odd = base.model_copy(update={"notes": 'quote " backslash \\ tab \t newline \n del \x7f é 中 😀',
                                  "source": "a\x01b"})
    rate = ExchangeRate(currency="CNY", usd_per_unit=0.14, observed_at=date(2026, 11, 1), source="a bank")
    back = parse_price_sheet(tomllib.loads(sheet_toml([odd], [rate])), path="round trip")
    assert back.offers == (odd,) and back.exchange_rates == (rate,)


def test_a_toml_sheet_is_sent_as_it_is_and_a_catalog_as_its_candidates(tmp_path: Path) -> None:
    assert sheet_for_boxes(EXAMPLE, [], (), tmp_path) == EXAMPLE
    folder = tmp_path / "cat" / "aws"
    folder.mkdir(parents=True)
    vms = folder / "vms.csv"
    vms.write_bytes((TESTS / "hardware" / "data" / "skypilot_aws_vms.csv").read_bytes())
    sheet, _ = load_offers(vms)
    picked = [o for o in sheet.offers if o.id in ("aws-g6e.xlarge-us-east-1a", "aws-p5.48xlarge-us-east-1b")]
    written = sheet_for_boxes(vms, picked, (), tmp_path / "out")
    assert written == tmp_path / "out" / SHEET_NAME
    assert load_price_sheet(written).offers == tuple(picked)  # what `doctor --offers` on the box reads
