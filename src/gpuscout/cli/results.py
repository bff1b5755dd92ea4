"""`gpuscout results list | show | export`, and the --store / --no-store options of the commands that record.

Every bench, load and pick run (and doctor's) is recorded in the results store through
`gpuscout.api.record_run`; a store that cannot be written is a warning, never a lost run: the run's
output is printed (and written with -o) all the same.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuscout.cli.output import print_json
from gpuscout.errors import GpuscoutError
from gpuscout.report.escape import printable, screen_console

StoreOption = Annotated[Path | None, typer.Option(
    "--store", help="Results store (SQLite file); default: $GPUSCOUT_STORE, else "
                    "$XDG_DATA_HOME/gpuscout/results.sqlite (~/.local/share/…).")]
NoStoreFlag = Annotated[bool, typer.Option("--no-store", help="Do not record this run in the results store.")]
RunIdArg = Annotated[int, typer.Argument(metavar="ID", min=1, help="A run's id, from `gpuscout results list`.")]

results_app = typer.Typer(name="results", no_args_is_help=True, add_completion=False,
                          help="The local store of every bench, load, doctor and pick run: list, show, export.")


def record(kind: str, payload: dict[str, Any], *, store: Path | None, no_store: bool) -> int | None:
    """Record a run (finished or interrupted) and say its id on stderr; the id, or None when not recorded."""
    if no_store:
        return None
    from gpuscout import api

    err = screen_console(stderr=True)
    try:
        entry = api.record_run(kind, payload, store=store)
    except GpuscoutError as exc:
        err.print(f"warning: this run was not recorded in the results store: {exc.render()}", markup=False,
                  highlight=False)
        return None
    err.print(f"recorded in the results store as run {entry.id} (gpuscout results show {entry.id})", style="dim",
              markup=False, highlight=False)
    return entry.id


@results_app.command("list")
def list_runs(
    kind: Annotated[str | None, typer.Option(help="bench, load, pick, doctor, or a result kind (finetune, "
                                                  "inference, image, video, probe).")] = None,
    job: Annotated[str | None, typer.Option(help="Runs whose job or name contains this text.")] = None,
    since: Annotated[str | None, typer.Option(help="Runs made since: 7d, 12h (back from now) or a date, "
                                                   "2026-11-24.")] = None,
    limit: Annotated[int, typer.Option(min=0, help="Show the newest N that match; 0 shows all.")] = 50,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")] = False,
) -> None:
    """List stored runs, oldest first: id, when, kind, job, machine and a one-line summary."""
    from gpuscout import api

    listing = api.list_results(kind=kind, job=job, since=since, limit=limit or None, store=store)
    if as_json:
        print_json({"store": str(listing.store), "matched": listing.matched,
                    "runs": [r.model_dump(mode="json") for r in listing.runs]})
        return
    import shutil

    from gpuscout.report.results import results_text

    width = shutil.get_terminal_size((80, 24)).columns
    sys.stdout.write(printable(results_text(listing.runs, listing.matched, listing.store, width=width)))


@results_app.command("show")
def show(run_id: RunIdArg, store: StoreOption = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print the run's entry and its full JSON.")] = False,
         ) -> None:
    """Show one stored run: when, job, machine, then what its command printed."""
    from gpuscout import api

    shown = api.show_result(run_id, store=store)
    if as_json:
        print_json({"run": shown.entry.model_dump(mode="json"), "payload": shown.payload})
        return
    from gpuscout.report.stored_run import stored_run_screen

    screen_console().print(stored_run_screen(shown.entry, shown.payload))


@results_app.command("export")
def export(run_id: RunIdArg,
           output: Annotated[Path, typer.Option("--output", "-o", help="File to write (- for stdout).")],
           store: StoreOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False) -> None:
    """Write a stored run to a file: a measurement as the result file -o writes (compare and report read it)."""
    from gpuscout import api
    from gpuscout.cli.stdio import no_json_with_stdout, stdio

    with stdio() as io:  # `-o -`: the file's bytes to stdout
        written = io.output(output, f"run-{run_id}.json") or output
        no_json_with_stdout(io, as_json)
        path = api.export_result(run_id, written, store=store)
        if io.to_stdout:
            return
    if as_json:
        print_json({"run": run_id, "output": str(path), "bytes": path.stat().st_size})
    else:
        screen_console().print(f"run {run_id} written to {path}", markup=False, highlight=False)
