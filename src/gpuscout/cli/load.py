"""`gpuscout load`: parse the options into a `LoadPlan` → `api.load` → render (`report.load`) → exit code.

Registered on the app by `cli/app.py`. The options fall in groups: the endpoint, the load shape, the
prompts (synthetic, shared-prefix, conversations, a dataset, a ShareGPT file or a Mooncake trace),
what to measure (SLO, search, sweeps, runs, server /metrics, client processes), and the price.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

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
from gpuscout.cli.results import NoStoreFlag, StoreOption, record
from gpuscout.cli.stdio import emit_beside, no_json_with_stdout, stdio
from gpuscout.report.escape import screen_console


def load(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:8000 (or …/v1).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model name the server serves.")],
    endpoint: Annotated[str, typer.Option(help="chat | completions | images (/v1/images/generations).")] = "chat",
    no_stream: Annotated[bool, typer.Option("--no-stream", help="Non-streaming requests (TTFT = e2e).")] = False,
    concurrency: Annotated[int | None, typer.Option(
        help="Closed loop: requests in flight (with --turns: concurrent users).")] = None,
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
    prefix_share: Annotated[float, typer.Option(
        help="Share of each prompt's tokens shared with its group (system prompt, RAG document), 0–0.99.")] = 0.0,
    prefix_groups: Annotated[int, typer.Option(help="Distinct shared prefixes (requests take them in turn).")] = 1,
    prefix_control: Annotated[bool, typer.Option(
        "--prefix-control", help="Also run each level with no shared prefix: what the prefix cache saves.")] = False,
    turns: Annotated[int | None, typer.Option(help="Multi-turn conversations of this many turns.")] = None,
    think: Annotated[float, typer.Option(help="Seconds a user thinks between an answer and the next turn.")] = 0.0,
    trace: Annotated[Path | None, typer.Option(help="Replay a Mooncake-format JSONL trace on its schedule.")] = None,
    speedup: Annotated[float, typer.Option(help="Trace replay speed (2 = twice the trace's rate).")] = 1.0,
    dataset: Annotated[Path | None, typer.Option(help="JSONL prompts instead of synthetic ones.")] = None,
    sharegpt: Annotated[Path | None, typer.Option(help="A ShareGPT-style JSON file of conversations.")] = None,
    multi_turn: Annotated[bool, typer.Option(
        "--multi-turn", help="With --sharegpt: send whole conversations, turn by turn.")] = False,
    tokenizer: Annotated[str | None, typer.Option(help="Local tokenizer path: exact prompts and token counts.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of prompts and arrivals.")] = 0,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = "OPENAI_API_KEY",
    timeout: Annotated[float | None, typer.Option(
        help="Per-request timeout, s; also ends a read that stalls this long (default 30 s + 0.5 s per output "
             "token).")] = None,
    sweep: Annotated[str | None, typer.Option(help="Levels to sweep, e.g. 1,2,4,8.")] = None,
    search: Annotated[bool, typer.Option("--search", help="Find the most load meeting the P95 targets.")] = False,
    ttft_p95: Annotated[float | None, typer.Option(help="SLO: P95 TTFT, s.")] = None,
    tpot_p95: Annotated[float | None, typer.Option(help="SLO: P95 TPOT, s.")] = None,
    e2e_p95: Annotated[float | None, typer.Option(help="SLO: P95 end-to-end latency, s.")] = None,
    percentile: Annotated[float, typer.Option(help="Percentile the validity gate needs samples for.")] = 95.0,
    runs: RunsOption = 3,
    metrics_url: Annotated[str | None, typer.Option(
        help="The server's Prometheus /metrics (vLLM, SGLang, TGI, llama.cpp), scraped during each level.")] = None,
    workers: Annotated[int, typer.Option(help="Client processes sharing one schedule (past one core).")] = 1,
    image_size: Annotated[str | None, typer.Option(help="--endpoint images: the size asked for, e.g. 1024x1024.")] \
        = None,
    server_gpu: Annotated[str | None, typer.Option(
        help="The server's GPU (catalog name): lets `pick --load` use this result's capacity.")] = None,
    server_gpus: Annotated[int, typer.Option(help="GPUs behind the endpoint (one replica).")] = 1,
    region: RegionOption = None,
    billing: BillingOption = None,
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet to take --offer from.")] = None,
    offer: Annotated[str | None, typer.Option("--offer", help="Offer id of the server machine.")] = None,
    usd_per_hour: Annotated[float | None, typer.Option(help="Server price, USD per hour.")] = None,
    job: Annotated[str | None, typer.Option("--job", metavar="SPEC", help="The served job (inference job spec or "
                                            "example name): with --server-gpu or --offer, the serving simulator "
                                            "predicts every level beside its measurement.")] = None,
    calibration: CalibrationOption = None,
    no_calibration: NoCalibrationFlag = False,
    output: OutputOption = None,
    store: StoreOption = None,
    no_store: NoStoreFlag = False,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Load-test an OpenAI-compatible endpoint fairly: TTFT, TPOT, throughput, goodput, validity, cost.

    Traffic like production: shared prefixes (--prefix-share), conversations (--turns, --sharegpt
    --multi-turn), a replayed trace (--trace), image generations (--endpoint images). The result is
    written atomically with -o FILE, and the workload beside it as FILE.workload.json (its sha256
    recorded), so the run can be repeated exactly. The result is rewritten after every level: Ctrl-C,
    SIGTERM or SIGHUP keep what finished (complete=false, the tables go to stderr, exit 128 + the
    signal), and SIGKILL loses at most the level in flight.
    """
    from gpuscout import api
    from gpuscout.loadgen.plan import make_plan, parse_levels
    from gpuscout.units import parse_duration_s
    from gpuscout.workload.job import Slo

    one_calibration_choice(calibration, no_calibration)
    slo = Slo(ttft_p95_s=ttft_p95, tpot_p95_s=tpot_p95, e2e_p95_s=e2e_p95) if (ttft_p95 or tpot_p95 or e2e_p95) \
        else None
    where = api.where_rented(region, billing, offers, offer)
    plan = make_plan(url=url, model=model, endpoint=endpoint, stream=not no_stream, concurrency=concurrency, rate=rate,
                     arrival=arrival, burstiness=burstiness, requests=requests,
                     duration_s=parse_duration_s(duration) if duration else None, warmup=warmup,
                     prompt_tokens=prompt_tokens, prompt_dist=prompt_dist, prompt_spread=prompt_spread,
                     output_tokens=output_tokens, dataset=dataset, tokenizer=tokenizer, seed=seed,
                     api_key_env=api_key_env, timeout_s=timeout, sweep=parse_levels(sweep) if sweep else (),
                     search=search, slo=slo, percentile=percentile, runs=runs, region=where[0], billing=where[1],
                     prefix_share=prefix_share, prefix_groups=prefix_groups, prefix_control=prefix_control,
                     turns=turns, think_s=think, trace=trace, speedup=speedup, sharegpt=sharegpt,
                     multi_turn=multi_turn, metrics_url=metrics_url, workers=workers, image_size=image_size,
                     server_gpu=server_gpu, server_gpus=server_gpus)
    with stdio() as io:  # `-o -`: the result JSON to stdout, the screen to stderr
        _measure(io, plan, output=output, offers=offers, offer=offer, usd_per_hour=usd_per_hour, slo=slo, store=store,
                 no_store=no_store, wide=wide, as_json=as_json, job=job, calibration=calibration,
                 no_calibration=no_calibration)


def _measure(io: Any, plan: Any, *, output: Path | None, offers: Path | None, offer: str | None,
             usd_per_hour: float | None, slo: Any, store: Path | None, no_store: bool, wide: bool,
             as_json: bool, job: str | None, calibration: Path | None, no_calibration: bool) -> None:
    """Run the plan, record it, print it, and end with its exit code (docs/design.md §4)."""
    from gpuscout import api
    from gpuscout.api.exit_codes import measured_exit_code
    from gpuscout.report.load import load_progress, load_screen, load_warnings, replay_notice
    from gpuscout.report.payload import load_payload

    err = screen_console(stderr=True)
    output = io.output(output, "load.json")
    no_json_with_stdout(io, as_json)
    report = api.load(plan, output=output, offers=offers, offer=offer, usd_per_hour=usd_per_hour,
                      progress=load_progress if sys.stderr.isatty() else None,
                      on_replay=lambda span: err.print(replay_notice(span), highlight=False),
                      job=job, calibration=calibration, use_calibration=not no_calibration)
    load_warnings(report.result, err)
    payload = load_payload(report.result, report.costs, report.search, slo)
    if report.result.cases:
        record("load", payload, store=store, no_store=no_store)

    def screen() -> Any:
        return load_screen(report.result, output=None if io.to_stdout else report.output, costs=report.costs,
                           search=report.search, wide=wide)

    if report.stopped_by is not None:  # what finished is written; the shell sees 128 + the signal
        if report.result.cases:
            err.print(screen())
        else:
            err.print("interrupted before any request finished: nothing was written", highlight=False)
        raise typer.Exit(128 + report.stopped_by)
    emit_beside(io, lambda: payload, screen, as_json)
    code = measured_exit_code(report.result)
    if code:
        err.print("every request failed: this run measured nothing (see the errors above)", highlight=False)
        raise typer.Exit(code)
