"""`gpuscout bench`: a measured result as tables — fixed variables, metrics per case, memory, machine."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.report.doctor import attached_doctor_parts
from gpuscout.report.layout import label_column, number_column, prose_column
from gpuscout.report.numbers import common_unit, in_unit, percent, ratio, seconds, size, value_in
from gpuscout.report.telemetry import finding_lines, telemetry_summary
from gpuscout.results.beside import EstimateBeside
from gpuscout.results.ratios import CompareOptions
from gpuscout.results.schema import BenchResult, Case, Fingerprint, Metric, PeakMemory

# Run means that vary by more than this are marked, as `compare` will call them noisy.
NOISY_CV = CompareOptions().noisy_cv


def bench_screen(result: BenchResult, beside: EstimateBeside | None, output: Path | None, *,
                 wide: bool = False, stored_as: int | None = None) -> RenderableType:
    """The bench result: fixed variables, each case's metrics, memory and startup, the machine.

    `wide` adds each metric's P99 and 95% CI half-width; `stored_as` is its id in the results store.
    """
    estimate = [estimate_table(beside)] if beside is not None else []
    fp = result.fingerprint
    where = f"{fp.gpu_name} ({fp.gpu_sku or 'no catalog SKU'})" if fp.gpu_name else f"CPU: {fp.cpu_model}"
    head = Text.assemble(("gpuscout bench", "bold"), f" — {result.name} ({result.kind}) on {where}")
    parts: list[RenderableType] = [head, _fixed_line(result)]
    for case in result.cases:
        parts += case_parts(case, wide=wide)
    parts += estimate or []
    parts.append(fingerprint_table(fp))
    parts += attached_doctor_parts(result.doctor) if result.doctor is not None else []
    parts += [Text(f"note: {n}", style="dim") for n in result.notes]
    if not result.complete:
        parts.append(Text("Incomplete run: some cases did not run (see notes).", style="bold yellow"))
    if output is None and stored_as is not None:
        parts.append(Text(f"Result kept in the results store as run {stored_as} (`gpuscout results export "
                          f"{stored_as} -o FILE` writes it to a file).", style="green"))
        return Group(*parts)
    parts.append(Text(f"Result written to {output}" if output else "Result not saved: pass -o FILE to keep it.",
                      style="green" if output else "yellow"))
    return Group(*parts)


def _fixed_line(result: BenchResult) -> Text:
    f = result.fixed
    sliced = f", depth slice {f.layers} layers" if f.layers else ""
    settings = ", ".join(f"{k}={v}" for k, v in f.settings.items() if v is not None)
    return Text(f"fixed: model {f.model} (config sha256 {f.model_config_hash[:12]}), data {f.data}, seed {f.seed}, "
                f"precision {f.precision}, device {f.device}, warm-up {f.warmup}, repeats {f.repeats}{sliced}; "
                f"{settings}", style="dim")


def case_parts(case: Case, *, wide: bool = False) -> list[RenderableType]:
    title = f"{case.name}" + (f" — {case.layers} of {case.full_layers} layers built" if case.layers else "")
    if case.failure is not None:
        size = ", ".join(f"{k}={v}" for k, v in case.failure.size.items() if v is not None)
        return [Text.assemble((f"{title}: FAILED ({case.failure.kind})", "bold red"),
                              (f" at {size}\n  {case.failure.message}", "red"))]
    parts: list[RenderableType] = [metric_table(title, case.metrics, wide=wide, runs=case.runs)]
    if any(m.extrapolated for m in case.metrics):
        parts.append(Text(f"magenta rows (*_full_depth): extrapolated from {case.layers} built layers to "
                          f"{case.full_layers}, not measured", style="magenta"))
    parts.append(Text(f"peak memory: {memory_line(case.peak_memory)}"))
    if case.startup:
        parts.append(Text("startup: " + " · ".join(f"{p.name} {seconds(p.seconds)}" for p in case.startup)))
    parts += _telemetry_parts(case)
    parts += [Text(f"  run failed ({f.kind}): {f.message.splitlines()[0] if f.message else ''}", style="red")
              for f in case.failed_runs]
    parts += [Text(f"  {n}", style="dim") for n in case.notes]
    return parts


def _telemetry_parts(case: Case) -> list[RenderableType]:
    parts: list[RenderableType] = [Text(line, style="dim") for line in telemetry_summary(case)]
    for line, side_effect in finding_lines(case):
        parts.append(Text(f"  {'!' if side_effect else '-'} {line}", style="bold red" if side_effect else "yellow"))
    return parts


def metric_table(title: str, metrics: tuple[Metric, ...], *, wide: bool = False, runs: int = 1) -> Table:
    """One row per metric in one unit: mean, P50, P95, spread (IQR/median); `wide` adds P99 and the CI.

    The mean is the mean of the run means. The 95% CI column is the half-width of the mean's
    confidence interval. With several runs, "run CV" is how much the run means vary.
    """
    per_run = max((len(r.samples) for m in metrics for r in m.runs), default=0)
    samples = max((m.summary.n for m in metrics if m.summary), default=1)
    count = f"{runs} runs × {per_run} repeats" if runs > 1 and per_run else f"{samples} repeats"
    table = Table(title=f"{title} · {count}", title_justify="left", title_style="bold")
    prose_column(table, "metric")
    label_column(table, "unit")
    more = ("P99", "95% CI ±") if wide else ()
    columns = ("mean", "P50", "P95", *more, "spread", *(("run CV",) if runs > 1 else ()))
    for column in columns:
        number_column(table, column)
    for m in metrics:
        table.add_row(*_metric_cells(m, wide=wide), *((_run_cv(m),) if runs > 1 else ()))
    return table


def _run_cv(m: Metric) -> Text:
    cv = m.between_run_cv
    if cv is None:
        return Text("-")
    noisy = cv > NOISY_CV
    return Text(percent(cv, 1) + (" !" if noisy else ""), style="yellow" if noisy else "")


def _metric_cells(m: Metric, *, wide: bool) -> list[str | Text]:
    s = m.summary
    name = Text(m.name, style="magenta" if m.extrapolated else "")
    figures = [m.value] if s is None else [s.mean, s.p50, s.p95, s.p99]
    unit, factor = common_unit(figures, m.unit)
    if s is None:
        return [name, unit, in_unit(m.value, factor), "", "", *(("", "") if wide else ()), ""]
    spread = Text(percent(s.spread) + (" !" if s.spread_flag else ""), style="yellow" if s.spread_flag else "")
    more = (in_unit(s.p99, factor), in_unit((s.ci95_high - s.ci95_low) / 2, factor)) if wide else ()
    return [name, unit, in_unit(s.mean, factor), in_unit(s.p50, factor), in_unit(s.p95, factor), *more, spread]


def memory_line(peak: PeakMemory) -> str:
    views = [("torch allocated", peak.torch_allocated_bytes), ("torch reserved", peak.torch_reserved_bytes),
             ("NVML process", peak.nvml_used_bytes), ("NVML device", peak.nvml_device_used_bytes),
             ("process RSS", peak.process_rss_bytes), ("device total", peak.device_total_bytes),
             ("full depth (extrapolated)", peak.extrapolated_allocated_bytes)]
    return " · ".join(f"{name} {size(v)}" for name, v in views if v is not None) or "not measured"


def fingerprint_table(fp: Fingerprint) -> Table:
    table = Table(title="machine", title_justify="left", title_style="bold", show_header=False)
    table.add_column("field")
    table.add_column("value")
    gpu = (f"{fp.gpu_count} × {fp.gpu_name}, {_size(fp.gpu_memory_bytes)}, SKU {fp.gpu_sku or '—'}"
           if fp.gpu_name else "none (CPU run)")
    rows: list[tuple[str, str | None]] = [
        ("GPU", gpu),
        ("driver / CUDA / CC", " / ".join(str(v or "—") for v in (fp.driver, fp.cuda, fp.compute_capability))
         if fp.gpu_name else None),
        ("clocks / power", f"SM {fp.sm_clock_mhz} MHz, memory {fp.memory_clock_mhz} MHz, {fp.power_limit_w} W"
         if fp.sm_clock_mhz else None),
        ("PCIe / MIG / ECC", f"gen {fp.pcie_generation} x{fp.pcie_width} / {fp.mig_mode} / {fp.ecc}"
         if fp.pcie_generation else None),
        ("CPU", f"{fp.cpu_model}, {fp.cpu_cores} cores"),
        ("RAM / disk free", f"{_size(fp.ram_bytes)} / {_size(fp.disk_free_bytes)}"),
        ("Python / platform", f"{fp.python} / {fp.platform}"),
        ("libraries", ", ".join(f"{k} {v}" for k, v in fp.libraries.items())),
    ]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    return table


def _size(nbytes: int | None) -> str:
    """A size the probe may not have read: '—' rather than a misleading '0 B'."""
    return "—" if nbytes is None else size(nbytes)


def estimate_table(beside: EstimateBeside) -> RenderableType:
    """gpuscout's estimate for this GPU against what the case at the job's own size measured."""
    if not beside.rows:
        return Text(f"No estimate beside: {beside.reason}.", style="dim")
    table = Table(title=f"estimate ({beside.gpu_sku}) beside the measurement ({beside.case})", title_justify="left",
                  title_style="bold")
    prose_column(table, "metric")
    for column in ("estimate", "measured", "measured\n/ estimate"):
        number_column(table, column)
    for row in beside.rows:
        table.add_row(row.metric, value_in(row.estimate, row.unit), value_in(row.measured, row.unit),
                      ratio(row.ratio))
    return table
