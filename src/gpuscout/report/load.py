"""`gpuscout load`: one row per load level (TTFT, TPOT, throughput, validity), notes, search, cost."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.load_cost import LoadCost
from gpuscout.loadgen.context import Progress
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.search import SearchResult
from gpuscout.loadgen.session import ReplaySpan, workload_path
from gpuscout.report.escape import screen_console
from gpuscout.report.layout import label_column, number_column, prose_column
from gpuscout.report.load_detail import detail_tables
from gpuscout.report.load_prediction import prediction_parts
from gpuscout.report.numbers import common_unit, duration, in_unit, money, percent, sig
from gpuscout.results.schema import (
    E2E_S,
    INVALID_PREFIX,
    NOT_MEASURED_PREFIX,
    TPOT_S,
    TTFT_FROM_INTENDED_S,
    TTFT_S,
    VALID_NOTE,
    BenchResult,
    Case,
    Metric,
    level_verdict,
)


@contextmanager
def load_progress(shape: LoadShape, console: Console | None = None) -> Iterator[Progress]:
    """A rich progress bar on stderr while one level runs; while the client waits long for its next scheduled
    send (a trace's gap), the bar says so and until when."""
    from rich.progress import Progress as Bar

    title = f"load {shape.kind}"
    with Bar(console=console or screen_console(stderr=True), transient=True) as bar:
        task = bar.add_task(title, total=shape.requests)

        def update(done: int, total: int, waiting_until: float | None = None) -> None:
            said = title if waiting_until is None else f"{title}: {waiting_line(waiting_until)}"
            bar.update(task, completed=done, total=total or None, description=said)
            if waiting_until is not None:
                bar.refresh()  # now, not at the next tick: the wait may begin as the level does

        yield update


def waiting_line(until: float, now: float | None = None) -> str:
    """'waiting until 14:05:03 (2.0 h) for the next send': the clock time in local time, with
    its date when the wait ends on another day."""
    now = time.time() if now is None else now
    end = datetime.fromtimestamp(until).astimezone()
    same_day = end.date() == datetime.fromtimestamp(now).astimezone().date()
    clock = end.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    return f"waiting until {clock} ({duration(max(0.0, until - now))}) for the next send"


def replay_notice(span: ReplaySpan) -> Text:
    """The one line said before a long trace replay: how long it takes, and how to shorten it."""
    total = ""
    if span.total_s > span.replay_s * (1 + 1e-9):
        total = (f", {'at most ' if span.search else ''}{duration(span.total_s)} for every level and run"
                 + (" of the search" if span.search else ""))
    return Text.assemble(("note:", "yellow"), f" the trace replay takes {duration(span.replay_s)} of wall time "
                         f"({span.requests:,} requests over {duration(span.trace_s)} of the trace, replayed "
                         f"×{span.speedup:g}){total}; to shorten it, pass a higher --speedup, or --requests N to "
                         "replay only the trace's first N requests")


def load_warnings(result: BenchResult, console: Console) -> None:
    """Invalid levels, checks that could not run and levels where every request failed, as warnings (on stderr)."""
    for case in result.cases:
        for note in case.notes:
            if note.startswith((INVALID_PREFIX, NOT_MEASURED_PREFIX, "every request failed")):
                console.print(Text.assemble(("warning:", "yellow"), f" {case.name}: {note}"), highlight=False)


FORMULAS = ("ttft = first content chunk − send", "e2e = last content chunk − send",
            "tpot = (e2e − ttft)/(output tokens − 1)", "chunk gap = every gap between content chunks",
            "intended = from the scheduled send time (coordinated omission); lag = send − scheduled send")
# (metric, summary field, header): the default columns, then what `--wide` adds.
LATENCIES = ((TTFT_S, "p50", "TTFT\nP50"), (TTFT_S, "p95", "TTFT\nP95"), (TPOT_S, "p50", "TPOT\nP50"),
             (TPOT_S, "p95", "TPOT\nP95"))
WIDE_LATENCIES = ((E2E_S, "p95", "e2e\nP95"), (TTFT_FROM_INTENDED_S, "p95", "TTFT P95\nintended"),
                  ("send_lag_s", "p95", "lag\nP95"))
IMAGE_LATENCIES = ((E2E_S, "p50", "e2e\nP50"), (E2E_S, "p95", "e2e\nP95"),
                   ("seconds_per_image", "p50", "s/image\nP50"), ("seconds_per_image", "p95", "s/image\nP95"))
IMAGE_FORMULAS = ("e2e = whole answer − send; s/image = e2e / images in the answer; img/s = Σ images / duration",)


CASE_NAME_MAX = 28  # characters of a case name kept whole in the table ("gamma 12.5 rps, k=0.5" is 21)


def load_screen(result: BenchResult, *, output: Path | None, costs: Sequence[LoadCost],
                search: SearchResult | None, wide: bool = False) -> RenderableType:
    """One row per measured level, the metric formulas, notes, the search's conclusion, the cost.

    At 80 columns a level shows its requests, throughput, TTFT and TPOT P50/P95 and validity, with
    every latency in one unit named in the title; `--wide` adds e2e, the latency from the intended
    send time, the send lag and the error rate.
    """
    images = result.fixed.settings.get("endpoint") == "images"
    latencies = IMAGE_LATENCIES if images else LATENCIES + (WIDE_LATENCIES if wide else ())
    unit, factor = common_unit(_latency_values(result, latencies), "s")
    # No vertical rules: at 80 columns the nine columns leave the case name room for one line ("gamma 12.5
    # rps, k=0.5" wrapped onto three lines between rules); a name is never wrapped, only cut past 28.
    table = Table(title=f"gpuscout load — {result.fixed.model} ({result.fixed.settings.get('endpoint')}, "
                        f"{'stream' if result.fixed.settings.get('stream') else 'no stream'}); latencies in {unit}",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    longest = max((len(c.name) for c in result.cases), default=4)
    table.add_column("case", no_wrap=True, overflow="ellipsis", min_width=min(longest, CASE_NAME_MAX))
    for header in ("ok/sent", "req/s", "img/s" if images else "out\ntok/s", *(h for _, _, h in latencies),
                   *(("errors",) if wide else ())):
        number_column(table, header)
    label_column(table, "valid")
    for case in result.cases:
        table.add_row(*_row(case, latencies, factor, wide=wide, images=images))
    parts: list[RenderableType] = [table, *_unmeasured_line(result.cases),
                                   Text("\n".join(IMAGE_FORMULAS if images else FORMULAS), style="dim"),
                                   *detail_tables(result)]
    for case in result.cases:
        for note in case.notes:
            if note != VALID_NOTE:
                warn = note.startswith((INVALID_PREFIX, NOT_MEASURED_PREFIX)) or "invalid" in note
                parts.append(Text(f"{case.name}: {note}", style="yellow" if warn else ""))
    if search is not None:
        parts.append(Text(f"SLO search: {search.message}"))
    parts += prediction_parts(result, search)
    if costs:
        parts.append(_cost_table(result, costs))
    if not result.complete:
        parts.append(Text(f"Incomplete run: {'; '.join(result.notes) or 'it did not finish'}.", style="bold yellow"))
    if output is not None:
        parts.append(Text(f"Result written to {output} (workload: {workload_path(output)})"))
    return Group(*parts)


def _unmeasured_line(cases: Sequence[Case]) -> list[Text]:
    """The levels whose validity was not measured, named under the table (as doctor lists what it did not check)."""
    names = [c.name for c in cases if level_verdict(c) == "not measured"]
    if not names:
        return []
    return [Text(f"valid n/m = not measured ({len(names)}): {', '.join(names)}. A check of the validity gate could "
                 "not run, so these levels are neither valid nor invalid (their notes say which).", style="yellow")]


def _latency_values(result: BenchResult, latencies: Sequence[tuple[str, str, str]]) -> list[float]:
    """Every latency the table shows, so one unit suits them all."""
    values = []
    for case in result.cases:
        m = {x.name: x for x in case.metrics}
        values += [getattr(m[name].summary, field) for name, field, _ in latencies
                   if name in m and m[name].summary is not None]
    return values


def _row(case: Case, latencies: Sequence[tuple[str, str, str]], factor: float, *, wide: bool,
         images: bool = False) -> list[str | Text]:
    m = {x.name: x for x in case.metrics}
    # every measured request of every run has a send lag; a count per run times the runs where they are missing
    lags = m["send_lag_s"].samples if "send_lag_s" in m else ()
    sent = len(lags) or int(case.params.get("requests") or 0) * max(1, case.runs - len(case.failed_runs))
    first = E2E_S if images else TTFT_S
    summary = m[first].summary if first in m else None
    ok = summary.n if summary is not None else 0
    valid = VERDICT_CELLS[level_verdict(case)]
    cells: list[str | Text] = [case.name, f"{ok}/{sent}", _value(m.get("requests_per_s")),
                               _value(m.get("images_per_s" if images else "output_tokens_per_s"))]
    cells += [_latency(m.get(name), field, factor) for name, field, _ in latencies]
    if wide:
        cells.append(percent(m["error_rate"].value, 1) if "error_rate" in m else "—")
    return [*cells, valid]


# The valid column (5 wide at 80 columns): a level whose gate could not run a check is neither yes nor no but
# "n/m", spelled out under the table (`_unmeasured_line`) and in its note, which says which check.
VERDICT_CELLS = {"valid": Text("yes"), "invalid": Text("no", style="red"), "not measured": Text("n/m", style="yellow")}


def _cost_table(result: BenchResult, costs: Sequence[LoadCost]) -> Table:
    table = Table(title=f"Cost at {money(costs[0].usd_per_hour)}/h ({costs[0].price_source})")
    prose_column(table, "case")
    images = result.fixed.settings.get("endpoint") == "images"
    saving = any(c.prefix_saving_usd_per_1m_output_tokens is not None for c in costs)
    columns = (("$ / 1000\nimages", "usd_per_1000_images"), ("$ / request", "usd_per_request")) if images else (
        ("$ / 1M output\ntokens", "usd_per_1m_output_tokens"), ("$ / request", "usd_per_request"),
        ("$ / 1M goodput\ntokens", "usd_per_1m_goodput_tokens"),
        *((("prefix cache\nsaves $ / 1M", "prefix_saving_usd_per_1m_output_tokens"),) if saving else ()))
    for col, _ in columns:
        number_column(table, col)
    for case, c in zip(result.cases, costs, strict=True):
        values = [getattr(c, key) for _, key in columns]
        table.add_row(case.name, *(money(v) if v is not None else "—" for v in values))
    return table


def _value(metric: Metric | None) -> str:
    return "—" if metric is None else sig(metric.value)


def _latency(metric: Metric | None, field: str, factor: float) -> str:
    if metric is None or metric.summary is None:
        return "—"
    return in_unit(getattr(metric.summary, field), factor)
