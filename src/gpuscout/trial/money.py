"""What a trial box has cost so far: its elapsed time since launch, billed under its offer's rules.

The running bill is the compute billed from the launch request to now (or to the tear-down), rounded
to the offer's increment and never below its minimum per start, plus the offer's storage for that
billed time (a volume with a lifetime of its own is left out): the same rules `price_job` applies to
a whole job (docs/cost.md §1). It counts from the launch request, the earliest any provider's meter
starts (`billing_starts = "request"`), so it never reads low.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.cost.billed_time import billed_seconds
from gpuscout.cost.billing import rate_per_s, storage_line
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer


def elapsed_bill_usd(offer: Offer, elapsed_s: float, rates: Sequence[ExchangeRate] = ()) -> float:
    """The bill in USD for a box of `offer` held `elapsed_s` seconds."""
    billed = billed_seconds(max(elapsed_s, 0.0), offer)
    # Storage that lives with the instance bills for the time held; a volume with a lifetime of its own
    # (a month's persistent disk) is the user's choice to keep, not the trial's spending.
    total = billed * rate_per_s(offer) + sum(storage_line(item, offer, billed).amount for item in offer.storage
                                             if item.lifetime_hours is None)
    return to_usd(total, offer.currency, rates)
