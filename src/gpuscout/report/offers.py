"""`offers list` and `offers pull`: what a price sheet holds, and what a pull fetched, at 80 columns.

One row per offer: GPU, count, instance $/h in the offer's own currency, provider, region, the price's
age, its billing rules in a few words ("1 s, min 60 s") and what the source said of stock. Ids, sources
and notes are in `--json`; the table keeps to what a reader compares.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.hardware.billing_rules import UNKNOWN_RULES_NOTE
from gpuscout.hardware.offers import STALE_AFTER_DAYS, Offer, instance_price_per_hour, is_stale, unavailable
from gpuscout.hardware.pull import Pull
from gpuscout.report.layout import label_column, number_column
from gpuscout.report.numbers import age, money

_CUT_WIDTH = 9  # 'asia-northeast1' is cut with '…' rather than pushing the row past 80 columns


def billing_words(offer: Offer) -> str:
    """'1 s, min 60 s', '60 s, healthy' (billing starts at a passed health check), or '1 s?' where the
    provider's rules are not in the table (per-second assumed)."""
    unknown = UNKNOWN_RULES_NOTE in offer.notes
    words = f"{offer.billing_increment_s:g} s" + ("?" if unknown else "")
    if offer.min_billed_s:
        words += f", min {offer.min_billed_s:g} s"
    if offer.billing_starts != "running":
        words += f", {offer.billing_starts}"
    return words


def stock_words(offer: Offer) -> str:
    """'spot', 'placeholder', 'unavailable', '3 free', 'available': the tier when not on-demand, a price nobody
    observed, and what the source said of stock."""
    if unavailable(offer):
        stock = "unavailable"
    elif offer.stock is not None:
        stock = f"{offer.stock} free"
    else:
        stock = "available" if offer.available else ""
    tier = "" if offer.tier == "on-demand" else offer.tier
    return ", ".join(word for word in (tier, "placeholder" if offer.placeholder else "", stock) if word)


def offers_table(offers: tuple[Offer, ...], today: date) -> Table:
    """Eight columns in 80: the provider and region are cut with '…' past 9 characters (`--json` has them whole)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=0)  # the box's space apart
    label_column(table, "GPU")
    number_column(table, "n")
    number_column(table, "per hour")
    for header in ("provider", "region"):
        table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=_CUT_WIDTH)
    number_column(table, "age")
    label_column(table, "billed per")
    table.add_column("notes", overflow="fold")
    for offer in offers:
        stale = is_stale(offer, today)
        table.add_row(offer.gpu, str(offer.gpu_count), money(instance_price_per_hour(offer), offer.currency),
                      Text(offer.provider), Text(offer.region or "-"),
                      Text(age((today - offer.observed_at).days), style="yellow" if stale else ""),
                      billing_words(offer), Text(stock_words(offer), style="yellow" if unavailable(offer) else ""))
    return table


def offers_list_screen(sheet: str, offers: tuple[Offer, ...], total: int, today: date,
                       notes: tuple[str, ...] = ()) -> RenderableType:
    """The offers of a sheet (already filtered and ordered), with what the marks mean under them."""
    title = Text(f"{sheet}: {len(offers):,} of {total:,} offers", style="bold")
    if not offers:
        return Group(title, Text("No offer matches --gpu / --max-price.", style="yellow"))
    lines = [Text(n, style="dim") for n in notes]
    legend = ["per hour: the whole instance, in the offer's currency; age: of the price",
              "billed per: increment, minimum, and when billing starts if not at running; ? = the provider's "
              "billing rules are unknown: per-second assumed"]
    if any(is_stale(o, today) for o in offers):
        legend.append(f"age over {STALE_AFTER_DAYS} d: a stale price, check it before you rent")
    if any(o.placeholder for o in offers):
        legend.append("placeholder: a price nobody observed, ranked only with pick --include-placeholders")
    if any(unavailable(o) for o in offers):
        legend.append("unavailable: the source lists it but says none can be rented now (pick ranks it last)")
    return Group(title, offers_table(offers, today), *[Text(line, style="dim") for line in legend], *lines)


def offers_list_payload(sheet: str, offers: tuple[Offer, ...], total: int, today: date,
                        notes: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"sheet": sheet, "today": today.isoformat(), "total": total, "notes": list(notes),
            "offers": [o.model_dump(mode="json", exclude_defaults=True) for o in offers]}


def pull_screen(pull: Pull, output: str) -> RenderableType:
    """What a pull fetched, per provider, and where the sheet went."""
    parts: list[RenderableType] = [Text(f"{len(pull.offers):,} offers from {pull.source} written to {output}",
                                        style="bold")]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    label_column(table, "provider")
    number_column(table, "offers")
    table.add_column("catalog, or why it failed", overflow="fold")
    for part in pull.providers:
        said = Text(f"FAILED: {part.error}", style="red") if part.error is not None else Text(part.version)
        table.add_row(part.provider, "-" if part.error is not None else f"{part.offers:,}", said)
    parts.append(table)
    if pull.unknown_gpus:
        names = ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in sorted(pull.unknown_gpus.items()))
        parts.append(Text(f"skipped {sum(pull.unknown_gpus.values()):,} rows whose GPU gpuscout's catalog does not "
                          f"know: {names}", style="dim"))
    for reason, n in sorted(pull.skipped.items()):
        parts.append(Text(f"skipped {n:,} rows: {reason}", style="dim"))
    parts += [Text(n, style="dim") for n in pull.notes]
    parts.append(Text(f"gpuscout offers list {output} shows them; gpuscout pick --offers {output} ranks them.",
                      style="dim"))
    return Group(*parts)


def pull_payload(pull: Pull, output: str) -> dict[str, Any]:
    return {"output": output, "source": pull.source, "fetched_at": pull.fetched_at.isoformat(),
            "offers": len(pull.offers),
            "providers": [p.model_dump(mode="json") for p in pull.providers],
            "unknown_gpus": pull.unknown_gpus, "skipped": pull.skipped, "notes": list(pull.notes)}
