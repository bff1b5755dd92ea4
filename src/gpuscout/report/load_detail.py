"""`gpuscout load`'s detail under the main table: traffic, the server's own account, turns.

Shown only where the result has them: a level's plateau throughput and its token-count sources
(traffic), the server's /metrics beside the client's numbers (server), TTFT per conversation turn
(turns). Rendering only: every figure comes from the case's metrics (loadgen/detail.py).
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from gpuscout.report.layout import number_column, prose_column
from gpuscout.report.numbers import percent, sig
from gpuscout.results.schema import BenchResult, Case, Metric

MAX_TURN_COLUMNS = 4


def detail_tables(result: BenchResult) -> list[RenderableType]:
    tables = [_traffic(result), _server(result), _turns(result)]
    return [t for t in tables if t is not None]


def _metrics(case: Case) -> dict[str, Metric]:
    return {m.name: m for m in case.metrics}


def _traffic(result: BenchResult) -> Table | None:
    rows = []
    for case in result.cases:
        m = _metrics(case)
        steady, hit, shared = m.get("steady_output_tokens_per_s"), m.get("prefix_cache_hit_rate"), \
            m.get("shared_prefix_fraction")
        sources = "/".join(f"{int(m[f'output_tokens_from_{s}'].value)} {s}" for s in ("server", "tokenizer", "chunks")
                           if f"output_tokens_from_{s}" in m)
        if hit or shared or "chunks" in sources:  # a plain run's plateau alone is in the JSON, not on screen
            rows.append((case.name, sig(steady.value) if steady else "—", percent(shared.value) if shared else "—",
                         percent(hit.value) if hit else "—", sources or "—"))
    if not rows:
        return None
    table = Table(title="Traffic: plateau throughput, shared prefixes, token counts")
    prose_column(table, "case")
    for header in ("plateau\nout tok/s", "shared\nprefix", "cache hit\n(server)"):
        number_column(table, header)
    prose_column(table, "tokens counted by")
    for row in rows:
        table.add_row(*row)
    return table


def _server(result: BenchResult) -> Table | None:
    rows = []
    for case in result.cases:
        m = _metrics(case)
        if not any(k.startswith("server_") for k in m):
            continue
        rows.append((case.name, _peak(m.get("server_running_requests")), _peak(m.get("server_waiting_requests")),
                     _peak(m.get("server_kv_cache_usage"), fraction=True),
                     percent(m["server_prefix_cache_hit_rate"].value) if "server_prefix_cache_hit_rate" in m else "—",
                     sig(m["server_preemptions"].value) if "server_preemptions" in m else "—",
                     _tokens(m)))
    if not rows:
        return None
    table = Table(title="The server's /metrics during each level (peak over the scrapes)")
    prose_column(table, "case")
    for header in ("running", "waiting", "KV cache", "prefix\nhits", "preempted", "gen tokens\nserver/client"):
        number_column(table, header)
    for row in rows:
        table.add_row(*row)
    return table


def _peak(metric: Metric | None, *, fraction: bool = False) -> str:
    if metric is None or not metric.samples:
        return "—"
    top = max(metric.samples)
    return percent(top) if fraction else sig(top)


def _tokens(m: dict[str, Metric]) -> str:
    server = m.get("server_generation_tokens")
    client = m.get("output_tokens_server") or m.get("output_tokens_client")
    if server is None:
        return "—"
    return f"{sig(server.value)}/{sig(client.value) if client else '—'}"


def _turns(result: BenchResult) -> Table | None:
    turns = sorted({int(name.split("_")[2]) for case in result.cases for name in _metrics(case)
                    if name.startswith("ttft_turn_")})[:MAX_TURN_COLUMNS]
    if not turns:
        return None
    table = Table(title="TTFT P50 by conversation turn (the history grows each turn), ms")
    prose_column(table, "case")
    for k in turns:
        number_column(table, f"turn {k}")
    for case in result.cases:
        m = _metrics(case)
        cells = []
        for k in turns:
            metric = m.get(f"ttft_turn_{k}_s")
            cells.append(sig(metric.summary.p50 * 1e3) if metric and metric.summary else "—")
        table.add_row(case.name, *cells)
    return table
