"""`gpuscout bench`: load the spec, measure it on this machine, write the result, render it.

The result is written atomically (`results.store.save_result`) when `-o FILE` is given. Ctrl-C
stops the run after killing the case in flight; what finished is still written (complete=false),
the tables go to stderr and the command exits 130 (128 + SIGINT, the shell convention).
On a GPU whose name matches a catalog SKU, gpuscout's own estimate for that GPU is shown beside
the measurement (estimate job time vs measured projection, estimated vs measured peak memory).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.results.schema import BenchResult, Case, Fingerprint, Metric, PeakMemory

EXAMPLES_HINT = "Pass a job spec, e.g. examples/tiny-finetune.toml or examples/tiny-inference.toml"


def run_bench_command(job_path: Path | None, *, output: Path | None, device: str, warmup: int, repeats: int,
                      layers: int | None, probe: bool, dataset: Path | None, created_at: str | None,
                      seed: int) -> tuple[dict[str, Any], RenderableType]:
    from gpuscout.cli.estimate_view import resolve_model
    from gpuscout.measure.bench import run_bench
    from gpuscout.workload.job import load_job

    if job_path is None and not probe:
        raise SpecError("bench needs a job spec.", "It measures your real task, which the spec describes.",
                        f"{EXAMPLES_HINT} (or --probe alone for the machine probes).")
    job = load_job(job_path) if job_path is not None else None
    base_dir = job_path.parent if job_path is not None else None
    model = resolve_model(job, base_dir) if job is not None else None  # validates the job against its model
    settings = _settings(device=device, warmup=warmup, repeats=repeats, layers=layers, dataset=dataset,
                         created_at=created_at, seed=seed)
    try:
        result = run_bench(job, base_dir=base_dir, settings=settings, probe=probe, progress=True)
    except KeyboardInterrupt:
        raise _interrupted_exit() from None
    if output is not None:
        from gpuscout.results.store import save_result

        save_result(result, output)
    renderable = render_result(result, output=output, estimate=_estimate_parts(job, model, result))
    if _was_interrupted(result):
        from rich.console import Console

        Console(stderr=True).print(renderable)
        raise _interrupted_exit()
    return result.model_dump(mode="json"), renderable


def _settings(*, device: str, warmup: int, repeats: int, layers: int | None, dataset: Path | None,
              created_at: str | None, seed: int) -> Any:
    from gpuscout.measure.harness import BenchSettings

    if dataset is not None and not dataset.is_file():
        raise SpecError(f"No dataset file at {dataset}.", "--dataset names the data to feed the model.",
                        'Pass a JSON Lines file with a "text" field per line, or a plain-text file.')
    try:
        return BenchSettings(device=device, warmup=warmup, repeats=repeats, layers=layers, seed=seed,
                             dataset=str(dataset.resolve()) if dataset else None,
                             created_at=parse_created_at(created_at) if created_at else None)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SpecError(f"--{first['loc'][0]}: {first['msg']}.", "bench needs repeats ≥ 1, warmup ≥ 0, layers ≥ 1.",
                        "Correct the option.") from None


def parse_created_at(text: str) -> float:
    """ISO 8601 time → epoch seconds; a time without a zone is taken as UTC."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SpecError(f"--created-at {text!r} is not an ISO 8601 time.",
                        "It marks when the machine was created, the origin of the startup phases.",
                        "Use e.g. 2025-06-01T12:00:00Z (a time without a zone is taken as UTC).") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _was_interrupted(result: BenchResult) -> bool:
    return any(c.failure is not None and c.failure.kind == "interrupted" for c in result.cases)


def _interrupted_exit() -> Exception:
    import typer

    return typer.Exit(130)


# --- rendering -----------------------------------------------------------------------------------


def render_result(result: BenchResult, *, output: Path | None,
                  estimate: list[RenderableType] | None = None) -> RenderableType:
    fp = result.fingerprint
    where = f"{fp.gpu_name} ({fp.gpu_sku or 'no catalog SKU'})" if fp.gpu_name else f"CPU: {fp.cpu_model}"
    head = Text.assemble(("gpuscout bench", "bold"), f" — {result.name} ({result.kind}) on {where}")
    parts: list[RenderableType] = [head, _fixed_line(result)]
    for case in result.cases:
        parts += case_parts(case)
    parts += estimate or []
    parts.append(fingerprint_table(fp))
    parts += [Text(f"note: {n}", style="dim") for n in result.notes]
    if not result.complete:
        parts.append(Text("Incomplete run: some cases did not run (see notes).", style="bold yellow"))
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


def case_parts(case: Case) -> list[RenderableType]:
    title = f"{case.name}" + (f" — {case.layers} of {case.full_layers} layers built" if case.layers else "")
    if case.failure is not None:
        size = ", ".join(f"{k}={v}" for k, v in case.failure.size.items() if v is not None)
        return [Text.assemble((f"{title}: FAILED ({case.failure.kind})", "bold red"),
                              (f" at {size}\n  {case.failure.message}", "red"))]
    parts: list[RenderableType] = [metric_table(title, case.metrics)]
    if any(m.extrapolated for m in case.metrics):
        parts.append(Text(f"magenta rows (*_full_depth): extrapolated from {case.layers} built layers to "
                          f"{case.full_layers}, not measured", style="magenta"))
    parts.append(Text(f"peak memory: {memory_line(case.peak_memory)}"))
    if case.startup:
        parts.append(Text("startup: " + " · ".join(f"{p.name} {p.seconds:,.2f} s" for p in case.startup)))
    parts += [Text(f"  {n}", style="dim") for n in case.notes]
    return parts


def metric_table(title: str, metrics: tuple[Metric, ...]) -> Table:
    """One row per metric: mean, percentiles, the 95% CI half-width of the mean, spread (IQR/median)."""
    repeats = max((m.summary.n for m in metrics if m.summary), default=1)
    table = Table(title=f"{title} · {repeats} repeats", title_justify="left", title_style="bold")
    for column in ("metric", "mean", "P50", "P95", "P99", "95% CI ±", "spread", "unit"):
        table.add_column(column, justify="left" if column in ("metric", "unit") else "right")
    for m in metrics:
        s = m.summary
        name = Text(m.name, style="magenta" if m.extrapolated else "")
        if s is None:
            table.add_row(name, fmt(m.value), "", "", "", "", "", m.unit)
            continue
        spread = Text(f"{s.spread:.0%}" + (" !" if s.spread_flag else ""), style="yellow" if s.spread_flag else "")
        table.add_row(name, fmt(s.mean), fmt(s.p50), fmt(s.p95), fmt(s.p99), fmt((s.ci95_high - s.ci95_low) / 2),
                      spread, m.unit)
    return table


def fmt(value: float) -> str:
    """Four significant figures; thousands grouped; no exponent for everyday magnitudes."""
    if value == 0 or not math.isfinite(value):
        return str(value)
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 1e-3:
        return f"{value:.4g}"
    return f"{value:.3e}"


def memory_line(peak: PeakMemory) -> str:
    views = [("torch allocated", peak.torch_allocated_bytes), ("torch reserved", peak.torch_reserved_bytes),
             ("NVML process", peak.nvml_used_bytes), ("NVML device", peak.nvml_device_used_bytes),
             ("process RSS", peak.process_rss_bytes), ("device total", peak.device_total_bytes),
             ("full depth (extrapolated)", peak.extrapolated_allocated_bytes)]
    return " · ".join(f"{name} {human_bytes(v)}" for name, v in views if v is not None) or "not measured"


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


def fingerprint_table(fp: Fingerprint) -> Table:
    table = Table(title="machine", title_justify="left", title_style="bold", show_header=False)
    table.add_column("field")
    table.add_column("value")
    gpu = (f"{fp.gpu_count} × {fp.gpu_name}, {human_bytes(fp.gpu_memory_bytes or 0)}, SKU {fp.gpu_sku or '—'}"
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
        ("RAM / disk free", f"{human_bytes(fp.ram_bytes or 0)} / {human_bytes(fp.disk_free_bytes or 0)}"),
        ("Python / platform", f"{fp.python} / {fp.platform}"),
        ("libraries", ", ".join(f"{k} {v}" for k, v in fp.libraries.items())),
    ]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    return table


# --- gpuscout's estimate beside the measurement ---------------------------------------------------


def _estimate_parts(job: Any, model: Any, result: BenchResult) -> list[RenderableType]:
    sku = result.fingerprint.gpu_sku
    if job is None or model is None or result.fixed.device != "cuda":
        return []
    if sku is None:
        return [Text("No estimate beside: this GPU matched no catalog SKU.", style="dim")]
    from gpuscout.estimator.memory import estimate_memory
    from gpuscout.estimator.speed import estimate_speed
    from gpuscout.hardware.catalog import find_gpu

    try:
        gpu = find_gpu(sku)
        speed, memory = estimate_speed(job, model, gpu), estimate_memory(job, model, gpu)
    except GpuscoutError as exc:
        return [Text(f"No estimate beside: {exc.what}", style="dim")]
    return [estimate_table(result, speed.metrics | {"job_s": speed.job_s}, memory.peak_bytes, sku)]


def estimate_table(result: BenchResult, estimated: dict[str, float], peak_bytes: int, sku: str) -> Table:
    """gpuscout's estimate for this GPU against what the case at the job's own size measured."""
    table = Table(title=f"estimate ({sku}) beside the measurement", title_justify="left", title_style="bold")
    for column in ("metric", "estimate", "measured", "measured / estimate"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    case = next((c for c in reversed(result.cases) if c.failure is None), None)
    if case is None:
        return table
    measured = {m.name.removesuffix("_full_depth"): m.value for m in case.metrics
                if m.extrapolated == (case.layers is not None)}
    for name, value in estimated.items():
        if name in measured and value:
            table.add_row(name, fmt(value), fmt(measured[name]), f"{measured[name] / value:.2f}")
    peak = case.peak_memory.extrapolated_allocated_bytes or case.peak_memory.torch_reserved_bytes
    if peak:
        table.add_row("peak memory", human_bytes(peak_bytes), human_bytes(peak), f"{peak / peak_bytes:.2f}")
    return table
