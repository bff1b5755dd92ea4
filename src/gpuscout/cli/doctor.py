"""`gpuscout doctor`: is this rented box what was paid for? Keep it, return it, or look closer.

The thin shell over `gpuscout.api.doctor`: parse, run, render, exit with the verdict's code (0 keep,
3 return, 4 inconclusive; 1 on a user error; 128 + the signal when stopped, docs/doctor.md §4.6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuscout.cli.options import JsonFlag, OutputOption
from gpuscout.cli.output import print_json
from gpuscout.cli.results import NoStoreFlag, StoreOption, record
from gpuscout.cli.stdio import no_json_with_stdout, stdio
from gpuscout.report.escape import screen_console


def doctor(
    offers: Annotated[Path | None, typer.Option("--offers", help="Price sheet holding the offer you rented.")] = None,
    offer: Annotated[str | None, typer.Option("--offer", help="The offer's id: its GPU, count, vCPUs and RAM are "
                                              "what the box is held against.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Or the GPU you paid for, by catalog name.")] = None,
    job: Annotated[str | None, typer.Option("--job", help="A job spec: the checkpoint check uses its model's "
                                            "size.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The short checks: within a minute.")] = False,
    nproc: Annotated[int | None, typer.Option(min=1, help="Workers: one per GPU by default (two on the CPU).")]
    = None,
    device: Annotated[str, typer.Option(help="auto | cuda | cpu.")] = "auto",
    created_at: Annotated[str | None, typer.Option(help="When the machine was created (ISO 8601 time): "
                                                   "measures the start-up.")] = None,
    url: Annotated[str | None, typer.Option(help="A URL to measure the network to (round trip, download).")] = None,
    folder: Annotated[Path | None, typer.Option("--dir", help="Where the disk and checkpoint checks write "
                                                "(default: here).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    output: OutputOption = None,
    wide: Annotated[bool, typer.Option("--wide", help="Also list the readings with no band to judge them.")] = False,
    store: StoreOption = None,
    no_store: NoStoreFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Check a rented machine in its first minutes: identity, health, performance against expected bands, host.

    The GPUs against the offer (model, count, memory, the SKU variant), ECC and XID errors,
    throttling and the PCIe link under load, matmul burst and sustained, memory bandwidth, host
    copies, the GPU-to-GPU matrix and all-reduce through torchrun, disk, checkpoint, network,
    start-up. Exits 0 to keep, 3 to return, 4 when inconclusive. Ctrl-C writes what finished.
    """
    from gpuscout import api
    from gpuscout.report.doctor import doctor_screen
    from gpuscout.report.progress import step_bar
    from gpuscout.units import parse_time_s

    with stdio() as io:  # `-`: --job from stdin; `-o -` writes the result to stdout, the screen to stderr
        output = io.output(output, "doctor.json")
        no_json_with_stdout(io, as_json)
        report = api.doctor(offers=offers, offer=offer, gpu=gpu, job=io.read_job(job),
                            quick=quick, nproc=nproc, device=device,
                            created_at=parse_time_s(created_at, "--created-at") if created_at else None, url=url,
                            output=output, folder=folder, seed=seed, progress=step_bar("doctor"))
        stored = record("doctor", report.result.model_dump(mode="json"), store=store, no_store=no_store)
        screen = doctor_screen(report.result, None if io.to_stdout else report.output, wide=wide, stored_as=stored)
        if report.stopped_by is not None or io.to_stdout:  # stopped: what finished is written, 128 + the signal
            screen_console(stderr=True).print(screen)
            raise typer.Exit(report.exit_code)
        if as_json:
            print_json({**report.result.model_dump(mode="json"), "exit_code": report.exit_code})
        else:
            screen_console().print(screen)
        raise typer.Exit(report.exit_code)
