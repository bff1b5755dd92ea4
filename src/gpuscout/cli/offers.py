"""`gpuscout offers pull | list`: today's catalog offers into a dated price sheet, and what a sheet holds.

`pull` is the only command that fetches prices; `pick --offers SHEET` ranks what it wrote.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuscout.cli.options import JsonFlag
from gpuscout.cli.output import emit
from gpuscout.cli.stdio import emit_beside, no_json_with_stdout, stdio

offers_app = typer.Typer(name="offers", no_args_is_help=True, add_completion=False,
                         help="Today's offers: pull catalogs (gpuhunt, SkyPilot) into a dated price sheet, list one.")


@offers_app.command()
def pull(
    output: Annotated[Path, typer.Option("--output", "-o", help="The price sheet to write (TOML); - for stdout "
                                                 "(the screen then goes to stderr).")],
    source: Annotated[str, typer.Option("--from", help="gpuhunt (needs gpuscout[offers]) or skypilot (its cached "
                                        "catalogs under ~/.sky/catalogs/v8).")] = "gpuhunt",
    provider: Annotated[list[str] | None, typer.Option("--provider", help="Only this provider (repeatable), as the "
                                                       "source names it: aws, vastai, lambdalabs …")] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", "-g", help="Only this GPU (repeatable).")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Only spot offers.")] = False,
    on_demand: Annotated[bool, typer.Option("--on-demand", help="Only on-demand offers.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Fetch today's offers into a price sheet: dated, with source, catalog version and billing rules."""
    from gpuscout import api
    from gpuscout.errors import SpecError
    from gpuscout.report.offers import pull_payload, pull_screen

    if spot and on_demand:
        raise SpecError("--spot and --on-demand were both given.", "Each keeps only one tier.",
                        "Pass one of them, or neither for both tiers.")
    command = "gpuscout offers pull " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    with stdio() as io:  # `-o -`: the sheet to stdout, the screen to stderr
        sheet = io.output(output, "offers.toml")
        assert sheet is not None  # --output is required
        no_json_with_stdout(io, as_json)
        report = api.pull_offers(sheet, source=source, providers=provider or (), gpus=gpu or (),
                                 spot=True if spot else (False if on_demand else None), command=command.strip())
        where = "standard output" if io.to_stdout else str(report.output)
        emit_beside(io, lambda: pull_payload(report.pull, where), lambda: pull_screen(report.pull, where), as_json)


@offers_app.command(name="list")
def list_command(
    sheet: Annotated[Path | None, typer.Argument(metavar="SHEET", help="Price sheet (TOML) or SkyPilot vms.csv; "
                                                 "default: the bundled example sheet.")] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", "-g", help="Only this GPU (repeatable).")] = None,
    max_price: Annotated[float | None, typer.Option("--max-price", help="Only offers at or under this price per "
                                                    "instance-hour, in the offer's currency.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """What a price sheet holds: GPU, count, $/h, provider, region, age, billing rules, stock."""
    from gpuscout import api
    from gpuscout.report.offers import offers_list_payload, offers_list_screen

    listed = api.list_offers(sheet, gpu=gpu or (), max_price=max_price)
    emit(lambda: offers_list_payload(listed.sheet, listed.offers, listed.total, listed.today, listed.notes),
         lambda: offers_list_screen(listed.sheet, listed.offers, listed.total, listed.today, listed.notes), as_json)
