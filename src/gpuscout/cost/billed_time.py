"""How a stretch of instance time becomes billed time (docs/cost.md §2.2, §2.3)."""

from __future__ import annotations

import math

from gpuscout.hardware.offers import Offer


def round_bill(seconds: float, increment_s: float, minimum_s: float) -> float:
    """At least the minimum per start, then rounded up to the billing increment.

    AWS and GCP charge a 60 s minimum per start, then per second; Lambda bills by the minute;
    each start (and each restart after a spot interruption) pays the minimum again.
    """
    charged = max(seconds, minimum_s)
    return math.ceil(charged / increment_s - 1e-9) * increment_s


def billed_seconds(seconds: float, offer: Offer) -> float:
    """One billed segment under the offer's increment and minimum."""
    return round_bill(seconds, offer.billing_increment_s, offer.min_billed_s)
