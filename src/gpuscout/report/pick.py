"""Rendering of `pick` rankings and `cost` bills. Pure: results in, renderables out.

At 80 columns a ranked offer takes two lines: its id (★ on the Pareto frontier) over its
provider, tier and GPUs, then the runtime, the total and its P95 (and whether it meets the SLO,
for jobs that have one); an offer ranked under a plan gets a third line naming it in a few words
(the whole plan is in `--json`). Excluded offers are listed under the table, grouped by reason,
with the changes that would alter the task (never applied) and what each saves.
`--wide` adds the rank, the runtime band, the cost per unit, the bound and the price date, and
keeps the excluded offers in the table. Formulas of a bill are footnotes. A big catalog (a
SkyPilot import holds thousands of offers) shows the `top` cheapest and every offer on the
Pareto frontier, and at most a few ids per exclusion reason; `--json` carries every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.billing import JobCost, bill_in
from gpuscout.cost.calculator import BilledCost, PlainCost
from gpuscout.cost.cost_band import same_runtime
from gpuscout.cost.pick import PLACEHOLDER_NOT_RANKED, PickResult
from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.calibration import Calibration
from gpuscout.estimator.fit import Suggestion
from gpuscout.hardware.currency import USD, DisplayCurrency, ExchangeRate
from gpuscout.report.bill_block import band_lines, bill_blocks, bill_parts, find_row, shown_band
from gpuscout.report.calibration import calibration_block
from gpuscout.report.compat import compat_lines, finding_text, short_words
from gpuscout.report.footnotes import Footnotes
from gpuscout.report.gpu_layout import layout_words
from gpuscout.report.layout import label_column, number_column, plain, prose_column, some_ids
from gpuscout.report.machine import machine_lines
from gpuscout.report.numbers import age, duration, duration_band, gib, money, money_in, seconds, sig
from gpuscout.report.serving_verdict import capacity_words, slo_legend, verdict_lines
from gpuscout.report.trial import trial_lines
from gpuscout.report.unvouched import band_line, unvouched_lines

CAPTION = "★ = on the time–cost Pareto frontier; P95 from a seeded spot simulation"
WIDE_CAPTION = (CAPTION + "; runtime band from the efficiency factors; n/m× = the job uses n of the instance's m "
                          "GPUs")
TIGHT_CAPTION = ("tight: ranked, but the headroom is inside the estimator's error band (docs/estimator.md §2.15); "
                 "OOM risk: what running out of memory on the first try adds, a billed failed start and the "
                 "fallback plan (docs/cost.md §2.15); --margin PCT sets the band")
PLAN_CAPTION = "plan: changes that keep the task, applied so that it fits (each step: --json)"
TOP = 25  # ranked offers shown by default; 0 shows all
UNIT_LABELS = {"usd_per_epoch": "/epoch", "usd_per_1m_train_tokens": "/1M tok", "usd_per_1m_output_tokens": "/1M out",
               "usd_per_request": "/req", "usd_per_1000_images": "/1000 img", "usd_per_clip": "/clip"}


def pick_screen(result: PickResult, notes: Sequence[str] = (), *, wide: bool = False,
                top: int = TOP, calibration: Calibration | None = None) -> RenderableType:
    """The ranking, a line per GPU whose speed is calibrated, then how the offers were read (a
    SkyPilot import's counts)."""
    return Group(pick_table(result, wide=wide, top=top),
                 *calibration_block(calibration, (r.gpu_sku for r in result.rows if r.excluded is None)),
                 *[Text(n, style="dim") for n in notes])


def shown_rows(result: PickResult, *, wide: bool, top: int) -> tuple[tuple[PickRow, ...], int]:
    """The rows of the table and how many ranked ones were left out: the `top` cheapest and every
    offer on the Pareto frontier (`top` 0: all); `wide` adds the excluded ones, as many again."""
    ranked = [r for r in result.rows if r.excluded is None]
    keep = ranked if not top else [*ranked[:top], *_frontier_beyond(ranked[top:])]
    excluded = [r for r in result.rows if r.excluded is not None] if wide else []
    return (*keep, *(excluded if not top else excluded[:top])), len(ranked) - len(keep)


def _frontier_beyond(rows: Sequence[PickRow]) -> list[PickRow]:
    """Pareto rows past the top, one per (runtime, total) point: a catalog lists the same instance in
    many regions and zones at one price, and those ties are all on the frontier."""
    seen: set[tuple[float | None, float | None]] = set()
    out = []
    for row in rows:
        point = (row.runtime_s, row.total_usd)
        if row.pareto and point not in seen:
            seen.add(point)
            out.append(row)
    return out


def pick_table(result: PickResult, *, wide: bool = False, top: int = TOP) -> RenderableType:
    """Offers ranked by total job cost; the excluded ones, rates used and price warnings below."""
    if not wide:
        return default_pick(result, top=top)
    rows, hidden = shown_rows(result, wide=wide, top=top)
    with_slo = wide or any(r.slo_met is not None for r in result.rows)
    table = Table()
    _add_columns(table, wide=wide, with_slo=with_slo)
    notes = Footnotes()  # why an offer was excluded, under the table (`wide` only)
    rank = 0
    for row in rows:
        rank += row.excluded is None
        table.add_row(*_cells(row, rank if row.excluded is None else None, notes, wide=wide, with_slo=with_slo,
                              shown=result.currency))
    parts: list[RenderableType] = [_title(result), table, notes.flush(), Text(WIDE_CAPTION, style="dim")]
    if any(r.slo_source is not None for r in rows):
        parts.append(Text(SLO_CAPTION, style="dim"))
    return Group(*parts, *_captions(rows, hidden), *trial_lines(result.trial, result.currency), *bill_blocks(result),
                 *_notes(result))


def _title(result: PickResult) -> Text:
    return Text(f"{result.job_name}: offers ranked by total job cost ({result.currency.code})"
                + (", as written" if result.as_written else ""), style="bold")


def _captions(rows: Sequence[PickRow], hidden: int) -> list[RenderableType]:
    """What the marks inside the table mean: rows not shown, plans, compatibility findings, tight fits."""
    parts: list[RenderableType] = []
    if hidden:
        parts.append(Text(f"… {hidden:,} more ranked offers not shown (--top 0 shows all; --json has every row)",
                          style="dim"))
    if any(r.plan for r in rows):
        parts.append(Text(PLAN_CAPTION, style="dim"))
    parts += compat_lines([r for r in rows if r.excluded is None])  # what "!" on a ranked row means
    if any(r.fit_verdict == "tight" and r.excluded is None for r in rows):
        parts.append(Text(TIGHT_CAPTION, style="dim"))
    return parts


def _notes(result: PickResult) -> list[RenderableType]:
    """What the ranking could not vouch for or check, the exchange rates it used, and its warnings."""
    parts: list[RenderableType] = [Text(line, style="yellow") for line in unvouched_lines(result.rows)]
    parts += machine_lines(result.rows, result.currency)  # the dataset's pull, extra disk, unstated host facts
    if result.exchange_rates:
        parts.append(Text(rates_text(result.exchange_rates)))
    parts += [Text(f"warning: {w}", style="yellow") for w in result.warnings]
    return parts


def default_pick(result: PickResult, *, top: int = TOP) -> RenderableType:
    """The default view, made for 80 columns: each offer over its provider and GPUs (and its layout in
    words, its plan), the expected runtime and total over their bands, the price's age, the marks; the
    legend, the trial advice and the bills of the leaders under it."""
    rows, hidden = shown_rows(result, wide=False, top=top)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    prose_column(table, "offer")  # gives way first: its lines are cut with '…' rather than wrapped
    number_column(table, "runtime")
    number_column(table, "total")
    label_column(table, "  age")  # and the marks, in one column: two characters saved for the offer id
    for row in rows:
        table.add_row(*_default_cells(row, result))
    return Group(_title(result), table, *_legend(rows), *_captions(rows, hidden),
                 *trial_lines(result.trial, result.currency), *bill_blocks(result), *excluded_lines(result.rows),
                 *_notes(result))


def _legend(rows: Sequence[PickRow]) -> list[Text]:
    spot = any(r.total_p95_usd is not None and r.total_usd is not None and r.total_p95_usd > r.total_usd
               for r in rows)
    lines = ["runtime, total: expected (the order), band below" + (" (high end: spot P95)" if spot else "")
             + "; age: of the price"]
    marks = [*(["★ time–cost Pareto frontier"] if any(r.pareto for r in rows) else []),
             *(["≈ band overlaps the leader's: not separable before measuring"]
               if any(r.separable is False for r in rows) else []),
             *(["age over 30 d: a stale price"] if any(r.stale for r in rows) else [])]
    if marks:
        lines.append("; ".join(marks))
    legend = slo_legend(rows)  # an offer that misses it is excluded, so a ranked one meets it
    if legend is not None:
        lines.append(legend)
    if rows and any(r.separable and same_runtime(rows[0], r) for r in rows[1:]):
        lines.append("rows on the leader's GPUs and plan share its runtime: told apart by price")
    return [Text(line, style="dim") for line in lines]


def _default_cells(row: PickRow, result: PickResult) -> list[str | Text]:
    shown = result.currency
    offer = Text(f"{row.offer_id}\n", no_wrap=True, overflow="ellipsis", style="bold")
    offer.append(f"{row.provider} {row.tier}, {row.gpu_count} × {row.gpu_sku}", style="not bold dim")
    if vouch_marks(row):  # its own line: at 80 columns the provider line has no room left for it
        offer.append(f"\n{vouch_marks(row).removeprefix(', ')}", style="not bold yellow")
    words = layout_words(row)
    if words:
        offer.append(f"\n{words}", style="dim")
    held = capacity_words(row)
    if held:
        offer.append(f"\n{held}", style="dim")
    if row.plan:
        offer.append(f"\nplan: {plan_words(row.plan)}", style="yellow")
    if row.compat and row.excluded is None:  # priced with a fallback's slowdown, or runs under a condition
        offer.append(f"\n! {short_words(row.compat)}", style="yellow")
    offer.append(tight_words(row, shown), style="yellow")
    runtime = Text(duration(row.runtime_s) if row.runtime_s is not None else "-")
    if row.runtime_low_s is not None and row.runtime_high_s is not None and row.runtime_high_s > row.runtime_low_s:
        runtime.append(f"\n{duration_band(row.runtime_low_s, row.runtime_high_s)}", style="dim")
    total = Text(shown_money(row.total_usd, shown))
    if row.total_usd is not None:
        total.append(f"\n{shown_band(row, shown)}", style="dim")
    marks = ("★" if row.pareto else "") + ("≈" if row.separable is False else "")
    aged = Text(f"{price_age(row, result.today) or str(row.observed_at):>5}", style="yellow" if row.stale else "")
    aged.append(f" {marks}" if marks else "")
    return [offer, runtime, total, aged]


def price_age(row: PickRow, today: date | None) -> str:
    """How old the row's price is on the day of the ranking ('' when the ranking has no day)."""
    return age((today - row.observed_at).days) if today is not None else ""


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


def _cells(row: PickRow, rank: int | None, notes: Footnotes, *, wide: bool, with_slo: bool,
           shown: DisplayCurrency = USD) -> list[str | Text]:
    offer = Text(f"{'★ ' if row.pareto else ''}{row.offer_id}\n", no_wrap=True, overflow="ellipsis")
    offer.append(f"{row.provider} {row.tier}, {_gpus(row)}", style="dim")  # two lines, each cut, never wrapped
    offer.append(vouch_marks(row), style="yellow")
    if row.plan:
        offer.append(f"\nplan: {plan_words(row.plan)}", style="yellow")
    if row.compat and row.excluded is None:  # priced with a fallback's slowdown, or runs under a condition
        offer.append(f"\n! {short_words(row.compat)}", style="yellow")
    offer.append(tight_words(row, shown), style="yellow")
    if row.excluded is not None:  # only `wide` keeps excluded offers in the table
        options = f"; {options_text(row.options)}" if row.options else ""
        excluded = Text(f"excluded {notes.ref(row.excluded + options)}", style="red")
        return ["-", offer, excluded, shown_money(row.total_usd, shown), "", "", "", row.bound or "",
                str(row.observed_at)]
    cells: list[str | Text] = [offer, _runtime(row, wide=wide), shown_money(row.total_usd, shown),
                               shown_money(row.total_p95_usd, shown)]
    if wide:
        cells = [str(rank), *cells, plain(unit_costs(row.unit_costs_usd, shown))]
    if with_slo:
        cells.append("-" if row.slo_met is None else ("yes" if row.slo_met else "no") + _SOURCE_MARK.get(
            row.slo_source or "", ""))
    if wide:
        cells += [row.bound or "", f"{row.observed_at}" + (" (stale)" if row.stale else "")]
    return cells


# The SLO column's source marks in the wide table; its caption says what each means.
_SOURCE_MARK = {"simulated": " (sim)", "measured": " (meas)", "single-request estimate": " (1 req)"}
SLO_CAPTION = ("SLO: met at the band's slow end; (sim) simulated at the job's load, queueing counted; (meas) "
               "measured by a load result; (1 req) a single-request estimate, no queueing")


def vouch_marks(row: PickRow) -> str:
    """', placeholder', ', risk unknown': what the row's total cannot vouch for (the lines under the
    table say more)."""
    return (", placeholder" if row.placeholder else "") + (", risk unknown" if row.interruption_risk_unknown else "")


def tight_words(row: PickRow, shown: DisplayCurrency = USD) -> str:
    """'\ntight: OOM risk +$3.10' under a tight row's offer; '' otherwise."""
    if row.fit_verdict != "tight" or row.excluded is not None:
        return ""
    return f"\ntight: OOM risk +{shown_money(row.oom_risk_usd, shown)}"


def _gpus(row: PickRow) -> str:
    used = f"{row.gpus_needed}/" if row.gpus_needed is not None and row.excluded is None else ""
    return f"{used}{row.gpu_count}× {row.gpu_sku}"


def _runtime(row: PickRow, *, wide: bool) -> str:
    if row.runtime_s is None:
        return "-"
    if not wide or row.runtime_low_s is None or row.runtime_high_s is None:
        return duration(row.runtime_s)
    return f"{duration(row.runtime_s)} ({duration_band(row.runtime_low_s, row.runtime_high_s)})"


def plan_words(plan: Sequence[Suggestion]) -> str:
    """A plan in a few words: 'micro-batch 1 × 16, checkpointing'."""
    return ", ".join(_step_words(s.spec_change) for s in plan)


def _step_words(edits: dict[str, object]) -> str:
    if "micro_batch" in edits and "grad_accum" in edits:
        return f"micro-batch {edits['micro_batch']} × {edits['grad_accum']}"
    words = {"chunked_cross_entropy": "chunked loss", "gradient_checkpointing": "checkpointing",
             "optimizer_offload": "optimizer offload", "kv_cache_dtype": "fp8 KV cache", "vae_tiling": "VAE tiling",
             "vae_slicing": "VAE slicing", "attention": "SDPA attention", "activation_offload": "activation offload",
             "optimizer_in_backward": "optimizer in backward", "upcast_unquantized": "16-bit embeddings",
             "enforce_eager": "no CUDA graphs", "max_num_seqs": "max_num_seqs",
             "max_num_batched_tokens": "batch tokens"}
    if "offload" in edits:
        return f"{edits['offload']} CPU offload"
    if edits.get("loss") == "fused":
        return "chunked loss"
    if edits.get("checkpoint_policy") == "selective":
        return "selective checkpointing"
    if "optimizer" in edits:
        return OPTIMIZER_WORDS.get(str(edits["optimizer"]), f"optimizer {edits['optimizer']}")
    return " ".join(_edit_words(words, k, v) for k, v in edits.items())


OPTIMIZER_WORDS = {"adamw_8bit": "8-bit AdamW", "paged_adamw_8bit": "paged 8-bit AdamW",
                   "paged_adamw_32bit": "paged AdamW"}


def _edit_words(words: dict[str, str], key: str, value: object) -> str:
    """A plan step in words: switches read as their name; numbers keep their value."""
    if key not in words:
        return f"{key} {value}"
    return words[key] if isinstance(value, bool) else f"{words[key]} {value}"


def unit_costs(costs: dict[str, float], shown: DisplayCurrency = USD) -> str:
    """'/epoch $7.54; /1M tok $0.15': the job's cost per unit of work (the whole job's is the total)."""
    return "; ".join(f"{UNIT_LABELS.get(k, k)} {shown_money(v, shown)}" for k, v in costs.items()
                     if k != "usd_per_job")


def shown_money(amount_usd: float | None, shown: DisplayCurrency | None) -> str:
    """A USD amount in the currency the report is shown in (USD when None)."""
    shown = shown or USD
    return money_in(amount_usd, shown.code, shown.usd_per_unit)


def excluded_lines(rows: Sequence[PickRow]) -> list[RenderableType]:
    """The offers left out, one line per reason: 'excluded, does not fit in 1 × L40S 48GB: a, b';
    under an offer that does not fit, the changes that would alter the task and what each saves."""
    by_reason: dict[str, list[PickRow]] = {}
    for row in rows:
        if row.excluded is not None and row.excluded != PLACEHOLDER_NOT_RANKED:  # their own line: `unvouched`
            by_reason.setdefault(row.excluded, []).append(row)
    out: list[RenderableType] = []
    for reason, group in by_reason.items():
        out.append(Text(f"excluded, {reason}: {some_ids([r.offer_id for r in group])}", style="red"))
        if group[0].options:
            out.append(Text(f"  {options_text(group[0].options)}", style="dim"))
    return out


def options_text(options: Sequence[Suggestion]) -> str:
    """The changes to the task that would fit on their own (at most three), or the largest saving."""
    fitting = [o for o in options if o.fits]
    if fitting:
        return "would fit if the task changed: " + "; ".join(f"{o.change} (saves {gib(o.saves_bytes)})"
                                                            for o in fitting[:3])
    best = max(options, key=lambda o: o.saves_bytes)
    return f"no single change to the task fits; the largest saving: {best.change}, {gib(best.saves_bytes)}"


def rates_text(rates: Sequence[ExchangeRate]) -> str:
    return "Exchange rates used: " + ", ".join(
        f"1 {r.currency} = {sig(r.usd_per_unit)} USD ({r.source}, {r.observed_at})" for r in rates)


def bill_table(cost: JobCost, title: str, rates: Sequence[ExchangeRate] = ()) -> RenderableType:
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
    parts: list[RenderableType] = [table, notes.flush()]
    if cost.interruption_note:
        parts.append(Text(cost.interruption_note, style="yellow"))
    if cost.note:
        parts.append(Text(cost.note, style="dim"))
    if rates:
        parts.append(Text(rates_text(rates)))
    return Group(*parts)


def calculator_table(plain_cost: PlainCost, billed: BilledCost | None,
                     shown: DisplayCurrency | None = None) -> RenderableType:
    """The plain product beside the bill under the rules given; how each was reckoned, as footnotes.

    The inputs are USD (the flags say so); `shown` converts every amount for display."""
    notes = Footnotes()
    code = (shown or USD).code
    table = Table(title=f"Job cost ({code})")
    prose_column(table, "")
    number_column(table, f"plain product {notes.ref(_plain_formula(plain_cost, shown))}")
    if billed is not None:
        number_column(table, f"as billed {notes.ref(_billed_formula(billed, shown))}")
    rows = [
        ("compute", plain_cost.compute_usd, billed.compute_usd if billed else None),
        ("storage", plain_cost.storage_usd, plain_cost.storage_usd),
        ("transfer", plain_cost.transfer_usd, plain_cost.transfer_usd),
        ("retries", plain_cost.retry_usd, plain_cost.retry_usd),
        ("total", plain_cost.total_usd, billed.total_usd if billed else None),
    ]
    for name, a, b in rows:
        table.add_row(name, shown_money(a, shown), *([shown_money(b, shown)] if billed is not None else []))
    parts: list[RenderableType] = [table, notes.flush()]
    if shown is not None and shown.rate is not None:
        parts.append(Text(rates_text([shown.rate])))
    return Group(*parts)


def _plain_formula(p: PlainCost, shown: DisplayCurrency | None = None) -> str:
    gpus = f"{p.gpus} GPU{'s' if p.gpus != 1 else ''}"
    return (f"plain: {shown_money(p.usd_per_gpu_hour, shown)}/GPU-h × {gpus} × {sig(p.hours)} h + storage + "
            "transfer + retries")


def _billed_formula(b: BilledCost, shown: DisplayCurrency | None = None) -> str:
    return (f"as billed: {sig(b.billed_hours)} h billed (startup {seconds(b.startup_s)}, idle tail "
            f"{seconds(b.idle_tail_s)}, minimum {seconds(b.min_billed_s)}, increment {seconds(b.increment_s)}): "
            f"{shown_money(b.difference_usd, shown)} more")


def explain_screen(result: PickResult, offer_id: str) -> RenderableType:
    """One row in full: layout, runtime band, total band and how it was built, its place against the
    leader, and every bill line with its formula."""
    row = find_row(result, offer_id)
    shown = result.currency
    parts: list[RenderableType] = [Text(f"{row.offer_id}: {row.provider} {row.tier}, {row.gpu_count} × "
                                        f"{row.gpu_sku}", style="bold")]
    words = layout_words(row)
    if words:
        parts.append(Text(words))
    if row.excluded is not None:
        parts.append(Text(f"excluded: {row.excluded}", style="red"))
        if row.options:
            parts.append(Text(options_text(row.options), style="dim"))
    if row.plan:
        parts.append(Text(f"plan: {plan_words(row.plan)}", style="yellow"))
    parts += [Text(line) for line in verdict_lines(row)]
    if row.runtime_s is not None:
        band = (f" (band {duration_band(row.runtime_low_s, row.runtime_high_s)})"
                if row.runtime_low_s is not None and row.runtime_high_s is not None else "")
        parts.append(Text(f"runtime {duration(row.runtime_s)}{band}"))
    if row.total_usd is not None:
        parts += band_lines(row, result)
    if row.interruption_prior is not None:  # the bill below was priced under this band, not a stated rate
        parts.append(Text(band_line(row.interruption_prior, [row.offer_id]), style="yellow"))
    if row.fit_verdict == "tight" and row.excluded is None:
        parts.append(Text(tight_words(row, shown).strip(), style="yellow"))
    if row.compat:
        parts += [Text(finding_text(f), style="yellow") for f in row.compat]
    if row.cost is not None:
        bill = bill_in(row.cost, shown, result.exchange_rates)
        parts.append(bill_table(bill, f"{row.offer_id}: the bill at the expected runtime", result.exchange_rates))
        split = " · ".join(f"{n} {money(a, shown.code)}" for n, a in bill_parts(row.cost, shown, result.exchange_rates)
                           if n in ("billed start-up", "idle tail"))
        parts.append(Text(f"of the compute line: {split} (start-up {seconds(row.cost.startup_s)}, idle tail "
                          f"{seconds(row.cost.idle_tail_s)}, first start)", style="dim"))
    return Group(*parts)
