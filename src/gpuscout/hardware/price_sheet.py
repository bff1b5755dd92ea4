"""Price sheets: reading a TOML sheet or a SkyPilot catalog into offers, and finding an offer by id.

A TOML sheet holds [[offer]] tables (with [[offer.storage]] and [[offer.egress_tiers]]) and
optional [[exchange_rate]] tables; every field is documented in docs/cost.md §8. A SkyPilot
`vms.csv` is imported as offers (`hardware.skypilot`). The bundled example sheet ships with the
package, so `gpuscout pick` works from any folder.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.userfile import MAX_SHEET_BYTES, printable, read_user_toml, shown


class PriceSheet(Frozen):
    """The offers read from one price sheet, plus any exchange rates it gives."""


    path: str
    offers: tuple[Offer, ...]
    exchange_rates: tuple[ExchangeRate, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> PriceSheet:
        duplicates = _duplicate_ids(self.offers)
        if duplicates:
            raise ValueError(f"duplicate offer ids: {', '.join(duplicates)}")
        return self


def _duplicate_ids(offers: Sequence[Offer]) -> list[str]:
    counts = Counter(offer.id for offer in offers)  # linear: a sheet may hold many thousands of offers
    return sorted(i for i, n in counts.items() if n > 1)


_TOP_LEVEL_KEYS = ("offer", "exchange_rate")


def load_price_sheet(path: Path) -> PriceSheet:
    """Read a TOML price sheet: [[offer]] tables (with [[offer.storage]], [[offer.egress_tiers]])
    and optional [[exchange_rate]] tables. Every problem is a SpecError that names where it is.
    `prices.example` (the name `gpuscout examples` lists) is the bundled example sheet."""
    path = sheet_path(path)
    document = read_user_toml(path, "price sheet", "Check the path; `gpuscout examples` shows where the bundled "
                              "example sheet (prices.example) is, with every field.", max_bytes=MAX_SHEET_BYTES)
    return parse_price_sheet(document, path=str(path))


def parse_price_sheet(document: Mapping[str, Any], *, path: str = "price sheet") -> PriceSheet:
    """Validate a price sheet already read into a dict (see `load_price_sheet`)."""
    unknown = [key for key in document if key not in _TOP_LEVEL_KEYS]
    if unknown:
        raise SpecError(
            f"{path} has unknown top-level keys: {printable(', '.join(map(str, unknown)))}.",
            "A price sheet holds only [[offer]] and [[exchange_rate]] tables.",
            "Write each offer as an [[offer]] table and each rate as an [[exchange_rate]] table.",
        )
    offer_tables = _tables(document, "offer", path)
    if not offer_tables:
        raise SpecError(
            f"{path} has no offers.",
            "A price sheet needs at least one [[offer]] table to rank.",
            "Add [[offer]] tables; see examples/prices.example.toml.",
        )
    offers = tuple(parse_offer(table, origin=f"{path}: offer #{n}") for n, table in enumerate(offer_tables, 1))
    duplicates = _duplicate_ids(offers)
    if duplicates:
        raise SpecError(
            f"{path}: offer ids must be unique; repeated: {', '.join(duplicates)}.",
            "Reports, comparisons and --offer filters refer to offers by id.",
            "Give each [[offer]] its own id, e.g. with the region or tier appended.",
        )
    rates = tuple(
        _parse_rate(table, origin=f"{path}: exchange_rate #{n}")
        for n, table in enumerate(_tables(document, "exchange_rate", path), 1)
    )
    return PriceSheet(path=path, offers=offers, exchange_rates=rates)


def _tables(document: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise SpecError(
            f"{path}: `{key}` must be an array of tables.",
            f"Each entry is written as a [[{key}]] table with key = value lines.",
            f"Write [[{key}]] (double brackets) above each entry.",
        )
    return value


def parse_offer(data: Mapping[str, Any], *, origin: str = "offer") -> Offer:
    """Validate one offer table; errors name the offer id and the field."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{origin} is not a table.", "An offer is a set of key = value pairs.", "Use [[offer]].")
    offer_id = data.get("id")
    where = f"{origin} ({shown(offer_id)})" if isinstance(offer_id, str) else origin
    try:
        return Offer.model_validate(dict(data))
    except ValidationError as exc:
        raise _spec_error(where, "offer", exc) from None


def _parse_rate(data: Mapping[str, Any], *, origin: str) -> ExchangeRate:
    try:
        return ExchangeRate.model_validate(dict(data))
    except ValidationError as exc:
        raise _spec_error(origin, "exchange rate", exc) from None


_DATED_FIELDS = frozenset({"observed_at", "source"})


def _spec_error(where: str, what: str, exc: ValidationError) -> SpecError:
    problems: list[str] = []
    missing_dating = False
    errors = exc.errors()
    for err in errors:
        loc = ".".join(printable(str(part), 40) for part in err["loc"]) or "(whole table)"
        if err["type"] == "missing" and loc in _DATED_FIELDS:
            missing_dating = True
        if len(problems) < 8:
            problems.append(f"{loc}: {printable(err['msg'])}" + _input_hint(err))
    if len(errors) > 8:
        problems.append(f"and {len(errors) - 8} more")
    fix = "Correct the named fields; examples/prices.example.toml shows every field."
    if missing_dating:
        fix = (
            "Prices are dated: add observed_at = YYYY-MM-DD (the day you read the price) and "
            'source = "URL or document" to every offer, so reports can say how old each price is.'
        )
    return SpecError(f"{where} is not a valid {what}.", "; ".join(problems), fix)


def _input_hint(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return " (unknown key; check its spelling)"
    if "input" in err and not isinstance(err["input"], (dict, list)):
        return f" (got {shown(err['input'], 60)})"
    return ""




def default_price_sheet() -> Path:
    """The bundled example sheet (dated EXAMPLE observations, docs/prices.md)."""
    return Path(str(resources.files("gpuscout").joinpath("examples", "prices.example.toml")))


def sheet_path(path: Path) -> Path:
    """The path as given, or a bundled sheet (the example sheet, a cloud's template) when given by the
    name `gpuscout examples` lists and no such file is here."""
    name = path.name.removesuffix(".toml")
    if not path.exists() and path.parent == Path(".") and name.startswith("prices."):
        bundled = default_price_sheet().with_name(f"{name}.toml")
        if bundled.is_file():
            return bundled
    return path


def load_offers(path: Path, *, cloud: str | None = None) -> tuple[PriceSheet, list[str]]:
    """A TOML price sheet, or a SkyPilot catalog `vms.csv` (~/.sky/catalogs/<schema>/<cloud>/vms.csv),
    and notes on how it was read.

    A catalog's prices are dated by the file's modification time (SkyPilot refreshes the file when
    it pulls a new catalog), and its cloud is the parent folder's name unless `cloud` says otherwise.
    """
    if path.suffix.lower() != ".csv":
        return load_price_sheet(path), []
    from gpuscout.hardware.skypilot import describe_import, import_skypilot_catalog

    name = cloud or path.parent.name
    observed = date.fromtimestamp(path.stat().st_mtime) if path.exists() else date.today()
    imported = import_skypilot_catalog(path, cloud=name, observed_at=observed)
    note = f"SkyPilot catalog {path} ({name}, prices as of {observed}): {describe_import(imported)}"
    return PriceSheet(path=str(path), offers=imported.offers), [note]


def load_sheets(paths: Sequence[Path], *, cloud: str | None = None) -> tuple[PriceSheet, list[str], dict[str, str]]:
    """Several sheets (TOML or SkyPilot vms.csv, `load_offers` each) read as one, with notes on how, and the
    sheet each offer that kept its own id came from (commands that take one sheet name it).

    An id already taken by an earlier sheet is prefixed with its own sheet's name ("cny-quotes:a100-1"),
    and the note says so; offers that are the same rental in two sheets (provider, GPU, count, region,
    tier and price alike) are both kept and named, so the reader can drop one.
    """
    if len(paths) == 1:
        only, said = load_offers(paths[0], cloud=cloud)
        return only, said, {o.id: str(paths[0]) for o in only.offers}
    offers: list[Offer] = []
    origins: dict[str, str] = {}
    rates: list[ExchangeRate] = []
    notes: list[str] = []
    taken: set[str] = set()
    first_seen: dict[tuple[object, ...], tuple[str, str]] = {}
    duplicates: list[str] = []
    for path in paths:
        sheet, read_notes = load_offers(path, cloud=cloud)
        notes += read_notes
        rates += sheet.exchange_rates
        prefix = re.sub(r"[^A-Za-z0-9._+-]+", "-", Path(sheet.path).stem).strip("-.") or "sheet"
        renamed = 0
        for offer in sheet.offers:
            if offer.id in taken:
                offer = offer.model_copy(update={"id": _free_id(f"{prefix}:{offer.id}", taken)})
                renamed += 1
            else:
                origins[offer.id] = str(path)
            taken.add(offer.id)
            offers.append(offer)
            key = (offer.provider.casefold(), offer.gpu, offer.gpu_count, offer.region.casefold(), offer.tier,
                   offer.price, offer.price_basis, offer.currency)
            if key in first_seen:
                other_id, other_path = first_seen[key]
                duplicates.append(f"{other_id} ({other_path}) = {offer.id} ({sheet.path})")
            else:
                first_seen[key] = (offer.id, sheet.path)
        if renamed:
            notes.append(f"{renamed} offer id(s) of {sheet.path} were already taken by an earlier sheet: "
                         f"they are ranked as {prefix}:ID")
    if duplicates:
        shown = "; ".join(duplicates[:5]) + (f"; and {len(duplicates) - 5} more" if len(duplicates) > 5 else "")
        notes.append(f"duplicate offers in two sheets (same provider, GPU, count, region, tier and price): {shown}")
    joined = " + ".join(str(p) for p in paths)
    return PriceSheet(path=joined, offers=tuple(offers), exchange_rates=tuple(rates)), notes, origins


def _free_id(wanted: str, taken: set[str]) -> str:
    wanted = wanted[:250]
    candidate, n = wanted, 2
    while candidate in taken:
        candidate, n = f"{wanted}.{n}", n + 1
    return candidate


def find_offer(sheet: PriceSheet, offer_id: str) -> Offer:
    """The offer with this id; an unknown id suggests the closest ones and lists the sheet's ids."""
    for offer in sheet.offers:
        if offer.id == offer_id:
            return offer
    ids = [o.id for o in sheet.offers]
    close = difflib.get_close_matches(offer_id, ids, n=3)
    shown = ", ".join(ids[:20]) + (f" … ({len(ids)} in all)" if len(ids) > 20 else "")
    raise UnknownNameError(f"No offer {offer_id!r} in {sheet.path}.",
                           "Offers are picked by the `id` of an [[offer]] in the price sheet.",
                           (f"Did you mean {', '.join(close)}? " if close else "") + f"Ids: {shown}.")


def where_rented(region: str | None, billing: str | None, offers: Path | None,
                 offer: str | None) -> tuple[str | None, str | None]:
    """Region and billing type as the user gave them, else from the offer the machine was rented under.

    Both are fixed variables of a bench or load result (docs/measurement.md §1.1).
    """
    if offer is None:
        return region, billing
    if offers is None:
        raise SpecError("--offer needs --offers.", "The offer id is looked up in a price sheet.",
                        "Pass --offers PRICES.toml --offer ID, or --region and --billing.")
    rented = find_offer(load_price_sheet(offers), offer)
    return region or rented.region or None, billing or rented.tier
