"""`gpuscout compare`: fairness check, side by side with CIs, cost from measured throughput, verdict."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from rich.console import RenderableType

from gpuscout.cli.pick_view import merge_rates
from gpuscout.cost.measured import MeasuredCost, cost_point, match_offers, price_measured
from gpuscout.cost.pick import price_warnings
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate, parse_fx
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.report.compare_render import render_json, render_markdown, render_table
from gpuscout.results.compare import compare_results
from gpuscout.results.schema import BenchResult
from gpuscout.results.store import load_result
from gpuscout.results.verdict import decide

FORMATS = ("table", "md", "json")


def run_compare(results: list[Path], *, offers_path: Path | None, offer_ids: list[str], fmt: str,
                allow_diff: bool, fx: list[str], today: date | None = None) -> str | RenderableType:
    if fmt not in FORMATS:
        raise SpecError(f"Unknown format {fmt!r}.", "compare writes a rich table, Markdown or JSON.",
                        "Use --format table, md or json.")
    if offer_ids and offers_path is None:
        raise SpecError("--offer was given without --offers.", "Offer ids refer to a price sheet.",
                        "Add --offers prices.toml (examples/prices.example.toml shows the format).")
    loaded = [load_result(p) for p in results]
    comparison = compare_results(loaded, allow_diff=allow_diff)
    day = today or date.today()
    costs, notes, rates = price_all(loaded, offers_path, offer_ids, fx, day) if offers_path else ([], [], ())
    verdict = decide(comparison, [cost_point(c) for c in costs] or None)
    render = {"table": render_table, "md": render_markdown, "json": render_json}[fmt]
    return render(comparison, verdict, costs, notes=notes, rates=rates)


def price_all(results: list[BenchResult], offers_path: Path, offer_ids: list[str], fx: list[str],
              today: date) -> tuple[list[MeasuredCost], list[str], tuple[ExchangeRate, ...]]:
    sheet = load_price_sheet(offers_path)
    rates = merge_rates(sheet.exchange_rates, [parse_fx(text, today) for text in fx])
    offers = match_offers(results, sheet.offers, offer_ids)
    costs = [price_measured(r, o, rates=rates, today=today) for r, o in zip(results, offers, strict=True)]
    used = {c.currency for c in costs}
    return costs, list(price_warnings(offers, today)), tuple(r for r in rates if r.currency in used)
