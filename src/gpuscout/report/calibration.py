"""`gpuscout calibrate`: the fitted factors per GPU and phase; and the line estimate and pick print
under their tables for every GPU whose speed is calibrated."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.estimator.calibration import Calibration, CalibrationEntry, ServingEntry, apply_entry
from gpuscout.estimator.efficiency import Efficiency, calibrated, default_efficiency
from gpuscout.hardware.catalog import lookup_gpu
from gpuscout.report.layout import label_column, number_column, prose_column


def calibrate_screen(calibration: Calibration, *, added: int, skipped: Sequence[str], output: Path | None,
                     notes: Sequence[str] = (), serving_added: int = 0) -> RenderableType:
    """The entries (time multiplier, band, calibrated factors), the serving simulator's step costs fitted to
    load results, what was skipped, where it was written."""
    phases = bool(calibration.entries or not calibration.serving)  # a file of serving entries only: no phase table
    parts: list[RenderableType] = []
    if phases:
        parts += [Text(f"Calibration: {added} new measured phase(s), {len(calibration.observations)} in all",
                       style="bold"), entries_table(calibration.entries)]
    if calibration.serving:
        parts += [Text(f"Serving simulator: {serving_added} new load result(s), {len(calibration.serving)} in all",
                       style="bold"), serving_table(calibration.serving),
                  Text(SERVING_NOTE, style="dim")]
    clamped = [e for e in calibration.entries if e.clamped]
    if clamped:
        parts.append(Text("clamped: " + ", ".join(f"{e.gpu_sku} {e.phase}" for e in clamped)
                          + " ran faster than the roofline allows at efficiency 1; the factors are held at 1, so "
                            "the estimate stays slower than the measurement there.", style="yellow"))
    parts += [Text(line, style="yellow") for line in skipped]
    parts += [Text(line, style="dim") for line in notes]
    if phases:
        parts.append(Text("measured / est.: the time multiplier (geometric mean over the runs); compute and "
                          "bandwidth: the calibrated factors (the defaults / the multiplier, at most 1); band: the "
                          "job-time band estimates now carry (docs/estimator.md §3.11)", style="dim"))
    if output is not None:
        parts.append(Text(f"written to {output}", style="green"))
    return Group(*parts)


def entries_table(entries: Iterable[CalibrationEntry]) -> Table:
    """One row per GPU and phase: runs, time multiplier, band, and the calibrated factors."""
    table = Table()
    label_column(table, "GPU")
    label_column(table, "phase")
    for header in ("runs", "measured\n/ est.", "band", "compute", "bandwidth"):
        number_column(table, header)
    for e in entries:
        default = _default(e)
        now = apply_entry(e, default) if default is not None else None
        table.add_row(e.gpu_sku, e.phase, str(e.runs), f"×{e.factor:.3g}", _band(now or default_band(e)),
                      f"{now.compute:.2g}" if now else "-", f"{now.bandwidth:.2g}" if now else "-")
    return table


SERVING_NOTE = ("step costs fitted so the simulator reproduces each load level's TTFT and ITL medians and output "
                "tokens/s: device terms × the speed model's estimate, host terms in seconds; error: RMS of "
                "simulated / measured − 1 over the levels, worst metric (docs/serving_sim.md)")
TERM_NAMES = {"overhead_s": "step", "weights_s": "weights", "expert_weights_s": "experts", "kv_read_s_per_token": "KV",
              "compute_s_per_token": "compute", "attention_s_per_pair": "attention", "comm_s_per_token": "comm",
              "request_overhead_s": "request", "seq_s": "per seq"}


def serving_table(entries: Iterable[ServingEntry]) -> Table:
    """One row per load result: its GPU and model, the levels fitted, the fitted terms and the fit's error."""
    table = Table()
    label_column(table, "GPU")
    prose_column(table, "model")
    number_column(table, "levels")
    prose_column(table, "fitted")
    number_column(table, "error")
    for e in entries:
        fitted = [f"{TERM_NAMES[t]} ×{v:.3g}" for t, v in e.factors.items()]
        fitted += [f"{TERM_NAMES[t]} {duration_s(v)}" for t, v in e.seconds.items()]
        worst = max(e.residuals.values(), default=None)
        table.add_row(e.gpu_sku, e.model, str(e.points), ", ".join(fitted) or "-",
                      f"{math.expm1(worst):.0%}" if worst is not None else "-")
    return table


def duration_s(seconds: float) -> str:
    """A host time: '2.1 ms', '15 µs', '0.21 s'."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _band(eff: Efficiency) -> str:
    low, high = round((1 - eff.band_low) * 100), round((eff.band_high - 1) * 100)
    return f"±{low}%" if low == high else f"-{low}/+{high}%"


def default_band(entry: CalibrationEntry) -> Efficiency:
    """An entry's own band as an Efficiency-like value (for a GPU the catalog no longer has)."""
    return Efficiency(compute=1.0, bandwidth=1.0, link=1.0, overlap=0.0, band_low=entry.band_low,
                      band_high=entry.band_high, source="")


def _default(entry: CalibrationEntry) -> Efficiency | None:
    gpu = lookup_gpu(entry.gpu_sku)
    if gpu is None:
        return None
    with calibrated(None):
        return default_efficiency(gpu, entry.phase)


def calibration_lines(calibration: Calibration | None, gpu_skus: Iterable[str]) -> list[str]:
    """One line per calibrated GPU among `gpu_skus`, in their order; none for the others."""
    if calibration is None:
        return []
    lines = []
    for sku in dict.fromkeys(gpu_skus):
        entries = [e for e in calibration.entries if e.gpu_sku == sku]
        if entries:
            lines.append(calibration_line(sku, entries))
        serving = calibration.serving_factors(sku)
        if serving is not None:  # the simulator's step costs on this GPU
            lines.append(f"{sku}: serving step costs {serving.note}")
    return lines


def calibration_line(sku: str, entries: Sequence[CalibrationEntry]) -> str:
    """'h100-sxm5-80gb: speed calibrated on 3 runs on NVIDIA H100 80GB HBM3, 2026-11-01 (training, prefill)'."""
    runs = len({s for e in entries for s in e.sources})
    machines = ", ".join(dict.fromkeys(m for e in entries for m in e.machines)) or sku
    last = max(e.last_date for e in entries).isoformat()
    phases = ", ".join(e.phase for e in entries)
    return f"{sku}: speed calibrated on {runs} run{'s' if runs != 1 else ''} on {machines}, {last} ({phases})"


def calibration_block(calibration: Calibration | None, gpu_skus: Iterable[str]) -> list[RenderableType]:
    """The calibration lines as dim text, for the screens of estimate and pick."""
    return [Text(line, style="dim") for line in calibration_lines(calibration, gpu_skus)]


def calibration_payload(calibration: Calibration | None, path: Path | None) -> dict[str, Any]:
    """The `calibration` key of estimate's and pick's JSON: the entries used and their file (null: none)."""
    if calibration is None:
        return {"calibration": None}
    return {"calibration": {"path": str(path) if path is not None else None,
                            "entries": [e.model_dump(mode="json") for e in calibration.entries],
                            **({"serving": [e.model_dump(mode="json") for e in calibration.serving]}
                               if calibration.serving else {})}}


def calibrate_payload(calibration: Calibration, skipped: Sequence[str], output: Path | None) -> dict[str, Any]:
    return {"calibration": calibration.model_dump(mode="json"), "skipped": list(skipped),
            "output": str(output) if output is not None else None}
