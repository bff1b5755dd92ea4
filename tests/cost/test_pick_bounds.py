"""One offer's absurd but finite numbers exclude that offer, with the reason; the rest of the sheet is ranked."""

from __future__ import annotations

import json
import math
from datetime import date
from typing import Any

import pytest

from gpuscout.cost.billed_time import round_bill
from gpuscout.cost.pick import MAX_TOTAL_USD, pick
from gpuscout.cost.spot import expected_spot_run, running_variance
from gpuscout.hardware.offers import Offer
from gpuscout.workload.jobs import default_job
from gpuscout.workload.presets import load_llm_preset

TODAY = date(2026, 11, 30)
LLAMA8 = load_llm_preset("llama-3-8b")


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "o", "provider": "p", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": TODAY, "source": "test"}
    return Offer.model_validate(base | kw)


SPOT = {"tier": "spot", "interruptions_per_hour": 0.05}
ABSURD = {
    "price 1e300": {"price": 1e300},
    "restart 1e300 s": SPOT | {"restart_overhead_s": 1e300, "interruptions_per_hour": 1.0},
    "startup 1e300 s": {"startup_s": 1e300},
    "idle tail 1e300 s": {"idle_tail_s": 1e300},
    "billing increment 1e300 s": {"billing_increment_s": 1e300},
    "stopped 1e300 h at 1e300/h": {"stopped_hours": 1e300, "stopped_price_per_hour": 1e300},
    "1e4 interruptions an hour": SPOT | {"interruptions_per_hour": 1e4},
    "1e4 interruptions an hour, checkpoints every 1e8 s": SPOT | {"interruptions_per_hour": 1e4,
                                                                  "checkpoint_interval_s": 1e8},
}


@pytest.mark.parametrize("name", list(ABSURD))
def test_one_absurd_offer_is_excluded_and_the_sheet_still_ranks(name: str) -> None:
    offers = [offer(id="sane-a"), offer(id="absurd", **ABSURD[name]), offer(id="sane-b", price=3.0)]
    result = pick(default_job(), LLAMA8, offers, today=TODAY)
    ranked = [r.offer_id for r in result.rows if r.excluded is None]
    assert ranked == ["sane-a", "sane-b"]
    bad = next(r for r in result.rows if r.offer_id == "absurd")
    assert bad.excluded and ("past $1e+12" in bad.excluded or "comes out as inf" in bad.excluded
                             or "never finishes on spot" in bad.excluded)
    json.dumps(result.model_dump(mode="json"), allow_nan=False)  # every number left is finite


def test_a_checkpoint_interval_longer_than_the_job_is_one_chunk_not_an_overflow() -> None:
    spot = offer(**SPOT, checkpoint_interval_s=1e8)
    run = expected_spot_run(spot, 3600.0)
    lam = 0.05 / 3600
    assert run.interruptions == pytest.approx(math.expm1(lam * 3600.0))  # the whole job is the one chunk
    assert math.isfinite(running_variance(spot, 3600.0))
    row = pick(default_job(), LLAMA8, [spot], today=TODAY).rows[0]
    assert row.excluded is None and row.total_usd is not None and row.total_usd < MAX_TOTAL_USD


def test_a_run_shorter_than_one_increment_is_billed_one_increment_however_long() -> None:
    assert round_bill(5008.4, 3600.0, 0.0) == 7200.0
    assert round_bill(5008.4, 1e300, 0.0) == 1e300  # was 0: the run went free
    assert round_bill(3600.00000001, 60.0, 0.0) == 3600.0 and round_bill(0.0, 60.0, 0.0) == 0.0
