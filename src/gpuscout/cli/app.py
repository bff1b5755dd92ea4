"""The thin shell: parse → call one library function → render → exit code.

Heavy modules (the estimator, rich tables, torch for --trace) are imported inside the commands,
so `gpuscout --help` stays fast. User errors print their three parts and exit 1, no traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuscout.errors import GpuscoutError

app = typer.Typer(
    name="gpuscout",
    help="Which rented GPU finishes your job for the least total money. Start with `gpuscout estimate`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


@app.command()
def gpus(as_json: JsonFlag = False) -> None:
    """List the GPU catalog: memory, bandwidth, dense peaks, interconnect, open verification marks."""
    from gpuscout.hardware.catalog import load_catalog

    catalog = load_catalog()
    if as_json:
        _print_json([g.model_dump() for g in catalog])
        return
    from gpuscout.report.console import gpu_table

    _console().print(gpu_table(catalog))


@app.command()
def model(
    ref: Annotated[str, typer.Argument(help="config.json, model directory, or preset id (see --list).")] = "",
    list_presets: Annotated[bool, typer.Option("--list", help="List the built-in presets.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show a model's shape: layers, heads, experts, parameters, weight bytes, KV cache per token."""
    from gpuscout.cli.model_view import list_view, model_view

    if list_presets or not ref:
        payload, renderable = list_view()
    else:
        payload, renderable = model_view(ref)
    if as_json:
        _print_json(payload)
    else:
        _console().print(renderable)


@app.command()
def estimate(
    job_path: Annotated[Path | None, typer.Argument(metavar="JOB.toml",
                                                    help="Job spec; without it, the built-in default job.")] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", "-g",
                                                  help="GPU to detail (repeatable); default: every GPU.")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Also trace the real model step (needs torch).")] = False,
    layers: Annotated[int | None, typer.Option("--layers", help="Trace only K layers (faster).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Memory per GPU: breakdown, fit and headroom, what to change, and the largest sizes that fit."""
    from gpuscout.cli.estimate_view import run_estimate

    payload, renderable = run_estimate(job_path, gpu or [], trace=trace, trace_layers=layers)
    if as_json:
        _print_json(payload)
    else:
        _console().print(renderable)


@app.command()
def pick(
    job_path: Annotated[Path | None, typer.Argument(metavar="JOB.toml",
                                                    help="Job spec; without it, the built-in default job.")] = None,
    offers: Annotated[Path, typer.Option("--offers", help="Price sheet (TOML) or SkyPilot catalog vms.csv.")] = Path(
        "examples/prices.example.toml"),
    cloud: Annotated[str | None, typer.Option(help="Cloud of a SkyPilot vms.csv (default: its folder).")] = None,
    deadline: Annotated[str | None, typer.Option(help="Exclude offers slower than this, e.g. 12h.")] = None,
    budget: Annotated[float | None, typer.Option(help="Exclude offers dearer than this many USD.")] = None,
    fx: Annotated[list[str] | None, typer.Option("--fx", help="Exchange rate CCY=USD per unit, e.g. CNY=0.14.")] = None,
    egress_gb: Annotated[float, typer.Option(help="Data moved out of the machine, GB.")] = 0.0,
    failed_attempts: Annotated[float, typer.Option(help="Expected failed attempts before success.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the spot simulation.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Rank offers by the total cost of the whole job: fit, runtime, bill, $/unit, SLO, Pareto frontier."""
    from datetime import date

    from gpuscout.cli.pick_view import run_pick
    from gpuscout.cost.billing import CostOptions

    options = CostOptions(egress_gb=egress_gb, failed_attempts=failed_attempts, seed=seed)
    payload, renderable = run_pick(job_path, offers, deadline=deadline, budget=budget, fx=fx or [],
                                   options=options, today=date.today(), cloud=cloud)
    _emit(payload, renderable, as_json)


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
    as_json: JsonFlag = False,
) -> None:
    """Plain calculator: total = price × GPUs × hours + storage + transfer + retries (and the real bill)."""
    from gpuscout.cli.cost_view import run_cost

    billing = {"increment_s": increment_s, "min_billed_s": min_billed_s, "startup_s": startup_s,
               "idle_tail_s": idle_tail_s}
    if increment_s or min_billed_s or startup_s or idle_tail_s:
        billing["increment_s"] = increment_s or 1.0
    payload, renderable = run_cost(usd_per_gpu_hour=usd_per_gpu_hour, gpus=gpus, hours=hours,
                                   storage_usd=storage_usd, transfer_usd=transfer_usd, retry_usd=retry_usd,
                                   billing=billing, offers_path=offers, offer_id=offer)
    _emit(payload, renderable, as_json)


@app.command()
def bench(
    job_path: Annotated[Path | None, typer.Argument(metavar="JOB.toml", help="Job spec to measure.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the result JSON here.")] = None,
    device: Annotated[str, typer.Option(help="auto | cuda | cpu.")] = "auto",
    warmup: Annotated[int, typer.Option(help="Untimed warm-up iterations per case.")] = 2,
    repeats: Annotated[int, typer.Option(help="Timed repeats per case.")] = 5,
    layers: Annotated[int | None, typer.Option(help="Build K layers and extrapolate to full depth.")] = None,
    probe: Annotated[bool, typer.Option("--probe", help="Machine probes: matmul, bandwidth, copies, disk.")] = False,
    dataset: Annotated[Path | None, typer.Option(help="Your data (JSONL/text) instead of synthetic tokens.")] = None,
    created_at: Annotated[str | None, typer.Option(help="When the machine was created (ISO time).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Measure the job's real task on this machine: every case in its own process, fixed variables recorded."""
    from gpuscout.cli.bench_view import run_bench_command

    payload, renderable = run_bench_command(job_path, output=output, device=device, warmup=warmup, repeats=repeats,
                                            layers=layers, probe=probe, dataset=dataset, created_at=created_at,
                                            seed=seed)
    _emit(payload, renderable, as_json)


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(metavar="RESULT.json...", help="Two or more bench results.")],
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet: total job cost per machine.")] = None,
    offer: Annotated[list[str] | None, typer.Option("--offer", help="Offer id per result, in order.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | md | json.")] = "table",
    allow_diff: Annotated[bool, typer.Option("--allow-diff", help="Compare although fixed variables differ.")] = False,
    fx: Annotated[list[str] | None, typer.Option("--fx", help="Exchange rate CCY=USD per unit.")] = None,
) -> None:
    """Compare results side by side: fairness check, ratios with 95% CIs, cost per job, and a verdict."""
    from gpuscout.cli.compare_view import run_compare

    text = run_compare(results, offers_path=offers, offer_ids=offer or [], fmt=fmt, allow_diff=allow_diff,
                       fx=fx or [])
    if isinstance(text, str):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        _console().print(text)


@app.command()
def load(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:8000 (or …/v1).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model name the server serves.")],
    endpoint: Annotated[str, typer.Option(help="chat | completions.")] = "chat",
    no_stream: Annotated[bool, typer.Option("--no-stream", help="Non-streaming requests (TTFT = e2e).")] = False,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: requests in flight.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: requests per second.")] = None,
    arrival: Annotated[str, typer.Option(help="constant | poisson | gamma (with --rate).")] = "poisson",
    burstiness: Annotated[float, typer.Option(help="Gamma shape k: 1 = Poisson, < 1 burstier.")] = 1.0,
    requests: Annotated[int | None, typer.Option(help="Measured requests per level (default 100).")] = None,
    duration: Annotated[str | None, typer.Option(help="Or run each level this long, e.g. 60s.")] = None,
    warmup: Annotated[int, typer.Option(help="Warm-up requests, excluded from the statistics.")] = 0,
    prompt_tokens: Annotated[int, typer.Option(help="Synthetic prompt length, tokens.")] = 128,
    prompt_dist: Annotated[str, typer.Option(help="fixed | uniform | normal.")] = "fixed",
    prompt_spread: Annotated[int, typer.Option(help="Spread of the prompt length, tokens.")] = 0,
    output_tokens: Annotated[int, typer.Option(help="Output tokens per request (max_tokens, pinned).")] = 128,
    dataset: Annotated[Path | None, typer.Option(help="JSONL prompts instead of synthetic ones.")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Local tokenizer path: exact prompts and token counts.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of prompts and arrivals.")] = 0,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = "OPENAI_API_KEY",
    timeout: Annotated[float, typer.Option(help="Per-request timeout, s.")] = 600.0,
    sweep: Annotated[str | None, typer.Option(help="Levels to sweep, e.g. 1,2,4,8.")] = None,
    search: Annotated[bool, typer.Option("--search", help="Find the most load meeting the P95 targets.")] = False,
    ttft_p95: Annotated[float | None, typer.Option(help="SLO: P95 TTFT, s.")] = None,
    tpot_p95: Annotated[float | None, typer.Option(help="SLO: P95 TPOT, s.")] = None,
    e2e_p95: Annotated[float | None, typer.Option(help="SLO: P95 end-to-end latency, s.")] = None,
    percentile: Annotated[float, typer.Option(help="Percentile the validity gate needs samples for.")] = 95.0,
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet to take --offer from.")] = None,
    offer: Annotated[str | None, typer.Option("--offer", help="Offer id of the server machine.")] = None,
    usd_per_hour: Annotated[float | None, typer.Option(help="Server price, USD per hour.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the result JSON here.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Load-test an OpenAI-compatible endpoint fairly: TTFT, TPOT, throughput, goodput, validity, cost."""
    from gpuscout.cli.load_view import run_load_command

    payload, renderable = run_load_command(
        url, model=model, endpoint=endpoint, stream=not no_stream, concurrency=concurrency, rate=rate,
        arrival=arrival, burstiness=burstiness, requests=requests, duration=duration, warmup=warmup,
        prompt_tokens=prompt_tokens, prompt_dist=prompt_dist, prompt_spread=prompt_spread,
        output_tokens=output_tokens, dataset=dataset, tokenizer=tokenizer, seed=seed, api_key_env=api_key_env,
        timeout_s=timeout, sweep=sweep, search=search, ttft_p95=ttft_p95, tpot_p95=tpot_p95, e2e_p95=e2e_p95,
        percentile=percentile, offers=offers, offer=offer, usd_per_hour=usd_per_hour, output=output)
    _emit(payload, renderable, as_json)


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="Server URL to probe (TCP connect and HTTP round trips).")],
    repeats: Annotated[int, typer.Option(help="Repeats of each measurement.")] = 20,
    download_url: Annotated[str | None, typer.Option(help="A URL you control to download from.")] = None,
    upload_url: Annotated[str | None, typer.Option(help="A URL you control to upload to.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Network probe: connect and HTTP round-trip P50/P95, throughput, reconnect time after a drop."""
    try:
        from gpuscout.cli.probe_view import run_probe
    except ImportError:
        raise GpuscoutError("`gpuscout probe` is not available in this build.",
                            "gpuscout.cli.probe_view is missing.", "Update gpuscout.") from None
    payload, renderable = run_probe(url, repeats=repeats, download_url=download_url, upload_url=upload_url,
                                    as_json=as_json)
    _emit(payload, renderable, as_json)


def _emit(payload: Any, renderable: Any, as_json: bool) -> None:
    if as_json:
        _print_json(payload)
    else:
        _console().print(renderable)


def _console() -> Any:
    from rich.console import Console

    return Console()


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


def main() -> None:
    """Entry point: user errors exit 1 with what / why / to fix; bugs keep their traceback."""
    try:
        app()
    except GpuscoutError as exc:
        sys.stderr.write(f"error: {exc.render()}\n")
        sys.exit(1)
