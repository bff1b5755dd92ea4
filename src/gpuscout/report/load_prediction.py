"""The serving simulator's prediction beside a load result's measurement: per level, TTFT and ITL P50/P95
and output throughput as predicted, each with its error against what the level measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.loadgen.search import SearchResult
from gpuscout.report.layout import number_column, prose_column
from gpuscout.report.numbers import common_unit, in_unit, sig
from gpuscout.results.schema import (
    TTFT_FROM_INTENDED_S,
    TTFT_S,
    BenchResult,
    Case,
    LoadPrediction,
    Metric,
    PredictedLevel,
)

# Measured ITL is the load's chunk gap (every gap between content chunks, vLLM's "ITL"): with one token per
# chunk, the gap between two output tokens, which is what the simulator's ITL is.
ITL_MEASURED = "chunk_gap_s"
# The simulator counts TTFT from the intended send (queueing in the client's schedule included), as the load's
# SLO search and goodput do: the measured TTFT it is held against is the same (from the actual send in a result
# that predates it; in a closed loop the two differ by the client's send lag).
TTFT_MEASURED = (TTFT_FROM_INTENDED_S, TTFT_S)
# (header, predicted field, measured metric, its summary field; None: the metric's value)
COMPARED: tuple[tuple[str, str, str | tuple[str, ...], str | None], ...] = (
    ("TTFT\nP50", "ttft_p50_s", TTFT_MEASURED, "p50"), ("TTFT\nP95", "ttft_p95_s", TTFT_MEASURED, "p95"),
    ("ITL\nP50", "itl_p50_s", ITL_MEASURED, "p50"), ("ITL\nP95", "itl_p95_s", ITL_MEASURED, "p95"),
    ("out\ntok/s", "output_tokens_per_s", "output_tokens_per_s", None))
NOTE = ("predicted by the serving simulator for each level's arrivals at its measured lengths; the error is "
        "predicted / measured − 1, TTFT from the intended send, ITL = chunk gaps; the central estimate, not the "
        "slow end")


def prediction_parts(result: BenchResult, search: SearchResult | None = None) -> list[RenderableType]:
    """The prediction table and its lines under the load table; one line when there is no prediction;
    nothing for a result written before predictions existed."""
    prediction = result.prediction
    if prediction is None:
        return []
    if prediction.unavailable is not None:
        return [Text(f"simulator: {prediction.unavailable}", style="yellow")]
    cases = {c.name: c for c in result.cases}
    pairs = [(level, cases.get(level.case)) for level in prediction.levels]
    parts: list[RenderableType] = [_table(prediction, pairs)]
    for level, _ in pairs:
        if level.note:
            parts.append(Text(f"{level.case}: {level.note}", style="yellow" if not level.stable or
                              level.note.startswith("no prediction") else ""))
    parts.append(Text(f"step costs: {prediction.costs_source}", style="dim"))
    parts.append(Text(NOTE, style="dim"))
    line = search_line(prediction, search)
    if line:
        parts.append(Text(line))
    return parts


def _table(prediction: LoadPrediction, pairs: Sequence[tuple[PredictedLevel, Case | None]]) -> Table:
    values = [getattr(level, field) for level, _ in pairs for _, field, _, summary in COMPARED
              if summary is not None and getattr(level, field) is not None]
    unit, factor = common_unit(values, "s")
    gpu = f" on {prediction.gpu}" + (f" ×{prediction.gpus}" if prediction.gpus > 1 else "")
    table = Table(title=f"Simulator beside the measurement{gpu}: predicted (error); latencies in {unit}")
    prose_column(table, "case")
    for header, _, _, _ in COMPARED:
        number_column(table, header)
    for level, case in pairs:
        metrics = {m.name: m for m in case.metrics} if case is not None else {}
        cells: list[str | Text] = [level.case]
        for _, field, name, summary in COMPARED:
            value = getattr(level, field)
            shown = "—" if value is None else in_unit(value, factor) if summary is not None else sig(value)
            cells.append(Text(f"{shown}\n{error_cell(value, measured_value(_metric(metrics, name), summary))}"))
        table.add_row(*cells)
    return table


def _metric(metrics: dict[str, Metric], name: str | tuple[str, ...]) -> Metric | None:
    """The first of the names the case measured."""
    return next((metrics[n] for n in ((name,) if isinstance(name, str) else name) if n in metrics), None)


def measured_value(metric: Metric | None, summary: str | None) -> float | None:
    """The measured figure a prediction is held against: a summary's percentile, or the metric's value."""
    if metric is None:
        return None
    if summary is None:
        return metric.value
    return None if metric.summary is None else float(getattr(metric.summary, summary))


def error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured − 1 (None when either is missing or the measurement is 0)."""
    if predicted is None or measured is None or not measured > 0 or not math.isfinite(predicted):
        return None
    return predicted / measured - 1


def error_cell(predicted: float | None, measured: float | None) -> str:
    found = error(predicted, measured)
    if found is None:
        return "n/a"
    return f"{found:+.0%}".replace("-", "−")


def search_line(prediction: LoadPrediction, search: SearchResult | None) -> str:
    """'simulated SLO search: 10 (measured 12, −17%); simulated at 512 → 128 tokens' — or why there is none."""
    if prediction.search_level is None and not prediction.search_note:
        return ""
    if prediction.search_level is None:
        return f"simulated SLO search: {prediction.search_note}"
    measured = search.best_level if search is not None else None
    beside = ""
    if measured is not None:
        beside = f" (measured {measured:g}, {error_cell(prediction.search_level, float(measured))})"
    elif search is not None:
        beside = " (measured: none met it)"
    return f"simulated SLO search: {prediction.search_level:g}{beside}; {prediction.search_note}"


def prediction_errors(result: BenchResult) -> list[dict[str, Any]]:
    """Per level, each compared metric's predicted and measured value and the error (for JSON readers)."""
    prediction = result.prediction
    if prediction is None or prediction.unavailable is not None:
        return []
    cases = {c.name: c for c in result.cases}
    out = []
    for level in prediction.levels:
        case = cases.get(level.case)
        metrics = {m.name: m for m in case.metrics} if case is not None else {}
        for _, field, name, summary in COMPARED:
            predicted = getattr(level, field)
            measured = measured_value(_metric(metrics, name), summary)
            out.append({"case": level.case, "metric": field, "predicted": predicted, "measured": measured,
                        "error": error(predicted, measured)})
    return out
