"""The thin shell: parse the options → call one `gpuscout.api` function → render with `gpuscout.report`.

Heavy modules (the estimator, torch for --trace, the load client) are imported inside the commands,
so `gpuscout --help` stays fast. User errors print their three parts and exit 1, no traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuscout.cli.doctor import doctor
from gpuscout.cli.load import load as load_command
from gpuscout.cli.offers import offers_app
from gpuscout.cli.options import (
    BillingOption,
    CalibrationOption,
    JsonFlag,
    NoCalibrationFlag,
    OutputOption,
    RegionOption,
    RunsOption,
    WideFlag,
    one_calibration_choice,
)
from gpuscout.cli.output import console, emit, worded
from gpuscout.cli.report import report
from gpuscout.cli.results import NoStoreFlag, StoreOption, record, results_app
from gpuscout.cli.spec import spec
from gpuscout.cli.stdio import emit_beside, no_json_with_stdout, stdio
from gpuscout.cli.trial import trial
from gpuscout.errors import GpuscoutError
from gpuscout.report.escape import printable, screen_console

app = typer.Typer(
    name="gpuscout",
    help="Which rented GPU finishes your job for the least total money. Start with `gpuscout estimate`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(doctor)


def _version(shown: bool) -> None:
    if shown:
        from gpuscout.host import package_version

        sys.stdout.write(f"gpuscout {package_version('gpuscout') or 'unknown (not installed)'}\n")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print gpuscout's version and exit.")] = False) -> None:
    """Which rented GPU finishes your job for the least total money. Start with `gpuscout estimate`."""

CurrencyOption = Annotated[str | None, typer.Option(
    "--currency", help="Show amounts in this ISO currency, e.g. CNY; needs a rate for it (--fx or the sheet).")]
PickCurrencyOption = Annotated[str | None, typer.Option(  # only pick takes a --budget
    "--currency", help="Show amounts (and read --budget) in this ISO currency, e.g. CNY; needs a rate for it.")]
FxOption = Annotated[list[str] | None, typer.Option("--fx", help="Exchange rate CCY=USD per unit, e.g. CNY=0.14.")]
KeepStoppedOption = Annotated[float, typer.Option(
    help="Keep the machine stopped this many days after the job instead of releasing it (disks bill).")]
MarginOption = Annotated[float | None, typer.Option(
    "--margin", metavar="PCT", help="Headroom to demand, % of the estimated peak, in place of the validated "
    "error band (fits / tight / does not fit).")]
JobArg = Annotated[str | None, typer.Argument(
    metavar="JOB", help="Job spec (TOML path) or a shipped example's name; without it, the built-in default job.")]


@app.command()
def gpus(as_json: JsonFlag = False) -> None:
    """List the GPU catalog: memory, bandwidth, dense peaks, interconnect, open verification marks."""
    from gpuscout import api
    from gpuscout.report.catalog import gpu_table
    from gpuscout.report.payload import catalog_payload

    catalog = api.gpus()
    emit(lambda: catalog_payload(catalog), lambda: gpu_table(catalog), as_json)


@app.command()
def examples(as_json: JsonFlag = False) -> None:
    """List the example job specs and price sheet shipped with gpuscout, and where they are."""
    from gpuscout import api
    from gpuscout.report.examples import examples_payload, examples_table

    folder = api.examples_dir()
    emit(lambda: examples_payload(folder), lambda: examples_table(folder), as_json)


@app.command()
def model(
    ref: Annotated[str, typer.Argument(help="config.json, model directory, or preset id (see --list).")] = "",
    list_presets: Annotated[bool, typer.Option("--list", help="List the built-in presets.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show a model's shape: layers, heads, experts, parameters, weight bytes, KV cache per token."""
    if list_presets or not ref:
        from gpuscout import api
        from gpuscout.report.model import preset_table

        presets = api.model_presets()
        emit(lambda: {"llm": [p.id for p in presets.llm], "image": list(presets.image), "video": list(presets.video)},
             lambda: preset_table(presets.llm, presets.image, presets.video),
             as_json)
        return
    from gpuscout import api
    from gpuscout.report.model import model_screen
    from gpuscout.report.payload import model_payload

    report = api.describe_model(ref)
    emit(lambda: model_payload(report.shape, report.weight_bytes_by_format, report.kv_bytes_per_token_by_dtype),
         lambda: model_screen(report.shape, report.weight_bytes_by_format, report.kv_bytes_per_token_by_dtype),
         as_json)


@app.command()
def estimate(
    job: JobArg = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", "-g",
                                                  help="GPU to detail (repeatable); default: every GPU.")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Also trace the real model step (needs torch).")] = False,
    layers: Annotated[int | None, typer.Option("--layers", help="Trace only K layers (faster).")] = None,
    calibration: CalibrationOption = None,
    no_calibration: NoCalibrationFlag = False,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
    margin: MarginOption = None,
) -> None:
    """Memory per GPU: breakdown, fit and headroom, what to change, and the largest sizes that fit."""
    from gpuscout import api
    from gpuscout.report.calibration import calibration_payload
    from gpuscout.report.estimate import estimate_screen
    from gpuscout.report.payload import estimate_payload

    one_calibration_choice(calibration, no_calibration)
    with stdio() as io:
        job = io.read_job(job)
        report = api.estimate(job, gpus=gpu or (), trace=trace, trace_layers=layers, calibration=calibration,
                              use_calibration=not no_calibration, margin_pct=margin)
    emit(lambda: estimate_payload(report.job, report.screening, report.trace, report.trace_analytic,
                                  report.capacities)
         | calibration_payload(report.calibration, report.calibration_path),
         lambda: estimate_screen(report.screening, detailed=report.detailed, wide=wide, trace=report.trace,
                                 trace_analytic=report.trace_analytic, trace_scope=report.trace_scope,
                                 trace_skipped=report.trace_skipped, calibration=report.calibration,
                                 capacities=report.capacities), as_json)


@app.command()
def pick(
    job: JobArg = None,
    offers: Annotated[list[Path] | None, typer.Option("--offers", help="Price sheet (TOML) or SkyPilot catalog "
                                                      "vms.csv; repeat for several (read as one); default: the "
                                                      "bundled example sheet.")] = None,
    cloud: Annotated[str | None, typer.Option(help="Cloud of a SkyPilot vms.csv (default: its folder).")] = None,
    deadline: Annotated[str | None, typer.Option(help="Exclude offers slower than this, e.g. 12h.")] = None,
    budget: Annotated[float | None, typer.Option(help="Exclude offers dearer than this (in --currency).")] = None,
    currency: PickCurrencyOption = None,
    fx: FxOption = None,
    keep_stopped_days: KeepStoppedOption = 0.0,
    egress_gb: Annotated[float, typer.Option(help="Data moved out of the machine, GB.")] = 0.0,
    failed_attempts: Annotated[float, typer.Option(help="Expected failed attempts before success.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the spot simulation.")] = 0,
    top: Annotated[int, typer.Option(min=0, help="Ranked offers shown (the cheapest, plus the Pareto frontier); "
                                                  "0 shows all.")] = 25,
    as_written: Annotated[bool, typer.Option("--as-written", help="No plans: exclude offers the job as written "
                                             "does not fit.")] = False,
    dataset_gb: Annotated[float | None, typer.Option(help="Size of the job's dataset, GB (disk, transfer).")] = None,
    dataset_region: Annotated[str | None, typer.Option(help="Where it lives: CLOUD:REGION "
                                                       "(aws:us-east-1).")] = None,
    dataset_url: Annotated[str | None, typer.Option(help="Or its URL (priced as internet egress).")] = None,
    dataset_egress_per_gb: Annotated[float | None, typer.Option(help="Your egress price at the source, "
                                                                "USD/GB (default: dated examples).")] = None,
    dataset_gbps: Annotated[float | None, typer.Option(help="Your transfer bandwidth, Gbit/s.")] = None,
    calibration: CalibrationOption = None,
    no_calibration: NoCalibrationFlag = False,
    load: Annotated[list[Path] | None, typer.Option("--load", help="A `gpuscout load` result of one replica: its "
                                                    "capacity at the SLO replaces the estimate on its GPU.")] = None,
    target_rps: Annotated[float | None, typer.Option(help="Serving: the request rate to provision replicas for.")] \
        = None,
    doctor_result: Annotated[list[Path] | None, typer.Option("--doctor", help="A `gpuscout doctor` result: its "
                                                             "measured start-up replaces its offer's.")] = None,
    include_placeholders: Annotated[bool, typer.Option("--include-placeholders", help="Rank offers whose price "
                                                        "is a placeholder (nobody observed it).")] = False,
    interruptions_per_hour: Annotated[float | None, typer.Option(help="Spot offers that state no interruption "
                                                                 "rate: expected interruptions per hour, 0 to 30.")] \
        = None,
    spot_advisor: Annotated[Path | None, typer.Option("--spot-advisor", help="Spot Advisor-style file (TOML): the "
                                                      "monthly interruption band per instance type and region.")] \
        = None,
    store: StoreOption = None,
    no_store: NoStoreFlag = False,
    wide: WideFlag = False,
    explain: Annotated[str | None, typer.Option("--explain", metavar="OFFER_ID", help="Show one offer in full: "
                                                "its layout, bands and every line of its bill.")] = None,
    as_json: JsonFlag = False,
    margin: MarginOption = None,
) -> None:
    """Rank offers by the total cost of the whole job: fit, runtime, bill, $/unit, SLO, Pareto frontier."""
    from gpuscout import api
    from gpuscout.cost.billing import cost_options
    from gpuscout.report.bill_block import find_row
    from gpuscout.report.calibration import calibration_payload
    from gpuscout.report.payload import pick_payload
    from gpuscout.report.pick import explain_screen, pick_screen

    one_calibration_choice(calibration, no_calibration)
    with stdio() as io:
        job = io.read_job(job)
        load = io.read_all(load or [], ".json", "--load")
        doctor_result = io.read_all(doctor_result or [], ".json", "--doctor")
        report = api.pick(job, offers=offers or None, cloud=cloud, deadline=deadline, budget=budget, currency=currency,
                          fx=fx or (), options=cost_options(egress_gb=egress_gb, failed_attempts=failed_attempts,
                                                            seed=seed, keep_stopped_days=keep_stopped_days),
                          as_written=as_written, dataset_gb=dataset_gb, dataset_region=dataset_region,
                          dataset_url=dataset_url, dataset_egress_per_gb=dataset_egress_per_gb,
                          dataset_gbps=dataset_gbps,
                          calibration=calibration, use_calibration=not no_calibration, load_results=load or (),
                          target_rps=target_rps, doctor_results=doctor_result or (),
                          include_placeholders=include_placeholders, interruptions_per_hour=interruptions_per_hour,
                          spot_advisor=spot_advisor, margin_pct=margin)
    payload = pick_payload(report.job, report.pick, report.offers_notes) | calibration_payload(
        report.calibration, report.calibration_path)
    if explain is not None:  # an unknown id is a user error before anything is recorded
        find_row(report.pick, explain)
    record("pick", payload, store=store, no_store=no_store)
    emit(lambda: payload,
         lambda: explain_screen(report.pick, explain) if explain is not None else
         pick_screen(report.pick, report.offers_notes, wide=wide, top=top, calibration=report.calibration),
         as_json)
    from gpuscout.api.exit_codes import pick_exit_code

    _exit_with(pick_exit_code(report.pick))


def _exit_with(code: int) -> None:
    """End the command with `code` (docs/design.md §4, the exit-code table) when it is not 0."""
    if code:
        raise typer.Exit(code)


@app.command()
def cost(
    usd_per_gpu_hour: Annotated[float | None, typer.Option(help="Price per GPU-hour, USD.")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs rented.")] = 1,
    hours: Annotated[float | None, typer.Option(help="Hours the job runs.")] = None,
    storage_usd: Annotated[float, typer.Option(help="Storage, USD.")] = 0.0,
    transfer_usd: Annotated[float, typer.Option(help="Data transfer, USD.")] = 0.0,
    retry_usd: Annotated[float, typer.Option(help="Failed attempts and retries, USD.")] = 0.0,
    increment_s: Annotated[float, typer.Option(help="Billing increment, s (shows the real bill).")] = 0.0,
    min_billed_s: Annotated[float, typer.Option(help="Minimum billed time per start, s.")] = 0.0,
    startup_s: Annotated[float, typer.Option(help="Billed startup before the job runs, s.")] = 0.0,
    idle_tail_s: Annotated[float, typer.Option(help="Billed idle time after the job ends, s.")] = 0.0,
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet to take --offer from.")] = None,
    offer: Annotated[str | None, typer.Option("--offer", help="Offer id: bill --hours under its rules.")] = None,
    currency: CurrencyOption = None,
    fx: FxOption = None,
    keep_stopped_days: KeepStoppedOption = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """Plain calculator: total = price × GPUs × hours + storage + transfer + retries (and the real bill)."""
    from gpuscout import api
    from gpuscout.cost.billing import cost_options
    from gpuscout.report.payload import bill_payload, calculator_payload
    from gpuscout.report.pick import bill_table, calculator_table

    report = api.cost(hours=hours, usd_per_gpu_hour=usd_per_gpu_hour, gpus=gpus, storage_usd=storage_usd,
                      transfer_usd=transfer_usd, retry_usd=retry_usd, increment_s=increment_s,
                      min_billed_s=min_billed_s, startup_s=startup_s, idle_tail_s=idle_tail_s, offers=offers,
                      offer=offer, currency=currency, fx=fx or (),
                      options=cost_options(keep_stopped_days=keep_stopped_days))
    if report.offer is not None and report.bill is not None:
        the_offer, bill = report.offer, report.bill
        emit(lambda: bill_payload(the_offer, bill, report.rates),
             lambda: bill_table(bill, f"{the_offer.id}: {report.hours:g} h of work, as billed", report.rates),
             as_json)
        return
    assert report.plain is not None
    plain, shown = report.plain, report.currency
    emit(lambda: calculator_payload(plain, report.billed, shown),
         lambda: calculator_table(plain, report.billed, shown), as_json)


@app.command()
def bench(
    job: Annotated[str | None, typer.Argument(metavar="JOB", help="Job spec (path or example name).")] = None,
    output: OutputOption = None,
    device: Annotated[str, typer.Option(help="auto | cuda | cpu.")] = "auto",
    warmup: Annotated[int, typer.Option(help="Untimed warm-up iterations per case.")] = 2,
    repeats: Annotated[int, typer.Option(help="Timed repeats per case.")] = 5,
    layers: Annotated[int | None, typer.Option(help="Build K layers and extrapolate to full depth.")] = None,
    probe: Annotated[bool, typer.Option("--probe", help="Machine probes: matmul, bandwidth, copies, disk.")] = False,
    dataset: Annotated[Path | None, typer.Option(help="Your data (JSONL/text) instead of synthetic tokens.")] = None,
    created_at: Annotated[str | None, typer.Option(help="When the machine was created (ISO time).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 0,
    runs: RunsOption = 3,
    region: RegionOption = None,
    billing: BillingOption = None,
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet holding this machine's offer.")] = None,
    offer: Annotated[str | None, typer.Option("--offer", help="This machine's offer: its region and tier.")] = None,
    doctor_result: Annotated[Path | None, typer.Option("--doctor", help="This machine's `gpuscout doctor -o` "
                                                       "result: recorded with the bench result.")] = None,
    store: StoreOption = None,
    no_store: NoStoreFlag = False,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Measure the job's real task on this machine: every case in its own process, fixed variables recorded.

    Every case runs --runs times, each in a fresh process, interleaved with the other cases, so
    compare can tell a real difference from drift. Ctrl-C, SIGTERM or SIGHUP stop the run after
    killing the case in flight; what finished is still written (complete=false), the tables go to
    stderr and the command exits 128 + the signal (130 for Ctrl-C).
    """
    from gpuscout import api
    from gpuscout.api.exit_codes import measured_exit_code
    from gpuscout.errors import SpecError
    from gpuscout.measure.harness import bench_settings
    from gpuscout.report.bench import bench_screen
    from gpuscout.report.payload import bench_payload
    from gpuscout.report.progress import step_bar
    from gpuscout.units import parse_time_s

    if job is None and not probe:
        raise SpecError("bench needs a job spec.", "It measures your real task, which the spec describes.",
                        "Pass a job spec, e.g. tiny-finetune or tiny-inference (`gpuscout examples`), or --probe "
                        "alone for the machine probes.")
    if dataset is not None and not dataset.is_file():
        raise SpecError(f"No dataset file at {dataset}.", "--dataset names the data to feed the model.",
                        'Pass a JSON Lines file with a "text" field per line, or a plain-text file.')
    with stdio() as io:  # `-`: the job or --doctor from stdin, `-o -` to stdout (the screen then to stderr)
        output = io.output(output, "bench.json")
        no_json_with_stdout(io, as_json)
        job = io.read_job(job)
        doctor_result = io.read(doctor_result, ".json", "--doctor")
        region, billing = api.where_rented(region, billing, offers, offer)
        settings = bench_settings(device=device, warmup=warmup, repeats=repeats, layers=layers, seed=seed, runs=runs,
                                  region=region, billing=billing, dataset=str(dataset.resolve()) if dataset else None,
                                  created_at=parse_time_s(created_at, "--created-at") if created_at else None)
        report = api.bench(job, settings=settings, probe=probe, output=output, progress=step_bar("bench"),
                           doctor=doctor_result)
        payload = bench_payload(report.result, report.estimate)
        stored = record("bench", payload, store=store, no_store=no_store)
        screen = bench_screen(report.result, report.estimate, None if io.to_stdout else report.output, wide=wide,
                              stored_as=stored)
        if report.stopped_by is not None:  # what finished is written; the shell sees 128 + the signal
            screen_console(stderr=True).print(screen)
            raise typer.Exit(128 + report.stopped_by)
        emit_beside(io, lambda: payload, lambda: screen, as_json)
    _exit_with(measured_exit_code(report.result))


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(metavar="RESULT.json...", help="Two or more bench results "
                                                  "(files, or ids of stored runs).")],
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet: total job cost per machine.")] = None,
    offer: Annotated[list[str] | None, typer.Option("--offer", help="Offer id per result, in order.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | md | json (--json is json).")] = "table",
    allow_diff: Annotated[bool, typer.Option("--allow-diff", help="Compare although fixed variables differ.")] = False,
    fx: FxOption = None,
    currency: CurrencyOption = None,
    keep_stopped_days: KeepStoppedOption = 0.0,
    min_effect: Annotated[float, typer.Option(help="Smaller differences are no meaningful difference.")] = 0.05,
    store: StoreOption = None,
    noise_floor: Annotated[float, typer.Option(help="With one run on a side, smaller differences name no winner.")]
    = 0.25,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Compare results side by side: fairness check, ratios with 95% CIs, cost per job, and a verdict.

    A winner is named only when the evidence carries it: equal fixed variables, no disturbance in
    the telemetry, steady runs, a 95% interval (over runs, then samples) that excludes 1, an effect
    of at least --min-effect, and, when a side ran once, at least --noise-floor.
    """
    from gpuscout import api
    from gpuscout.api.exit_codes import compare_exit_code
    from gpuscout.errors import SpecError
    from gpuscout.report.compare import render_json, render_markdown, render_table
    from gpuscout.results.ratios import compare_options

    renderers: dict[str, Callable[..., Any]] = {"table": partial(render_table, wide=wide), "md": render_markdown,
                                                "json": render_json}
    if as_json and fmt not in ("table", "json"):
        raise SpecError(f"--json and --format {fmt} ask for two formats.", "compare prints one.",
                        "Pass --json (the same as --format json) or --format, not both.")
    fmt = "json" if as_json else fmt
    if fmt not in renderers:
        raise SpecError(f"Unknown format {fmt!r}.", "compare writes a rich table, Markdown or JSON.",
                        "Use --format table, md or json.")
    from gpuscout.cost.billing import cost_options

    with stdio() as io:
        results = io.read_all(results, ".json", "a result")
        report = api.compare(results, offers=offers, offer_ids=offer or (), allow_diff=allow_diff, fx=fx or (),
                         options=compare_options(min_effect=min_effect, noise_floor=noise_floor), currency=currency,
                             cost_options=cost_options(keep_stopped_days=keep_stopped_days), store=store)
    out = renderers[fmt](report.comparison, report.verdict, report.costs, notes=report.warnings, rates=report.rates,
                         currency=report.currency)
    if isinstance(out, str):
        sys.stdout.write(printable(out if out.endswith("\n") else out + "\n"))
    else:
        console().print(out)
    _exit_with(compare_exit_code(report.verdict))


@app.command()
def calibrate(
    results: Annotated[list[Path] | None, typer.Argument(metavar="RESULT.json...", help="Bench (or load) results "
                                                         "measured on catalog GPUs.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", "--calibration",
                                                help="Calibration file to merge into and write (- for stdout); "
                                                     "default: gpuscout/calibration.toml in your config folder.")] \
        = None,
    as_json: JsonFlag = False,
) -> None:
    """Learn the speed model's efficiency factors from your own bench results, per GPU and phase.

    Each result's job is re-estimated on its GPU; the measured phase times (training step, TTFT,
    TPOT, denoiser step) over the estimated ones give a time multiplier and a band per GPU and
    phase. Load results run with --job and --server-gpu fit the serving simulator's step costs on
    that GPU. The file is merged with what it already holds; estimate, pick and load then use it.
    """
    from gpuscout import api
    from gpuscout.report.calibration import calibrate_payload, calibrate_screen

    with stdio() as io:  # `-o -`: the calibration TOML to stdout (merged with nothing), the screen to stderr
        output = io.output(output, "calibration.toml")
        no_json_with_stdout(io, as_json)
        report = api.calibrate(io.read_all(results or [], ".json", "a result"), output=output)
        emit_beside(io, lambda: calibrate_payload(report.calibration, report.skipped, report.output),
                    lambda: calibrate_screen(report.calibration, added=len(report.added), skipped=report.skipped,
                                             output=None if io.to_stdout else report.output,
                                             serving_added=len(report.serving)), as_json)


app.command(name="load")(load_command)  # the command lives in cli/load.py (many options of its own)


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="Server URL to probe (TCP connect and HTTP round trips).")],
    repeats: Annotated[int, typer.Option(help="Repeats of each measurement.")] = 20,
    download_url: Annotated[str | None, typer.Option(help="A URL you control to download from.")] = None,
    upload_url: Annotated[str | None, typer.Option(help="A URL you control to upload to.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Network probe: connect and HTTP round-trip P50/P95, throughput, reconnect time after a drop."""
    from gpuscout import api
    from gpuscout.report.probe import probe_table

    result = api.probe(url, repeats=repeats, download_url=download_url, upload_url=upload_url)
    emit(lambda: result.model_dump(mode="json"), lambda: probe_table(result), as_json)


app.command()(report)  # cli/report.py
app.command()(spec)  # cli/spec.py
app.command()(trial)  # cli/trial.py
app.add_typer(results_app)  # cli/results.py
app.add_typer(offers_app)  # cli/offers.py


def main() -> None:
    """Entry point: user errors exit 1 with what / why / to fix; bugs keep their traceback.

    A reader that closes the pipe early (`gpuscout estimate | head`) and a stop signal end the command
    quietly with the shell's codes (141 = 128 + SIGPIPE; 130, 143, 129 = 128 + SIGINT, SIGTERM, SIGHUP),
    not a traceback. The stop signals are held for the whole process (`interrupts`): the first stops
    the command, which keeps what finished; the later ones never cut that short.
    """
    from gpuscout.interrupts import ignore_stop_signals, stopped_by

    try:
        _run()
    finally:
        if stopped_by() is not None:  # stopping: the interpreter's exit, which resets handlers, is not cut short
            ignore_stop_signals()


def _run() -> None:
    """The command, its errors and its stop signals turned into exit codes."""
    from gpuscout.interrupts import hold_stop_signals, stopped_by

    try:
        hold_stop_signals()
        app()
    except SystemExit as done:
        signum = stopped_by()
        if signum is not None and done.code == 130:  # typer turns every KeyboardInterrupt into 130
            sys.exit(128 + signum)
        raise
    except GpuscoutError as exc:
        sys.stderr.write(f"error: {printable(worded(exc).render())}\n")  # it may quote a file or a server
        sys.exit(1)
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + 13)
    except KeyboardInterrupt as stop:
        sys.stderr.write("interrupted\n")
        sys.exit(128 + (stopped_by() or getattr(stop, "signum", None) or signal.SIGINT))
