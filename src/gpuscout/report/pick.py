"""Rendering of `pick` rankings and `cost` bills. Pure: results in, renderables out."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.billing import JobCost
from gpuscout.cost.calculator import BilledCost, PlainCost
from gpuscout.cost.pick import PickResult, PickRow
from gpuscout.report.numbers import duration as console_duration


def duration(seconds: float | None) -> str:
    return "-" if seconds is None else console_duration(seconds)


def usd(amount: float | None) -> str:
    if amount is None:
        return "-"
    return f"${amount:,.2f}" if amount >= 0.01 else f"${amount:.4f}"


def pick_screen(result: PickResult, notes: Sequence[str] = (), *, wide: bool = False) -> RenderableType:
    """The ranking, then how the offers were read (a SkyPilot import's counts)."""
    return Group(pick_table(result), *[Text(n, style="dim") for n in notes])


def pick_table(result: PickResult) -> RenderableType:
    table = Table(title=f"{result.job_name}: offers ranked by total job cost (USD)",
                  caption="★ = on the time–cost Pareto frontier; runtime band from the efficiency factors; "
                          "P95 from a seeded spot simulation")
    for col in ("#", "offer", "GPUs", "runtime (band)", "total", "P95", "per unit", "SLO", "bound", "observed"):
        table.add_column(col, overflow="fold", justify="right" if col in ("#", "total", "P95") else "left")
    rank = 0
    for row in result.rows:
        if row.excluded is None:
            rank += 1
        table.add_row(*_cells(row, rank if row.excluded is None else None))
    parts: list[RenderableType] = [table]
    if result.exchange_rates:
        parts.append(Text("Exchange rates used: " + ", ".join(
            f"1 {r.currency} = {r.usd_per_unit:g} USD ({r.source}, {r.observed_at})" for r in result.exchange_rates)))
    parts += [Text(f"warning: {w}", style="yellow") for w in result.warnings]
    return Group(*parts)


def _cells(row: PickRow, rank: int | None) -> list[str | Text]:
    name = f"{'★ ' if row.pareto else ''}{row.offer_id} ({row.provider}, {row.tier})"
    if row.excluded is not None:
        return ["-", name, f"{row.gpu_count}× {row.gpu_sku}", Text(f"excluded: {row.excluded}", style="red"),
                usd(row.total_usd), "", "", "", row.bound or "", str(row.observed_at)]
    band = f"{duration(row.runtime_s)} ({duration(row.runtime_low_s)}–{duration(row.runtime_high_s)})"
    units = "; ".join(f"{_unit_label(k)} {usd(v)}" for k, v in row.unit_costs_usd.items() if k != "usd_per_job")
    slo = "-" if row.slo_met is None else ("yes" if row.slo_met else "no")
    gpus = f"{row.gpus_needed}/{row.gpu_count}× {row.gpu_sku}"
    observed = f"{row.observed_at}" + (" (stale)" if row.stale else "")
    return [str(rank), name, gpus, band, usd(row.total_usd), usd(row.total_p95_usd), units, slo, row.bound or "",
            observed]


def _unit_label(key: str) -> str:
    return {"usd_per_epoch": "/epoch", "usd_per_1m_train_tokens": "/1M tok", "usd_per_1m_output_tokens": "/1M out",
            "usd_per_request": "/req", "usd_per_1000_images": "/1000 img"}.get(key, key)


def bill_table(cost: JobCost, title: str) -> Table:
    table = Table(title=title)
    for col in ("line", cost.currency, "formula"):
        table.add_column(col, overflow="fold", justify="right" if col == cost.currency else "left")
    for line in cost.lines:
        table.add_row(line.name, f"{line.amount:,.2f}", line.formula)
    table.add_row(Text("total (expected)", style="bold"), Text(f"{cost.total:,.2f}", style="bold"), "")
    if cost.total_p95 != cost.total:
        table.add_row("total (P95, spot simulation)", f"{cost.total_p95:,.2f}",
                      f"{cost.interruptions:.2f} expected interruptions")
    return table


def calculator_table(plain: PlainCost, billed: BilledCost | None) -> Table:
    table = Table(title="Job cost (USD)")
    table.add_column("")
    table.add_column("plain product", justify="right")
    if billed is not None:
        table.add_column("as billed", justify="right")
    rows = [
        ("compute", plain.compute_usd, billed.compute_usd if billed else None),
        ("storage", plain.storage_usd, plain.storage_usd),
        ("transfer", plain.transfer_usd, plain.transfer_usd),
        ("retries", plain.retry_usd, plain.retry_usd),
        ("total", plain.total_usd, billed.total_usd if billed else None),
    ]
    for name, a, b in rows:
        table.add_row(name, usd(a), *([usd(b)] if billed is not None else []))
    table.caption = f"plain: {plain.usd_per_gpu_hour:g} $/GPU-h × {plain.gpus} GPUs × {plain.hours:g} h"
    if billed is not None:
        table.caption += (f"; billed: {billed.billed_hours:.4f} h (startup {billed.startup_s:g} s, idle tail "
                          f"{billed.idle_tail_s:g} s, minimum {billed.min_billed_s:g} s, increment "
                          f"{billed.increment_s:g} s): {usd(billed.difference_usd)} more")
    return table
