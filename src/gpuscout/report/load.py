"""`gpuscout load`: one row per load level (TTFT, TPOT, throughput, validity), notes, search, cost."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.cost.load_cost import LoadCost
from gpuscout.loadgen.client import Progress
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.search import SearchResult
from gpuscout.loadgen.session import workload_path
from gpuscout.report.numbers import money
from gpuscout.results.schema import BenchResult, Metric


@contextmanager
def load_progress(shape: LoadShape) -> Iterator[Progress]:
    """A rich progress bar on stderr while one level runs."""
    from rich.progress import Progress as Bar

    with Bar(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"load {shape.kind}", total=shape.requests)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


def load_warnings(result: BenchResult, console: Console) -> None:
    """Invalid levels and levels where every request failed, as warnings (on stderr)."""
    for case in result.cases:
        for note in case.notes:
            if note.startswith("invalid:") or note.startswith("every request failed"):
                console.print(f"[yellow]warning:[/] {case.name}: {note}", highlight=False)


FORMULAS = ("ttft = first content chunk − send; e2e = last content chunk − send; "
            "tpot = (e2e − ttft)/(output tokens − 1); chunk gap = every gap between content chunks; "
            "*from intended = from the scheduled send time (coordinated omission)")


def load_screen(result: BenchResult, *, output: Path | None, costs: Sequence[LoadCost],
                search: SearchResult | None, wide: bool = False) -> RenderableType:
    """One row per measured level, the metric formulas, notes, the search's conclusion, the cost."""
    table = Table(title=f"gpuscout load — {result.fixed.model} ({result.fixed.settings.get('endpoint')}, "
                        f"{'stream' if result.fixed.settings.get('stream') else 'no stream'})")
    for col in ("case", "ok/sent", "req/s", "out tok/s", "TTFT P50", "TTFT P95", "TPOT P50", "TPOT P95", "e2e P95",
                "TTFT P95 (intended)", "lag P95", "errors", "valid"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for case in result.cases:
        m = {x.name: x for x in case.metrics}
        sent = int(case.params.get("requests") or 0) or len(m["send_lag_s"].samples if "send_lag_s" in m else ())
        ok = m["ttft_s"].summary.n if "ttft_s" in m and m["ttft_s"].summary else 0
        valid = "yes" if "valid" in case.notes else "[red]no[/]"
        table.add_row(case.name, f"{ok}/{sent}", _num(m.get("requests_per_s")), _num(m.get("output_tokens_per_s")),
                      _ms(m.get("ttft_s"), "p50"), _ms(m.get("ttft_s"), "p95"), _ms(m.get("tpot_s"), "p50"),
                      _ms(m.get("tpot_s"), "p95"), _ms(m.get("e2e_s"), "p95"),
                      _ms(m.get("ttft_from_intended_s"), "p95"), _ms(m.get("send_lag_s"), "p95"),
                      f"{m['error_rate'].value:.1%}", valid)
    parts: list[RenderableType] = [table, Text(FORMULAS, style="dim")]
    for case in result.cases:
        for note in case.notes:
            if note != "valid":
                parts.append(Text(f"{case.name}: {note}", style="yellow" if "invalid" in note else ""))
    if search is not None:
        parts.append(Text(f"SLO search: {search.message}"))
    if costs:
        parts.append(_cost_table(result, costs))
    if output is not None:
        parts.append(Text(f"Result written to {output} (workload: {workload_path(output)})"))
    return Group(*parts)


def _cost_table(result: BenchResult, costs: Sequence[LoadCost]) -> Table:
    table = Table(title=f"Cost at {money(costs[0].usd_per_hour)}/h ({costs[0].price_source})")
    for col in ("case", "$ / 1M output tokens", "$ / request", "$ / 1M goodput tokens"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for case, c in zip(result.cases, costs, strict=True):
        values = (c.usd_per_1m_output_tokens, c.usd_per_request, c.usd_per_1m_goodput_tokens)
        table.add_row(case.name, *(money(v) if v is not None else "—" for v in values))
    return table


def _num(metric: Metric | None) -> str:
    return "—" if metric is None else f"{metric.value:.3g}"


def _ms(metric: Metric | None, field: str) -> str:
    if metric is None or metric.summary is None:
        return "—"
    return f"{getattr(metric.summary, field) * 1e3:.1f} ms"
