"""Whose box the doctor judges: what it is held against, and whether a verdict belongs to this machine.

A bench result carries the verdict of the machine it measured (docs/doctor.md §5); a verdict written
on another machine would vouch for hardware the numbers did not come from, so it is refused.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gpuscout.doctor.identity import Expected, expected_from_gpu, expected_from_offer
from gpuscout.errors import SpecError
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import DoctorVerdict


def held_against(offer: Offer | None, sheet: str | Path | None, gpu: str | None) -> Expected:
    """The offer rented (from the sheet named `sheet`), else the GPU paid for, else nothing named."""
    if offer is not None:
        return expected_from_offer(offer, Path(sheet or "").name)
    return expected_from_gpu(gpu) if gpu is not None else Expected()


def verdict_of_this_machine(verdict: DoctorVerdict, written_at: datetime, path: str | Path) -> DoctorVerdict:
    """The verdict of a doctor result written on this machine (at `written_at`, to `path`), to attach to a
    bench result; another machine's is refused."""
    from gpuscout.doctor.inventory import current_identity, different_machine

    why = different_machine(verdict.machine, current_identity())
    if why:
        raise SpecError(f"{path} was written on another machine: {why}.",
                        "A bench result carries the health of the machine it measured; another machine's doctor "
                        "result would vouch for hardware the numbers did not come from.",
                        "Run `gpuscout doctor -o doctor.json` on this machine and pass that file.")
    return verdict.model_copy(update={"checked_at": written_at, "file": str(path)})
