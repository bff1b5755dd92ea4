"""`gpuscout cost`: the plain calculator, or one offer's bill for a runtime the user knows."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType

from gpuscout.cost.billing import price_job
from gpuscout.cost.calculator import billed_cost, plain_cost
from gpuscout.errors import SpecError
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.report.cost_tables import bill_table, calculator_table


def run_cost(*, usd_per_gpu_hour: float | None, gpus: int, hours: float | None, storage_usd: float,
             transfer_usd: float, retry_usd: float, billing: dict[str, float], offers_path: Path | None,
             offer_id: str | None) -> tuple[dict[str, Any], RenderableType]:
    run_hours = _positive("hours", hours)
    if offers_path is not None or offer_id is not None:
        offer = find_offer(offers_path, offer_id)
        bill = price_job(offer, run_hours * 3600)
        return {"offer": offer.model_dump(mode="json"), "bill": bill.model_dump(), "total": bill.total,
                "currency": bill.currency}, bill_table(bill, f"{offer.id}: {run_hours:g} h of work, as billed")
    price = _positive("usd-per-gpu-hour", usd_per_gpu_hour)
    _positive("gpus", gpus)
    for name, value in (("storage-usd", storage_usd), ("transfer-usd", transfer_usd), ("retry-usd", retry_usd)):
        if value < 0:
            raise SpecError(f"--{name} {value} is negative.", "Costs are amounts of money spent.",
                            f"Pass --{name} ≥ 0.")
    plain = plain_cost(price, gpus, run_hours, storage_usd=storage_usd, transfer_usd=transfer_usd,
                       retry_usd=retry_usd)
    billed = billed_cost(plain, **billing) if any(billing.values()) else None
    payload: dict[str, Any] = {**plain.model_dump(), "billed": billed.model_dump() if billed else None}
    return payload, Group(calculator_table(plain, billed))


def find_offer(offers_path: Path | None, offer_id: str | None) -> Offer:
    if offers_path is None or offer_id is None:
        raise SpecError("--offers and --offer go together.", "An offer is picked by its id from a price sheet.",
                        "Pass both, e.g. --offers examples/prices.example.toml --offer <id>.")
    sheet = load_price_sheet(offers_path)
    for offer in sheet.offers:
        if offer.id == offer_id:
            return offer
    close = difflib.get_close_matches(offer_id, [o.id for o in sheet.offers], n=3)
    raise SpecError(f"No offer {offer_id!r} in {offers_path}.",
                    "Offers are picked by the `id` in the price sheet.",
                    (f"Did you mean {', '.join(close)}? " if close else "") + "Ids: " +
                    ", ".join(o.id for o in sheet.offers))


def _positive(flag: str, value: float | None) -> float:
    if value is None or value <= 0:
        raise SpecError(f"--{flag} is {'missing' if value is None else value}.",
                        f"The calculator needs a positive {flag}.", f"Pass --{flag} with a value above zero.")
    return value
