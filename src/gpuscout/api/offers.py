"""`offers pull` and `offers list`: today's catalog offers written as a dated price sheet, and what a sheet holds.

A pull is the only step that fetches; `pick` reads the sheet it wrote (or several) and never fetches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError

if TYPE_CHECKING:
    from gpuscout.hardware.offers import Offer
    from gpuscout.hardware.pull import Pull


@dataclass(frozen=True)
class PullReport:
    pull: Pull
    output: Path


@dataclass(frozen=True)
class OffersList:
    sheet: str
    offers: tuple[Offer, ...]  # the offers shown, cheapest $/h first
    total: int  # offers in the sheet before --gpu and --max-price
    today: date
    notes: tuple[str, ...] = ()


def pull_offers(output: str | Path, *, source: str = "gpuhunt", providers: Sequence[str] = (),
                gpus: Sequence[str] = (), spot: bool | None = None,
                command: str = "gpuscout offers pull") -> PullReport:
    """Fetch today's offers from `source` ("gpuhunt" or "skypilot"), per provider, and write them to `output`
    as a price sheet. A provider whose fetch fails is named and the others kept; nothing pulled is an error
    (no sheet is written)."""
    from gpuscout.hardware.pull import SOURCES, pull_sheet, pull_skypilot
    from gpuscout.outfile import check_output_path, write_atomic

    if source not in SOURCES:
        raise InputError("{source} {given!r} is not a catalog source.", "Offers are pulled from {known}.",
                         "Pass {source} gpuhunt or {source} skypilot.", given=source, known=" or ".join(SOURCES))
    out = check_output_path(Path(output), "price sheet")
    if source == "gpuhunt":
        from gpuscout.hardware.gpuhunt import pull_gpuhunt

        pull = pull_gpuhunt(providers, gpus, spot)
    else:
        pull = pull_skypilot(providers, gpus, spot)
    if not pull.offers:
        failed = "; ".join(f"{p.provider}: {p.error}" for p in pull.failed)
        raise InputError("No offers were pulled from {source_name}{failed}.",
                         "Every provider asked for failed, or none had an offer of the GPUs and tier asked for.",
                         "Check the network (or the catalog folder), and the {provider} and {gpu} named.",
                         source_name=source, failed=f" ({failed})" if failed else "")
    write_atomic(out, pull_sheet(pull, command), what="price sheet")
    return PullReport(pull=pull, output=out)


def list_offers(sheet: str | Path | None = None, *, gpu: Sequence[str] = (), max_price: float | None = None,
                today: date | None = None) -> OffersList:
    """The offers of a price sheet (the bundled example sheet by default), by currency, cheapest instance $/h first;
    `gpu` keeps those GPUs, `max_price` the offers at or under that $/h (in each offer's own currency)."""
    from gpuscout.hardware.price_sheet import default_price_sheet, load_offers
    from gpuscout.hardware.pull import wanted_gpu_skus

    if max_price is not None and not (math.isfinite(max_price) and max_price > 0):
        raise InputError("{max_price} {given} is not a positive price.", "It is the most an instance-hour may cost.",
                         "Pass a price per hour, e.g. {max_price} 3.5.", given=max_price)
    path = Path(sheet) if sheet is not None else default_price_sheet()
    loaded, notes = load_offers(path)
    skus = wanted_gpu_skus(gpu)
    from gpuscout.hardware.offers import instance_price_per_hour, unavailable

    shown = [o for o in loaded.offers
             if (not skus or o.gpu in skus) and (max_price is None or instance_price_per_hour(o) <= max_price)]
    shown.sort(key=lambda o: (unavailable(o), o.currency, instance_price_per_hour(o), o.id))  # never CNY against USD
    return OffersList(sheet=str(path), offers=tuple(shown), total=len(loaded.offers), today=today or date.today(),
                      notes=tuple(notes))
