"""The interruption rate of a spot offer whose price sheet gives none: a band, never zero.

No provider publishes an hourly interruption rate (docs/cost.md §2.11), and a SkyPilot catalog
carries none, so a spot row often comes without one. Pricing it at zero would call it riskless
(P95 = expected total). Instead the rate comes, in order, from:

1. the sheet's own `interruptions_per_hour` (optionally a band up to `interruptions_per_hour_high`);
2. the user's Spot Advisor file (`hardware.spot_advisor`): the monthly band of the row's instance
   type and region, read as a constant hazard over the file's exposure hours;
3. the user's `--interruptions-per-hour RATE`, for every other spot row that states none;
4. the default prior band below, and the row says "interruption risk unknown".

The expected rate prices the expected total; the band's high end is the rate the seeded simulation
draws the P95 from, so the unknown widens the P95 (`cost.billing.run_outcome`).
"""

from __future__ import annotations

import math
from typing import Literal

from gpuscout.frozen import Frozen
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.spot_advisor import FREQUENCY_BANDS, SpotAdvisor

# Google Cloud's preemptible VMs are always stopped after 24 hours of running (Google Cloud docs,
# "Preemptible VM instances"): the one reclaim cadence a provider states outright, so the prior's
# expected rate is one interruption per 24 h of running.
DEFAULT_EXPECTED_PER_HOUR = 1.0 / 24.0
# AWS's Spot Instance Advisor grades pools from "<5%" to ">20%" of instances reclaimed a month; read
# as constant hazards, its top edge is ln(1/0.80) / ln(1/0.95) = 4.35 times its bottom edge. The
# prior spans the same factor on each side of its expected rate: 1 per 5.5 h to 1 per 104 h.
ADVISOR_SPREAD = math.log(1 / 0.80) / math.log(1 / 0.95)
DEFAULT_HIGH_PER_HOUR = DEFAULT_EXPECTED_PER_HOUR * ADVISOR_SPREAD
DEFAULT_LOW_PER_HOUR = DEFAULT_EXPECTED_PER_HOUR / ADVISOR_SPREAD
# AWS warns two minutes before it interrupts a Spot Instance (EC2 docs, "Spot Instance interruption
# notices"): a rate above one per two minutes reclaims capacity faster than its own notice.
MAX_RATE_PER_HOUR = 30.0

Basis = Literal["default prior", "--interruptions-per-hour", "spot advisor"]


class InterruptionPrior(Frozen):
    """The interruption rate a spot row was priced under, where the sheet gave none, and why."""

    basis: Basis
    expected_per_hour: float  # prices the expected total
    high_per_hour: float  # the seeded simulation of the P95 runs at this rate
    low_per_hour: float
    detail: str = ""  # for an advisor band: 'p4d.24xlarge in us-east-1: >20% a month (file, date)'

    @property
    def unknown(self) -> bool:
        """Nothing about this row's interruptions was known: the default prior priced it."""
        return self.basis == "default prior"


DEFAULT_PRIOR = InterruptionPrior(basis="default prior", expected_per_hour=DEFAULT_EXPECTED_PER_HOUR,
                                  high_per_hour=DEFAULT_HIGH_PER_HOUR, low_per_hour=DEFAULT_LOW_PER_HOUR)


class SpotKnowledge(Frozen):
    """What the user told about interruptions that the price sheet does not say."""

    per_hour: float | None = None  # --interruptions-per-hour
    advisor: SpotAdvisor | None = None  # --spot-advisor FILE


def monthly_share_rate(share: float, exposure_hours: float) -> float:
    """Interruptions per hour from the share of instances reclaimed over `exposure_hours`:
    1 − e^(−λE) = share, so λ = −ln(1 − share) / E (a constant hazard; share < 1)."""
    return -math.log1p(-share) / exposure_hours


def prior_for(offer: Offer, knowledge: SpotKnowledge | None = None) -> InterruptionPrior | None:
    """The band a spot offer without a stated rate is priced under; None when the sheet states one
    (or the offer is not spot)."""
    if offer.tier != "spot" or offer.interruptions_per_hour is not None:
        return None
    known = knowledge or SpotKnowledge()
    band = known.advisor.band_for(offer) if known.advisor is not None else None
    if known.advisor is not None and band is not None:
        return advisor_prior(band.frequency, known.advisor.exposure_hours,
                             f"{band.instance_type} in {band.region}: {band.frequency} a month "
                             f"({known.advisor.path}, {known.advisor.observed_at})")
    if known.per_hour is not None:
        rate = known.per_hour
        return InterruptionPrior(basis="--interruptions-per-hour", expected_per_hour=rate, high_per_hour=rate,
                                 low_per_hour=rate)
    return DEFAULT_PRIOR


def advisor_prior(frequency: str, exposure_hours: float, detail: str = "") -> InterruptionPrior:
    """An advisor band as rates: the band's edges give low and high, its middle the expected rate.
    ">20%" is bounded only below: its expected rate is the 20% edge's, and its high end the default
    prior's (or the edge's, if that is higher)."""
    low_share, high_share = FREQUENCY_BANDS[frequency]
    low = monthly_share_rate(low_share, exposure_hours)
    if high_share is None:
        return InterruptionPrior(basis="spot advisor", expected_per_hour=low,
                                 high_per_hour=max(low, DEFAULT_HIGH_PER_HOUR), low_per_hour=low, detail=detail)
    return InterruptionPrior(basis="spot advisor",
                             expected_per_hour=monthly_share_rate((low_share + high_share) / 2, exposure_hours),
                             high_per_hour=monthly_share_rate(high_share, exposure_hours), low_per_hour=low,
                             detail=detail)


def with_prior(offer: Offer, prior: InterruptionPrior | None) -> Offer:
    """The offer with the prior's rates written in, ready for `billing.price_job`."""
    if prior is None:
        return offer
    return offer.model_copy(update={"interruptions_per_hour": prior.expected_per_hour,
                                    "interruptions_per_hour_high": prior.high_per_hour})


def priced_interruptions(offer: Offer) -> Offer:
    """The offer as billing prices it: a spot row without a rate under the default prior band."""
    return with_prior(offer, prior_for(offer))


def unknown_risk_note(offer: Offer) -> str:
    """What a bill says when the default prior priced its interruptions; empty otherwise."""
    if prior_for(offer) is None:
        return ""
    return (f"interruption risk unknown: the sheet gives no interruptions_per_hour for this spot offer, so it "
            f"is priced at {DEFAULT_EXPECTED_PER_HOUR:.3g} interruptions/h, the P95 at {DEFAULT_HIGH_PER_HOUR:.3g}/h "
            "(the default prior band, docs/cost.md §2.11)")
