"""`gpuscout pick`: rank the offers of a price sheet by the total cost of the job."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from gpuscout.cli.estimate_view import load_job_or_default, resolve_model
from gpuscout.cost.billing import CostOptions
from gpuscout.cost.pick import pick
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate, parse_fx
from gpuscout.hardware.price_sheet import PriceSheet, load_price_sheet
from gpuscout.hardware.skypilot import describe_import, import_skypilot_catalog
from gpuscout.report.cost_tables import pick_table
from gpuscout.units import parse_duration_s


def run_pick(job_path: Path | None, offers_path: Path, *, deadline: str | None, budget: float | None,
             fx: list[str], options: CostOptions, today: date,
             cloud: str | None = None) -> tuple[dict[str, Any], RenderableType]:
    job, base_dir = load_job_or_default(job_path)
    model = resolve_model(job, base_dir)
    sheet, notes = load_offers(offers_path, cloud)
    rates = merge_rates(sheet.exchange_rates, [parse_fx(text, today) for text in fx])
    if budget is not None and budget <= 0:
        raise SpecError(f"--budget {budget} is not a positive amount.", "A budget is a USD amount above zero.",
                        "Pass the most you are willing to spend, e.g. --budget 50.")
    result = pick(job, model, sheet.offers, rates=rates, deadline_s=parse_duration_s(deadline) if deadline else None,
                  budget_usd=budget, today=today, options=options)
    payload = {"job": job.model_dump(), "pick": result.model_dump(mode="json"), "offers_notes": notes}
    return payload, Group(pick_table(result), *[Text(n, style="dim") for n in notes])


def load_offers(path: Path, cloud: str | None) -> tuple[PriceSheet, list[str]]:
    """A TOML price sheet, or a SkyPilot catalog `vms.csv` (~/.sky/catalogs/<schema>/<cloud>/vms.csv).

    A catalog's prices are dated by the file's modification time (SkyPilot refreshes the file when
    it pulls a new catalog), and its cloud is the parent folder's name unless --cloud says otherwise.
    """
    if path.suffix.lower() != ".csv":
        return load_price_sheet(path), []
    name = cloud or path.parent.name
    observed = date.fromtimestamp(path.stat().st_mtime) if path.exists() else date.today()
    imported = import_skypilot_catalog(path, cloud=name, observed_at=observed)
    note = f"SkyPilot catalog {path} ({name}, prices as of {observed}): {describe_import(imported)}"
    return PriceSheet(path=str(path), offers=imported.offers), [note]


def merge_rates(sheet: tuple[ExchangeRate, ...], given: list[ExchangeRate]) -> tuple[ExchangeRate, ...]:
    """Rates given on the command line override the sheet's for the same currency."""
    by_currency = {r.currency: r for r in sheet}
    by_currency.update({r.currency: r for r in given})
    return tuple(by_currency.values())
