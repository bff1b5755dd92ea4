"""`gpuscout doctor` as a screen: the verdict, one line per finding with its place in the band, the measurements.

Pure rendering of a doctor `BenchResult` (its `doctor` verdict and cases). At 80 columns every table
keeps its figures whole; the band sources, the exit codes and long explanations sit under the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.doctor.verdict import EXIT_CODES
from gpuscout.hardware.bands import load_bands
from gpuscout.report.layout import label_column, number_column, prose_column
from gpuscout.report.numbers import flops, rate, seconds, sig
from gpuscout.results.schema import BenchResult, Case, DoctorFinding, DoctorVerdict, Metric

STATUS_STYLE = {"fail": "bold red", "warn": "yellow", "error": "magenta", "pass": "green", "info": "dim"}
OUTCOME_STYLE = {"keep": "bold green", "return": "bold red", "inconclusive": "bold yellow"}
ORDER = {"fail": 0, "warn": 1, "error": 2, "pass": 3, "info": 4}
# Per-sample series kept for compare, too long for a screen.
HIDDEN_METRICS = ("soak_flop_per_s",)


def doctor_screen(result: BenchResult, output: Path | None, *, wide: bool = False,
                  stored_as: int | None = None) -> RenderableType:
    """The verdict, its findings, the measurements; `stored_as` is the run's id in the results store."""
    verdict = result.doctor
    parts: list[RenderableType] = [_head(result)]
    if verdict is not None:
        parts += [Text(f"{verdict.outcome.upper()}  {verdict.text}", style=OUTCOME_STYLE[verdict.outcome]),
                  findings_table(verdict.findings, wide=wide)]
    parts += measurement_tables(result.cases)
    if verdict is not None:
        parts += _source_lines(verdict.findings)
        parts.append(Text(f"exit code {EXIT_CODES[verdict.outcome]} ({verdict.outcome}); doctor exits 0 to keep, "
                          "3 to return, 4 when inconclusive, 1 on a user error", style="dim"))
    if not result.complete:
        parts.append(Text("Incomplete run: stopped before every check ran (what finished is above).",
                          style="bold yellow"))
    parts.append(_kept(output, stored_as))
    return Group(*parts)


def _kept(output: Path | None, stored_as: int | None) -> Text:
    if output is not None:
        return Text(f"Result written to {output}", style="green")
    if stored_as is not None:
        return Text(f"Result kept in the results store as run {stored_as} (`gpuscout results export {stored_as} "
                    "-o FILE` writes it to a file).", style="green")
    return Text("Result not saved: pass -o FILE to keep it.", style="yellow")


def _head(result: BenchResult) -> Text:
    fp, verdict = result.fingerprint, result.doctor
    where = f"{fp.gpu_count} × {fp.gpu_name}" if fp.gpu_name else f"CPU: {fp.cpu_model}"
    against = verdict.expected.get("source") if verdict is not None else None
    return Text.assemble(("gpuscout doctor", "bold"), f" — {where}" + (f", held against {against}" if against else "")
                         + f" ({result.fixed.device}, {result.fixed.settings.get('nproc')} workers"
                         + (", --quick)" if result.fixed.settings.get("quick") else ")"))


def findings_table(findings: Sequence[DoctorFinding], *, wide: bool = False) -> Table:
    """Failures, warnings and errors first; passes; then readings with nothing to judge them against
    (left out unless `wide`, counted in the title)."""
    shown = sorted((f for f in findings if wide or f.status != "info"), key=lambda f: ORDER[f.status])
    hidden = len(findings) - len(shown)
    title = "findings" + (f" ({hidden} readings without a band: --wide shows them)" if hidden else "")
    table = Table(title=title, title_justify="left", title_style="bold")
    label_column(table, "")
    prose_column(table, "finding")
    number_column(table, "in band")
    for f in shown:
        table.add_row(Text(f.status.upper(), style=STATUS_STYLE[f.status]), Text(f.message), _percentile(f))
    return table


def _percentile(f: DoctorFinding) -> str:
    if f.percentile is None:
        return ""
    if f.percentile < 0:
        return "below"
    return "above" if f.percentile > 100 else f"{f.percentile:.0f}%"


def measurement_tables(cases: Sequence[Case]) -> list[RenderableType]:
    parts: list[RenderableType] = [_per_check_table(cases)]
    pairs = next((c for c in cases if c.name == "gpu-to-gpu copies" and c.metrics), None)
    if pairs is not None:
        parts.append(pair_matrix(pairs))
    reduce = next((c for c in cases if c.name == "all-reduce" and c.metrics), None)
    if reduce is not None:
        parts.append(allreduce_table(reduce))
    return parts


def _per_check_table(cases: Sequence[Case]) -> Table:
    table = Table(title="measurements", title_justify="left", title_style="bold")
    prose_column(table, "check")
    label_column(table, "metric")
    number_column(table, "value")
    for case in cases:
        if case.name in ("gpu-to-gpu copies", "all-reduce"):
            continue
        if case.failure is not None:
            table.add_row(case.name, Text(case.failure.kind, style="red"),
                          Text(case.failure.message.splitlines()[0][:60], style="red"))
            continue
        for m in case.metrics:
            if m.name not in HIDDEN_METRICS:
                table.add_row(case.name, m.name, metric_value(m))
    return table


def metric_value(m: Metric) -> str:
    match m.unit:
        case "FLOP/s":
            return flops(m.value) if m.value >= 1e12 else f"{sig(m.value / 1e9)} GFLOP/s"
        case "bytes/s":
            return rate(m.value)
        case "s":
            return seconds(m.value)
    return f"{sig(m.value)} {m.unit}".strip()


def pair_matrix(case: Case) -> Table:
    """GPU-to-GPU bandwidth, sender in rows and receiver in columns, GB/s."""
    cells: dict[tuple[int, int], float] = {}
    for m in case.metrics:
        src, _, dst = m.name.removeprefix("p2p_").removesuffix("_bytes_per_s").partition("_to_")
        if src.isdigit() and dst.isdigit():
            cells[int(src), int(dst)] = m.value
    ranks = sorted({r for pair in cells for r in pair})
    what = "worker → worker" if case.params.get("device") == "cpu" else "GPU → GPU"
    table = Table(title=f"{what}, GB/s", title_justify="left", title_style="bold",
                  caption="row sends, column receives", caption_justify="left")
    label_column(table, "")
    for r in ranks:
        number_column(table, str(r))
    for row in ranks:
        table.add_row(str(row), *(sig(cells[row, col] / 1e9) if (row, col) in cells else "—" for col in ranks))
    return table


def allreduce_table(case: Case) -> Table:
    table = Table(title=f"all-reduce, {case.params.get('world_size')} ranks ({case.params.get('backend')})",
                  title_justify="left", title_style="bold")
    number_column(table, "message")
    number_column(table, "bus GB/s")
    number_column(table, "alg GB/s")
    by_name = {m.name: m for m in case.metrics}
    for m in case.metrics:
        if not m.name.startswith("busbw_"):
            continue
        size = int(m.name.split("_")[1])
        alg = by_name.get(f"algbw_{size}_bytes_per_s")
        table.add_row(f"{size / 2**20:g} MiB", sig(m.value / 1e9), sig(alg.value / 1e9) if alg else "—")
    wrong = by_name.get("wrong_elements")
    if wrong is not None:
        table.caption = f"{wrong.value:,.0f} wrong elements"
    return table


def _source_lines(findings: Sequence[DoctorFinding]) -> list[RenderableType]:
    ids = list(dict.fromkeys(s.strip() for f in findings for s in f.source.split(",") if s.strip()))
    sources = load_bands().sources
    return [Text(f"[{i}] {sources[i]}", style="dim") for i in ids if i in sources]


def attached_doctor_parts(verdict: DoctorVerdict) -> list[RenderableType]:
    """The doctor result a bench result carries (bench --doctor): its outcome and what did not pass."""
    when = verdict.checked_at.strftime("%Y-%m-%d %H:%M UTC") if verdict.checked_at else "unknown time"
    head = Text.assemble(("doctor ", "bold"), f"({when}, {verdict.file or 'attached'}): ",
                         (verdict.outcome.upper(), OUTCOME_STYLE[verdict.outcome]), f" — {verdict.text}")
    doubts = [f for f in verdict.findings if f.status in ("fail", "warn", "error")]
    return [head, *(Text(f"  {f.status}: {f.message}", style=STATUS_STYLE[f.status]) for f in doubts[:8])]
