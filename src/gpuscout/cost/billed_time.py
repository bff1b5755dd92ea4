"""How a stretch of instance time becomes billed time (docs/cost.md §2.2, §2.3, §2.4)."""

from __future__ import annotations

import math

from gpuscout.hardware.offers import Offer

# The launch in order (docs/cost.md §2.4): each phase ends at the named state. Lambda's meter starts
# at `healthy`, AWS's and GCP's at `running`, Scaleway's at `created`; a meter that starts at the
# request bills the whole launch.
LAUNCH_PHASES = (("created", "provision_s"), ("running", "power_on_s"), ("healthy", "boot_s"))
_STATES = ("request", "created", "running", "healthy")


def round_bill(seconds: float, increment_s: float, minimum_s: float) -> float:
    """At least the minimum per start, then rounded up to the billing increment.

    AWS and GCP charge a 60 s minimum per start, then per second; Lambda bills by the minute;
    each start (and each restart after a spot interruption) pays the minimum again.
    """
    charged = max(seconds, minimum_s)
    # The 1e-9 forgives float noise (60.0000000001 increments are 60, not 61); any time at all is at least
    # one increment, however long the increment (an hourly meter bills a 1-minute run as an hour).
    units = math.ceil(charged / increment_s - 1e-9)
    return max(units, 1 if charged > 0 else 0) * increment_s


def billed_seconds(seconds: float, offer: Offer) -> float:
    """One billed segment under the offer's increment and minimum."""
    return round_bill(seconds, offer.billing_increment_s, offer.min_billed_s)


def billed_launch_phases(offer: Offer) -> dict[str, float]:
    """The launch phases the meter runs through: those ending after the state billing starts at."""
    start = _STATES.index(offer.billing_starts)
    return {field: getattr(offer, field) for state, field in LAUNCH_PHASES if _STATES.index(state) > start}


def billed_startup_s(offer: Offer) -> float:
    """Paid seconds before the first useful step: the launch phases after the meter starts, then setup.

    The same launch costs more where the meter starts earlier: 90 s of boot is free on Lambda
    (billed from `healthy`) and paid on AWS (billed from `running`).
    """
    return sum(billed_launch_phases(offer).values()) + offer.startup_s


def startup_text(offer: Offer) -> str:
    """How the billed startup was made up, for a bill's formula: 'startup 330 s (boot 90 s + setup 240 s,
    billed from running)'."""
    parts = [f"{field.removesuffix('_s').replace('_', ' ')} {value:g} s"
             for field, value in billed_launch_phases(offer).items() if value]
    parts.append(f"setup {offer.startup_s:g} s")
    return f"startup {billed_startup_s(offer):g} s ({' + '.join(parts)}, billed from {offer.billing_starts})"
