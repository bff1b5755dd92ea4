"""Each provider's billing rules, read from `billing_rules.toml`: what decides a bill besides the hourly price.

Catalogs (SkyPilot's `vms.csv`, gpuhunt) carry $/h and the machine, never the billing increment and
minimum, when billing starts, what the disk costs and whether it bills while stopped, or egress. Those
come from this table, one `[provider.<id>]` per provider with its public source and the day it was read;
`assumed = true` marks an entry for which no public statement was found (its `source` says what was
assumed). A provider missing from the table is priced per second from "running" with no minimum, and
the offer says so (`UNKNOWN_RULES_NOTE`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import check_currency
from gpuscout.hardware.offers import BillingStart
from gpuscout.userfile import parse_user_toml, printable

UNKNOWN_RULES_NOTE = "billing rules unknown: per-second assumed"

_FILE = "billing_rules.toml"


class BillingRules(Frozen):
    """One provider's billing terms, with the Offer fields of the same names and meaning."""

    model_config = ConfigDict(allow_inf_nan=False)

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    currency: str = "USD"
    billing_increment_s: float = Field(default=1.0, gt=0)
    min_billed_s: float = Field(default=0.0, ge=0)
    billing_starts: BillingStart = "running"
    storage_price_per_gb_month: float | None = Field(default=None, ge=0)
    storage_billed_while_stopped: bool | None = None
    egress_free_gb: float | None = Field(default=None, ge=0)
    egress_price_per_gb: float | None = Field(default=None, ge=0)
    source: str = Field(min_length=1)
    checked: date
    assumed: bool = False

    @field_validator("currency")
    @classmethod
    def _iso_currency(cls, value: str) -> str:
        return check_currency(value)

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("source is blank; say which page states these terms and when it was read")
        return value

    def offer_fields(self, currency: str = "USD") -> dict[str, Any]:
        """The Offer fields these rules set for an offer priced in `currency` (storage needs a disk size, so it
        is `storage_item`'s). Egress prices are in the rules' currency: an offer in another leaves them out."""
        fields: dict[str, Any] = {"billing_increment_s": self.billing_increment_s, "min_billed_s": self.min_billed_s,
                                  "billing_starts": self.billing_starts}
        if currency != self.currency:
            return fields
        if self.egress_free_gb is not None:
            fields["egress_free_gb"] = self.egress_free_gb
        if self.egress_price_per_gb is not None:
            fields["egress_tiers"] = ({"price_per_gb": self.egress_price_per_gb},)
        return fields

    def storage_item(self, size_gb: float, currency: str = "USD", name: str = "boot disk") -> dict[str, Any] | None:
        """The disk of `size_gb` GB billed per GB-month under these rules for an offer in `currency`, or None
        when the table gives no storage price in that currency."""
        if self.storage_price_per_gb_month is None or size_gb <= 0 or currency != self.currency:
            return None
        item: dict[str, Any] = {"name": name, "size_gb": size_gb, "price_per_gb_month": self.storage_price_per_gb_month}
        if self.storage_billed_while_stopped is False:
            item["stopped_price_per_gb_month"] = 0.0
        return item

    def terms(self) -> str:
        """The rules in a few words for a sheet's notes: "per 1 s, min 60 s, from running"."""
        increment = f"{self.billing_increment_s:g} s"
        minimum = f", min {self.min_billed_s:g} s" if self.min_billed_s else ""
        assumed = " (assumed)" if self.assumed else ""
        return f"billed per {increment}{minimum}, from {self.billing_starts}{assumed}"


class RulesTable(Frozen):
    """Every provider's rules, found by id, display name or alias, in any case."""

    path: str
    providers: tuple[BillingRules, ...]

    _index: dict[str, BillingRules] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        for rules in self.providers:
            for name in (rules.id, rules.name, *rules.aliases):
                self._index.setdefault(_key(name), rules)

    def find(self, provider: str) -> BillingRules | None:
        """The rules of a provider named by id ("lambda"), display name ("Lambda") or alias ("lambdalabs")."""
        return self._index.get(_key(provider))


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def default_rules_path() -> Path:
    """The table shipped with gpuscout."""
    return Path(str(resources.files("gpuscout.hardware").joinpath(_FILE)))


@functools.cache
def billing_rules(path: Path | None = None) -> RulesTable:
    """The rules table (the shipped one by default); every problem is a SpecError naming the provider and field."""
    where = path or default_rules_path()
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"The billing rules table {where} cannot be read: {exc.strerror or exc}.",
                        "Pulled offers take each provider's billing rules from it.",
                        "Reinstall gpuscout, or pass the path of a readable table.") from None
    document = parse_user_toml(text, str(where), "Correct the TOML syntax at that line.")
    return parse_rules(document, path=str(where))


def parse_rules(document: Mapping[str, Any], *, path: str = "billing rules") -> RulesTable:
    """Validate a rules table already read into a dict."""
    unknown = [key for key in document if key != "provider"]
    table = document.get("provider", {})
    if unknown or not isinstance(table, Mapping):
        raise SpecError(f"{path} is not a billing rules table.",
                        f"It holds only [provider.<id>] tables (found {printable(', '.join(map(str, unknown)))}).",
                        "Write each provider as [provider.<id>] with its key = value lines.")
    rules = []
    for provider_id, fields in table.items():
        if not isinstance(fields, Mapping):
            raise SpecError(f"{path}: provider.{printable(str(provider_id))} is not a table.",
                            "Each provider's terms are key = value lines.", "Write [provider.<id>] above them.")
        try:
            rules.append(BillingRules.model_validate({"id": provider_id, **fields}))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(whole table)"
            raise SpecError(f"{path}: provider.{printable(str(provider_id))} is not valid: {where}: "
                            f"{printable(first['msg'])}.", "Every provider's terms follow the table's documented "
                            "fields (docs/prices.md).", "Correct the named field.") from None
    return RulesTable(path=path, providers=tuple(rules))


def rules_for(provider: str, table: RulesTable | None = None) -> BillingRules | None:
    """The provider's rules from the shipped table (or `table`), None when it is not in it."""
    return (table or billing_rules()).find(provider)
