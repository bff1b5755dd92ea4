"""Every field a price sheet accepts is documented in docs/cost.md §8 and shown in the example sheet.

A field that exists in the models but nowhere a user looks is a field nobody can use; one that is
documented but no longer exists misleads. Both directions are checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import EgressTier, Offer, StorageItem

ROOT = Path(__file__).resolve().parents[2]
MODELS: dict[str, type[BaseModel]] = {"8.2": Offer, "8.3": StorageItem, "8.4": EgressTier, "8.5": ExchangeRate}


def _section(number: str) -> str:
    text = (ROOT / "docs" / "cost.md").read_text()
    start = text.index(f"### {number} ")
    end = text.find("\n### ", start + 1)
    return text[start:end if end != -1 else None]


def _table_fields(section: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_0-9]+)` \|", section, flags=re.MULTILINE))


@pytest.mark.parametrize("number", list(MODELS))
def test_each_sheet_table_documents_exactly_the_models_fields(number: str) -> None:
    assert _table_fields(_section(number)) == set(MODELS[number].model_fields)


def test_the_example_sheet_shows_every_field() -> None:
    sheet = (ROOT / "examples" / "prices.example.toml").read_text()
    shown = set(re.findall(r"^[ \t]*#?[ \t]*([a-z_0-9]+)[ \t]*=", sheet, flags=re.MULTILINE))
    nested = {"storage", "egress_tiers"}  # written as [[offer.storage]] and [[offer.egress_tiers]] tables
    for model in MODELS.values():
        missing = set(model.model_fields) - shown - nested
        assert not missing, f"{model.__name__} fields not in examples/prices.example.toml: {sorted(missing)}"
    assert "[[offer.storage]]" in sheet and "[[offer.egress_tiers]]" in sheet and "[[exchange_rate]]" in sheet
