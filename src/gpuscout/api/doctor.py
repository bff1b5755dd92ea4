"""`doctor`: is this rented machine what was paid for? Keep it, return it, or look closer (docs/doctor.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscout.api.inputs import InputError, checked_output, offer_in
from gpuscout.api.jobs import JobRef, job_and_dir
from gpuscout.api.stopping import run_stoppable

if TYPE_CHECKING:
    from gpuscout.doctor.identity import Expected
    from gpuscout.measure.progress import StepProgress
    from gpuscout.results.schema import BenchResult, Case, DoctorVerdict


@dataclass(frozen=True)
class DoctorReport:
    result: BenchResult  # kind "doctor": one case per check; `result.doctor` holds the verdict
    output: Path | None = None
    stopped_by: int | None = None  # the signal that stopped the run early (SIGINT for Ctrl-C), if any

    @property
    def exit_code(self) -> int:
        """0 keep, 3 return, 4 inconclusive; 128 + the signal when stopped (docs/doctor.md §4.6)."""
        from gpuscout.doctor.verdict import EXIT_CODES

        if self.stopped_by is not None:
            return 128 + self.stopped_by
        return EXIT_CODES[self.result.doctor.outcome] if self.result.doctor else EXIT_CODES["inconclusive"]


def doctor(*, offers: str | Path | None = None, offer: str | None = None, gpu: str | None = None,
           job: JobRef = None, quick: bool = False, nproc: int | None = None, device: str = "auto",
           created_at: float | None = None, url: str | None = None, output: str | Path | None = None,
           folder: str | Path | None = None, seed: int = 0, progress: StepProgress | None = None) -> DoctorReport:
    """Is this rented machine what was paid for? Identity, health, performance against the expected bands,
    the host, the network to `url`, the start-up since `created_at` (epoch seconds); keep, return or
    inconclusive (docs/doctor.md). The box is held against `offer` in `offers`, or the GPU `gpu`.

    With `output` the result is written after every step, so Ctrl-C, SIGTERM or SIGHUP keep what finished.
    """
    from gpuscout.doctor.run import DoctorOptions, run_doctor
    from gpuscout.results.store import save_result

    path = checked_output(output, "doctor result")
    expected = _expected(offers, offer, gpu)
    model_bytes = _job_model_bytes(job) if job is not None else None
    network, shown_url = _network(url)
    options = DoctorOptions(device=device, nproc=nproc, quick=quick, created_at=created_at, model_bytes=model_bytes,
                            folder=str(folder) if folder is not None else None, seed=seed, url=shown_url)

    def keep(partial: BenchResult) -> None:
        if path is not None:
            save_result(partial, path)

    def checked() -> BenchResult:
        done = run_doctor(options, expected, network=network, progress=progress, checkpoint=keep)
        keep(done)
        return done

    result, stopped_by = run_stoppable(
        checked, lambda done: any(c.failure is not None and c.failure.kind == "interrupted" for c in done.cases))
    return DoctorReport(result=result, output=path, stopped_by=stopped_by)


def _expected(offers: str | Path | None, offer: str | None, gpu: str | None) -> Expected:
    from gpuscout.doctor.attach import held_against

    if gpu is not None and offer is not None:
        raise InputError("{gpu} and {offer} were both given.", "The box is held against one of them.",
                         "Pass {offers} F {offer} ID (the offer you rented), or {gpu} NAME.")
    if offer is not None or offers is not None:
        sheet, the_offer = offer_in(offers, offer)
        return held_against(the_offer, sheet.path, gpu)
    return held_against(None, None, gpu)


def _job_model_bytes(job: JobRef) -> int | None:
    from gpuscout.measure.bench import model_bytes

    the_job, base_dir = job_and_dir(job)
    return model_bytes(the_job, base_dir)


def _network(url: str | None) -> tuple[Callable[[], Case] | None, str | None]:
    """The network check for `url` (checked now, so a malformed URL fails before anything runs)."""
    if url is None:
        return None, None
    from gpuscout.loadgen.probe import parse_target
    from gpuscout.loadgen.probe_case import network_case

    target = parse_target(url)
    return (lambda: network_case(url)), target.url


def doctor_of_this_machine(path: str | Path) -> DoctorVerdict:
    """The verdict of a doctor result written on this machine, to attach to a bench result; another
    machine's, or a result of another kind, is refused (docs/doctor.md §5)."""
    from gpuscout.doctor.attach import verdict_of_this_machine
    from gpuscout.results.store import load_result

    result = load_result(Path(path))
    if result.kind != "doctor" or result.doctor is None:
        raise InputError("{path} is a {kind} result, not a doctor result.",
                         "bench {doctor} attaches the verdict `gpuscout doctor -o FILE` wrote on this machine.",
                         "Run `gpuscout doctor -o doctor.json` here first and pass that file.",
                         path=path, kind=result.kind)
    return verdict_of_this_machine(result.doctor, result.created_at, path)
