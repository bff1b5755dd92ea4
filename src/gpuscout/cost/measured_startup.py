"""A launch measured by `gpuscout doctor` in place of the one an offer assumes (docs/doctor.md §4.5).

An offer states its launch in phases (docs/cost.md §2.4): provision (request → created), power-on
(created → running) and boot (running → healthy). Doctor measures from the machine's creation
(`--created-at`) or its boot to the first GPU ready for work. That span replaces power-on + boot of
the offer the doctor result was held against: measured from creation it covers both (power-on keeps
its assumed share, boot takes the rest); measured from boot it is the boot alone. Which of these
phases are billed is still the offer's rule (`billing_starts`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.errors import SpecError
from gpuscout.hardware.offers import Offer
from gpuscout.results.schema import BenchResult


def apply_measured_startup(offers: Sequence[Offer], results: Sequence[BenchResult],
                           ) -> tuple[tuple[Offer, ...], list[str]]:
    """The offers with each measured launch applied to the offer its doctor result names, and a note each."""
    measured: dict[str, tuple[float, str, object]] = {}
    for result in results:
        verdict = result.doctor
        if result.kind != "doctor" or verdict is None:
            raise SpecError(f"{result.name} is a {result.kind} result, not a doctor result.",
                            "pick --doctor reads the start-up a doctor run measured.",
                            "Pass the file `gpuscout doctor --offers F --offer ID --created-at T -o FILE` wrote.")
        offer_id = verdict.expected.get("offer_id")
        if verdict.startup_s is not None and isinstance(offer_id, str):
            measured[offer_id] = (verdict.startup_s, verdict.startup_origin or "boot", result.created_at.date())
    out, notes = [], []
    for offer in offers:
        if offer.id not in measured:
            out.append(offer)
            continue
        seconds, origin, day = measured[offer.id]
        updated = _with_launch(offer, seconds, origin)
        out.append(updated)
        notes.append(f"{offer.id}: start-up measured by doctor on {day}, {seconds:,.0f} s from "
                     f"{'creation' if origin == 'created_at' else 'boot'} to a ready GPU (the offer assumed "
                     f"{offer.power_on_s + offer.boot_s:,.0f} s power-on + boot)")
    unmatched = sorted(set(measured) - {o.id for o in offers})
    notes += [f"doctor measured the start-up of offer {i}, which is not in this sheet" for i in unmatched]
    return tuple(out), notes


def _with_launch(offer: Offer, seconds: float, origin: str) -> Offer:
    if origin == "created_at":
        power_on = min(offer.power_on_s, seconds)
        return offer.model_copy(update={"power_on_s": power_on, "boot_s": seconds - power_on})
    return offer.model_copy(update={"boot_s": seconds})
