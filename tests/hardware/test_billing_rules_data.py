"""The providers' billing-rules table: every entry parses, is sourced and dated, and says what it assumes.

Reads the shipped TOML directly (the reader lives in hardware/billing_rules.py); each entry's billing
fields are also fed through the real Offer model, so a value the cost model would reject fails here.
"""

from __future__ import annotations

import re
import tomllib
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gpuscout.hardware.offers import Offer

TABLE = resources.files("gpuscout.hardware") / "billing_rules.toml"
REQUIRED = {"name", "currency", "billing_increment_s", "min_billed_s", "billing_starts", "source", "checked", "assumed"}
OPTIONAL = {
    "aliases",
    "storage_price_per_gb_month",
    "storage_billed_while_stopped",
    "egress_free_gb",
    "egress_price_per_gb",
}
# Providers the brief names: gpuhunt's provider modules, SkyPilot's priced clouds, and the three
# Chinese clouds neither library lists.
GPUHUNT = {
    "aws", "azure", "gcp", "lambdalabs", "runpod", "vastai", "verda", "datacrunch", "nebius", "oci",
    "cloudrift", "crusoe", "cudo", "digitalocean", "hotaisle", "jarvislabs", "seeweb", "vultr",
    "tensordock", "lium", "daytona",
}  # fmt: skip
SKYPILOT = {
    "aws", "azure", "gcp", "lambda", "runpod", "vast", "verda", "nebius", "oci", "cloudrift", "cudo",
    "do", "seeweb", "lium", "daytona", "coreweave", "fluidstack", "hyperbolic", "ibm", "latitude",
    "mithril", "modal", "novita", "paperspace", "ppio", "primeintellect", "quantacloud", "scp",
    "shadeform", "spheron", "yotta",
}  # fmt: skip
CHINESE = {"autodl", "aliyun", "tencentcloud"}
URL_OR_CODE = re.compile(r"https?://|\b[a-z0-9.-]+\.(?:com|io|ai|co|net|org|sh)\b|\bP\d{1,2}\b|docs/\w+\.md")


def _table() -> dict[str, dict[str, Any]]:
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    providers = data["provider"]
    assert isinstance(providers, dict)
    return providers


PROVIDERS = _table()


def _ids_and_aliases() -> dict[str, str]:
    """Every lower-case name a provider is known by -> its table id."""
    names: dict[str, str] = {}
    for pid, entry in PROVIDERS.items():
        for name in (pid, *entry.get("aliases", [])):
            key = name.lower()
            assert key not in names, f"{key!r} names both {names[key]!r} and {pid!r}"
            names[key] = pid
    return names


def test_the_table_has_only_provider_tables() -> None:
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    assert set(data) == {"provider"}
    assert len(PROVIDERS) >= 40


@pytest.mark.parametrize("pid", sorted(PROVIDERS))
def test_entry_parses_with_known_fields_and_valid_values(pid: str) -> None:
    entry = PROVIDERS[pid]
    assert re.fullmatch(r"[a-z0-9]+", pid), "ids are the lower-case ids gpuhunt and SkyPilot use"
    assert set(entry) >= REQUIRED, f"missing {sorted(REQUIRED - set(entry))}"
    assert set(entry) <= REQUIRED | OPTIONAL, f"unknown fields {sorted(set(entry) - REQUIRED - OPTIONAL)}"
    assert re.fullmatch(r"[A-Z]{3}", entry["currency"])
    assert isinstance(entry["assumed"], bool)
    assert isinstance(entry.get("storage_billed_while_stopped", False), bool)
    for key in ("storage_price_per_gb_month", "egress_free_gb", "egress_price_per_gb"):
        if key in entry:
            assert isinstance(entry[key], int | float) and not isinstance(entry[key], bool)
            assert entry[key] >= 0
    # The billing fields go through the real Offer model: a value it rejects fails here.
    Offer(
        id=f"{pid}-probe", provider=entry["name"], gpu="h100-sxm5-80gb", gpu_count=1, price=1.0,
        price_basis="instance", currency=entry["currency"], observed_at=entry["checked"], source="probe",
        billing_increment_s=entry["billing_increment_s"], min_billed_s=entry["min_billed_s"],
        billing_starts=entry["billing_starts"],
    )  # fmt: skip


@pytest.mark.parametrize("pid", sorted(PROVIDERS))
def test_entry_has_a_source_and_a_date(pid: str) -> None:
    entry = PROVIDERS[pid]
    assert isinstance(entry["checked"], date), "checked is a TOML date (2026-12-03), not a string"
    assert date(2026, 1, 1) <= entry["checked"] <= date.today()
    source = entry["source"]
    assert isinstance(source, str) and len(source) >= 40
    if not entry["assumed"]:
        # A sourced entry names where its facts come from and when they were read or published.
        assert URL_OR_CODE.search(source), f"{pid}: a sourced entry cites a page, repository or P-code"
        assert re.search(r"\b20\d\d(-\d\d(-\d\d)?)?\b|undated", source), f"{pid}: say when the source was read"


@pytest.mark.parametrize("pid", sorted(PROVIDERS))
def test_assumed_entries_say_what_is_assumed(pid: str) -> None:
    entry = PROVIDERS[pid]
    if entry["assumed"]:
        assert "ASSUMED:" in entry["source"], f"{pid}: an assumed entry says 'ASSUMED:' and what"
        assert "billing_increment_s" in entry["source"] or "per-second" in entry["source"]


def test_every_provider_the_sources_name_is_listed() -> None:
    names = _ids_and_aliases()
    missing = sorted((GPUHUNT | SKYPILOT | CHINESE) - set(names))
    assert not missing, f"providers with no billing rules: {missing}"
    # Old and new names resolve to one entry, not two with different rules.
    assert names["datacrunch"] == names["verda"] == "verda"
    assert names["lambdalabs"] == names["lambda"] == "lambda"
    assert names["vast"] == names["vastai"] == "vastai"
    assert names["do"] == "digitalocean"


def test_the_rules_gpuscout_already_documented_are_kept() -> None:
    """docs/cost.md §2.2-2.4 and the SkyPilot importer's terms: these must not drift."""
    expected = {
        "aws": (1, 60, "running"), "gcp": (1, 60, "running"), "lambda": (60, 0, "healthy"),
        "runpod": (1, 0, "running"), "vastai": (1, 0, "running"), "scaleway": (60, 0, "created"),
    }  # fmt: skip
    for pid, rule in expected.items():
        entry = PROVIDERS[pid]
        assert (entry["billing_increment_s"], entry["min_billed_s"], entry["billing_starts"]) == rule, pid
        assert entry["assumed"] is False
    assert PROVIDERS["runpod"]["egress_price_per_gb"] == 0.0
    assert PROVIDERS["lambda"]["egress_price_per_gb"] == 0.0
    assert "egress_price_per_gb" not in PROVIDERS["vastai"], "Vast egress is host-set: no table-wide price"


def test_chinese_clouds_bill_in_cny() -> None:
    for pid in CHINESE:
        assert PROVIDERS[pid]["currency"] == "CNY"


def test_the_docs_table_matches_the_data() -> None:
    """docs/prices.md §8 shows every entry once, sourced or assumed as the data says, and the count."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "prices.md").read_text(encoding="utf-8")
    section = text[text.index("## 8. ") :]
    rows = dict(re.findall(r"^\| `([a-z0-9]+)` \|.*\| (sourced|assumed) \|$", section, flags=re.MULTILINE))
    assert rows == {pid: "assumed" if e["assumed"] else "sourced" for pid, e in PROVIDERS.items()}
    sourced = sum(not e["assumed"] for e in PROVIDERS.values())
    assert f"Sourced: {sourced} of {len(PROVIDERS)}." in section
