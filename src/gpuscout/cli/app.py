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
