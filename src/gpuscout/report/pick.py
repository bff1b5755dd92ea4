"""Rendering of `pick` rankings and `cost` bills. Pure: results in, renderables out.

At 80 columns a ranked offer takes two lines: its id (★ on the Pareto frontier) over its
provider, tier and GPUs, then the runtime, the total and its P95 (and whether it meets the SLO,
for jobs that have one); excluded offers are listed under the table, grouped by reason.
`--wide` adds the rank, the runtime band, the cost per unit, the bound and the price date, and
keeps the excluded offers in the table. Formulas of a bill are footnotes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.billing import JobCost
from gpuscout.cost.calculator import BilledCost, PlainCost
from gpuscout.cost.pick import PickResult, PickRow
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, plain, prose_column
from gpuscout.report.numbers import duration, duration_band, money, seconds, sig

CAPTION = "★ = on the time–cost Pareto frontier; P95 from a seeded spot simulation"
WIDE_CAPTION = CAPTION + "; runtime band from the efficiency factors"
UNIT_LABELS = {"usd_per_epoch": "/epoch", "usd_per_1m_train_tokens": "/1M tok", "usd_per_1m_output_tokens": "/1M out",
               "usd_per_request": "/req", "usd_per_1000_images": "/1000 img"}


def pick_screen(result: PickResult, notes: Sequence[str] = (), *, wide: bool = False) -> RenderableType:
    """The ranking, then how the offers were read (a SkyPilot import's counts)."""
    return Group(pick_table(result, wide=wide), *[Text(n, style="dim") for n in notes])


def pick_table(result: PickResult, *, wide: bool = False) -> RenderableType:
    """Offers ranked by total job cost; the excluded ones, rates used and price warnings below."""
    rows = result.rows if wide else tuple(r for r in result.rows if r.excluded is None)
    with_slo = wide or any(r.slo_met is not None for r in result.rows)
    table = Table()
    _add_columns(table, wide=wide, with_slo=with_slo)
    notes = Footnotes()  # why an offer was excluded, under the table (`wide` only)
    rank = 0
    for row in rows:
        rank += row.excluded is None
        table.add_row(*_cells(row, rank if row.excluded is None else None, notes, wide=wide, with_slo=with_slo))
    parts: list[RenderableType] = [Text(f"{result.job_name}: offers ranked by total job cost (USD)", style="bold"),
                                   table, notes.flush(), Text(WIDE_CAPTION if wide else CAPTION, style="dim")]
    if not wide:
        parts += excluded_lines(result.rows)
    if result.exchange_rates:
        parts.append(Text(rates_text(result.exchange_rates)))
    parts += [Text(f"warning: {w}", style="yellow") for w in result.warnings]
    return Group(*parts)


def _add_columns(table: Table, *, wide: bool, with_slo: bool) -> None:
    if wide:
        number_column(table, "#")
    prose_column(table, "offer")  # gives way first: its id is cut with '…' rather than wrapped
    number_column(table, "runtime (band)" if wide else "runtime")
    for header in ("total", "P95"):
        number_column(table, header)
    if wide:
        label_column(table, "per unit")
    if with_slo:
        label_column(table, "SLO")
    if wide:
        label_column(table, "bound")
        label_column(table, "observed")


def _cells(row: PickRow, rank: int | None, notes: Footnotes, *, wide: bool, with_slo: bool) -> list[str | Text]:
    offer = Text(f"{'★ ' if row.pareto else ''}{row.offer_id}\n", no_wrap=True, overflow="ellipsis")
    offer.append(f"{row.provider} {row.tier}, {_gpus(row)}", style="dim")  # two lines, each cut, never wrapped
    if row.excluded is not None:  # only `wide` keeps excluded offers in the table
        excluded = Text(f"excluded {notes.ref(row.excluded)}", style="red")
        return ["-", offer, excluded, money(row.total_usd), "", "", "", row.bound or "", str(row.observed_at)]
    cells: list[str | Text] = [offer, _runtime(row, wide=wide), money(row.total_usd), money(row.total_p95_usd)]
    if wide:
        cells = [str(rank), *cells, plain(unit_costs(row.unit_costs_usd))]
    if with_slo:
        cells.append("-" if row.slo_met is None else ("yes" if row.slo_met else "no"))
    if wide:
        cells += [row.bound or "", f"{row.observed_at}" + (" (stale)" if row.stale else "")]
    return cells


def _gpus(row: PickRow) -> str:
    used = f"{row.gpus_needed}/" if row.gpus_needed is not None and row.excluded is None else ""
    return f"{used}{row.gpu_count}× {row.gpu_sku}"


def _runtime(row: PickRow, *, wide: bool) -> str:
    if row.runtime_s is None:
        return "-"
    if not wide or row.runtime_low_s is None or row.runtime_high_s is None:
        return duration(row.runtime_s)
    return f"{duration(row.runtime_s)} ({duration_band(row.runtime_low_s, row.runtime_high_s)})"


def unit_costs(costs: dict[str, float]) -> str:
    """'/epoch $7.54; /1M tok $0.15': the job's cost per unit of work (the whole job's is the total)."""
    return "; ".join(f"{UNIT_LABELS.get(k, k)} {money(v)}" for k, v in costs.items() if k != "usd_per_job")


def excluded_lines(rows: Sequence[PickRow]) -> list[RenderableType]:
    """The offers left out, one line per reason: 'excluded, does not fit in 1 × L40S 48GB: a, b'."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        if row.excluded is not None:
            by_reason.setdefault(row.excluded, []).append(row.offer_id)
    return [Text(f"excluded, {reason}: {', '.join(ids)}", style="red") for reason, ids in by_reason.items()]


def rates_text(rates: Sequence[ExchangeRate]) -> str:
    return "Exchange rates used: " + ", ".join(
        f"1 {r.currency} = {sig(r.usd_per_unit)} USD ({r.source}, {r.observed_at})" for r in rates)


def bill_table(cost: JobCost, title: str) -> RenderableType:
    """One line per cost item with its amount; each formula is a footnote under the table."""
    notes = Footnotes()
    table = Table(title=title)
    prose_column(table, "line")
    number_column(table, cost.currency)
    label_column(table, "")
    for line in cost.lines:
        table.add_row(line.name, money(line.amount, cost.currency), notes.ref(f"{line.name}: {line.formula}"))
    table.add_row(Text("total (expected)", style="bold"), Text(money(cost.total, cost.currency), style="bold"), "")
    if cost.total_p95 != cost.total:
        table.add_row("total (P95, spot simulation)", money(cost.total_p95, cost.currency),
                      notes.ref(f"P95: {sig(cost.interruptions)} expected interruptions"))
    return Group(table, notes.flush())


def calculator_table(plain_cost: PlainCost, billed: BilledCost | None) -> RenderableType:
    """The plain product beside the bill under the rules given; how each was reckoned, as footnotes."""
    notes = Footnotes()
    table = Table(title="Job cost (USD)")
    prose_column(table, "")
    number_column(table, f"plain product {notes.ref(_plain_formula(plain_cost))}")
    if billed is not None:
        number_column(table, f"as billed {notes.ref(_billed_formula(billed))}")
    rows = [
        ("compute", plain_cost.compute_usd, billed.compute_usd if billed else None),
        ("storage", plain_cost.storage_usd, plain_cost.storage_usd),
        ("transfer", plain_cost.transfer_usd, plain_cost.transfer_usd),
        ("retries", plain_cost.retry_usd, plain_cost.retry_usd),
        ("total", plain_cost.total_usd, billed.total_usd if billed else None),
    ]
    for name, a, b in rows:
        table.add_row(name, money(a), *([money(b)] if billed is not None else []))
    return Group(table, notes.flush())


def _plain_formula(p: PlainCost) -> str:
    gpus = f"{p.gpus} GPU{'s' if p.gpus != 1 else ''}"
    return f"plain: {money(p.usd_per_gpu_hour)}/GPU-h × {gpus} × {sig(p.hours)} h + storage + transfer + retries"


def _billed_formula(b: BilledCost) -> str:
    return (f"as billed: {sig(b.billed_hours)} h billed (startup {seconds(b.startup_s)}, idle tail "
            f"{seconds(b.idle_tail_s)}, minimum {seconds(b.min_billed_s)}, increment {seconds(b.increment_s)}): "
            f"{money(b.difference_usd)} more")
