"""`gpuscout trial`: the thin shell over `gpuscout.api.trial`: plan, show the bill, confirm, run, decide."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuscout.cli.options import JsonFlag
from gpuscout.cli.results import NoStoreFlag, StoreOption


def trial(
    job: Annotated[Path, typer.Argument(metavar="JOB.toml", help="The job spec to trial.")],
    offers: Annotated[Path, typer.Option("--offers", help="Price sheet holding the candidates' offers.")],
    candidates: Annotated[str | None, typer.Option("--candidates", metavar="ID,ID…",
                                                   help="The offers to try, by id.")] = None,
    top: Annotated[int | None, typer.Option("--top", help="Or the N cheapest offers pick ranks.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="skypilot (rents the boxes) | ssh (boxes you rented) | "
                                        "local (this machine).")] = "local",
    max_usd: Annotated[float | None, typer.Option("--max-usd", help="Refuse above this predicted bill; tear "
                                                  "everything down when the running bill reaches it.")] = None,
    budget_minutes: Annotated[float, typer.Option("--budget-minutes", help="Each candidate's wall time, "
                                                  "launch to end.")] = 30.0,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the scripts and every box's "
                                         "results.")] = Path("trial"),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before launching.")] = False,
    runs: Annotated[int, typer.Option(help="Bench runs per case on each box.")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up iterations per case.")] = 2,
    repeats: Annotated[int, typer.Option(help="Timed repeats per case.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic data, the same on every box.")] = 0,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu (default: cpu for local, else auto).")]
    = None,
    install: Annotated[str | None, typer.Option(help="venv: a fresh venv with the same gpuscout (default on "
                                                "rented boxes) | current: reuse this interpreter (local).")]
    = None,
    pip_args: Annotated[str, typer.Option(help="Extra `pip install` arguments on every box (a mirror, "
                                          "--no-index --find-links DIR).")] = "",
    ssh: Annotated[list[str] | None, typer.Option("--ssh", metavar="OFFER_ID=user@host:port",
                                                  help="ssh engine: the box you rented for an offer.")] = None,
    setup_minutes: Annotated[float | None, typer.Option(help="Install and doctor time to bill in the "
                                                        "prediction (default: 6 for venv, 1 for current).")] = None,
    store: StoreOption = None,
    no_store: NoStoreFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the same small fair test on every candidate: launch, doctor, bench, fetch, tear down, decide.

    Before anything is launched the trial's predicted bill is shown (and asked for, unless --yes).
    Ctrl-C, SIGTERM, a failed candidate or --max-usd tear every launched box down and keep what
    finished. Exits 0 when an offer is named, 4 with no verdict, 2 when a box could not be torn
    down, 1 on a user error, 128 + the signal when stopped.
    """
    from gpuscout import api
    from gpuscout.errors import SpecError
    from gpuscout.report.escape import screen_console
    from gpuscout.report.trial_run import decision_screen, plan_screen

    if install not in (None, "venv", "current"):
        raise SpecError(f"Unknown --install {install!r}.", "A box gets gpuscout one of two ways.",
                        "Pass --install venv or --install current.")
    targets = {}
    for item in ssh or []:
        offer_id, sep, target = item.partition("=")
        if not sep or not offer_id or not target:
            raise SpecError(f"--ssh {item!r} is not OFFER_ID=user@host:port.",
                            "The ssh engine needs the box you rented for each candidate.",
                            "Pass e.g. --ssh lambda-h100=ubuntu@203.0.113.7:22, once per candidate.")
        targets[offer_id] = target
    chosen = [c.strip() for c in candidates.split(",") if c.strip()] if candidates else []
    from gpuscout.cli.stdio import stdio

    with stdio() as io:  # the job spec may come from stdin (`-`); the file lives until the trial ends
        plan = api.plan_trial(io.read(job, ".toml", "the job spec"), offers=offers, candidates=chosen, top=top,
                              engine=engine, max_usd=max_usd, budget_minutes=budget_minutes, output=output,
                              install=install,  # type: ignore[arg-type]
                              runs=runs, warmup=warmup, repeats=repeats, seed=seed, device=device, pip_args=pip_args,
                              ssh_targets=targets, setup_minutes=setup_minutes)
        out = screen_console(stderr=as_json)  # with --json, stdout holds the decision's JSON alone
        out.print(plan_screen(plan))
        if engine != "local" and not yes:
            if not sys.stdin.isatty():
                raise SpecError("The trial was not confirmed.", "It rents or uses billed boxes, and no terminal can "
                                "answer the question.", "Pass --yes to launch without asking.")
            if not typer.confirm("Launch the trial?", default=False):
                out.print("not launched: nothing was rented")
                raise typer.Exit(1)
        err = screen_console(stderr=True)
        report = api.run_trial(plan, on_event=lambda text: err.print(f"trial: {text}", markup=False,
                                                                       highlight=False),
                               store=store, no_store=no_store)
        screen = decision_screen(report)
        if report.run.stopped_by is not None:
            err.print(screen)
        else:
            out.print(screen)
        if as_json:
            from gpuscout.api.trial_payload import trial_json
            from gpuscout.cli.output import print_json

            print_json(trial_json(report))
        raise typer.Exit(report.exit_code)
