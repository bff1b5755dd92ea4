"""Every billing rule with a hand-computed case; the plain product; spot closed form vs simulation;
when the meter starts; stop or release after the job; a bill in the user's currency."""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.cost.billed_time import billed_seconds, billed_startup_s
from gpuscout.cost.billing import CostOptions, bill_in, cost_options, price_job
from gpuscout.cost.pick import pick
from gpuscout.cost.spot import (
    Z_95,
    SpotNeverFinishes,
    expected_spot_run,
    running_variance,
    simulate_spot_run,
    spot_p95_billed_s,
)
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import ExchangeRate, display_currency
from gpuscout.hardware.offers import EgressTier, Offer, StorageItem
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.presets import load_llm_preset


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "t", "provider": "test", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 30),
                            "source": "hand-made test offer"}
    return Offer.model_validate(base | kw)


@settings(max_examples=200, deadline=None)
@given(price=st.floats(0.01, 100), gpus=st.integers(1, 16), seconds=st.integers(1, 3_600_000))
def test_with_no_extras_the_total_is_price_times_gpus_times_hours(price: float, gpus: int, seconds: int) -> None:
    # Per-second billing, no minimum, no startup, tail, storage, egress, failures or spot: the plain product.
    hours = seconds / 3600
    cost = price_job(offer(price=price, gpu_count=gpus), seconds)
    assert cost.total == pytest.approx(price * gpus * hours, rel=1e-12)
    assert cost.total_p95 == cost.total


def test_an_instance_price_is_not_multiplied_by_the_gpu_count_again() -> None:
    cost = price_job(offer(price=24.0, price_basis="instance", gpu_count=8), 3600)
    assert cost.total == pytest.approx(24.0)


def test_per_minute_increments_round_up() -> None:
    # Lambda bills in one-minute increments: 61 s of work is 2 billed minutes.
    lam = offer(price=60.0, billing_increment_s=60)
    assert billed_seconds(61, lam) == 120
    assert price_job(lam, 61).total == pytest.approx(2.0)


def test_each_start_pays_the_minimum() -> None:
    # AWS / GCP: a 60 s minimum per start, then per second.
    aws = offer(price=36.0, min_billed_s=60)
    assert price_job(aws, 10).total == pytest.approx(36.0 * 60 / 3600)
    assert price_job(aws, 90).total == pytest.approx(36.0 * 90 / 3600)


def test_startup_and_idle_tail_are_billed() -> None:
    cost = price_job(offer(price=3.6, startup_s=300, idle_tail_s=600), 3600)
    assert cost.billed_s == 4500
    assert cost.total == pytest.approx(3.6 * 4500 / 3600)


def test_storage_bills_its_lifetime_and_the_stopped_rate() -> None:
    # 100 GB at 0.10/GB-month for a full 730 h month = 10; stopped 365 h at 0.20 = 10 more.
    disk = StorageItem(name="volume", size_gb=100, price_per_gb_month=0.10, stopped_price_per_gb_month=0.20,
                       lifetime_hours=730)
    cost = price_job(offer(storage=(disk,), stopped_hours=365), 3600)
    line = next(ln for ln in cost.lines if ln.name == "storage: volume")
    assert line.amount == pytest.approx(10.0 + 10.0)


def test_storage_without_lifetime_lasts_as_long_as_the_bill() -> None:
    disk = StorageItem(name="disk", size_gb=730, price_per_gb_month=1.0)
    cost = price_job(offer(storage=(disk,), startup_s=1800), 1800)
    assert next(ln.amount for ln in cost.lines if ln.name == "storage: disk") == pytest.approx(1.0)


def test_compute_billed_while_stopped() -> None:
    # Azure "Stopped" (not deallocated) keeps billing compute.
    cost = price_job(offer(stopped_hours=10, stopped_price_per_hour=1.5), 3600)
    assert next(ln.amount for ln in cost.lines if ln.name == "compute while stopped") == pytest.approx(15.0)


def test_egress_tiers_after_the_free_allowance() -> None:
    tiers = (EgressTier(up_to_gb=1000, price_per_gb=0.09), EgressTier(up_to_gb=None, price_per_gb=0.05))
    aws = offer(egress_free_gb=100, egress_tiers=tiers)
    # 1600 GB: 100 free, then 1000 GB at 0.09 (= 90) and 500 GB at 0.05 (= 25).
    cost = price_job(aws, 3600, CostOptions(egress_gb=1600))
    assert next(ln.amount for ln in cost.lines if ln.name == "egress") == pytest.approx(115.0)


def test_failed_attempts_pay_their_startup_work_and_minimum() -> None:
    o = offer(price=3.6, startup_s=60, min_billed_s=600)
    cost = price_job(o, 3600, CostOptions(failed_attempts=2, failure_progress=0.1))
    # Each failure: 60 s startup + 360 s work = 420 s, raised to the 600 s minimum.
    assert next(ln.amount for ln in cost.lines if ln.name == "failed attempts") == pytest.approx(2 * 600 / 1000)


def test_discount_applies_to_the_rate() -> None:
    assert price_job(offer(price=10.0, discount=0.2), 3600).total == pytest.approx(8.0)


SPOT = {"tier": "spot", "interruptions_per_hour": 0.2, "checkpoint_interval_s": 1800,
        "restart_overhead_s": 600, "startup_s": 300}


def test_spot_closed_form_matches_the_simulation() -> None:
    o = offer(**SPOT)
    work = 20 * 3600.0
    expected = expected_spot_run(o, work)
    runs = simulate_spot_run(o, work, runs=4000, seed=7)
    mean_billed = sum(r.billed_s for r in runs) / len(runs)
    mean_interruptions = sum(r.interruptions for r in runs) / len(runs)
    assert mean_interruptions == pytest.approx(expected.interruptions, rel=0.03)
    assert mean_billed == pytest.approx(expected.billed_s, rel=0.01)


def test_spot_small_rate_limit_is_half_an_interval_lost_per_interruption() -> None:
    o = offer(**(SPOT | {"interruptions_per_hour": 0.001, "restart_overhead_s": 0, "startup_s": 0}))
    work = 100 * 3600.0
    run = expected_spot_run(o, work)
    assert run.running_s - work == pytest.approx(run.interruptions * 900, rel=0.01)


def test_spot_p95_is_above_the_mean_and_restarts_pay_the_minimum() -> None:
    o = offer(**(SPOT | {"interruptions_per_hour": 1.0, "min_billed_s": 3600, "restart_overhead_s": 0}))
    cost = price_job(o, 10 * 3600.0, CostOptions(spot_samples=500, seed=1))
    assert cost.total_p95 > cost.total > 2.0 * 10
    runs = simulate_spot_run(o, 10 * 3600.0, runs=200, seed=3)
    for r in runs:
        assert r.billed_s >= (r.interruptions + 1) * 3600  # every segment at least the minimum


def test_spot_simulation_is_seeded() -> None:
    o = offer(**SPOT)
    a = simulate_spot_run(o, 36000, runs=50, seed=11)
    b = simulate_spot_run(o, 36000, runs=50, seed=11)
    assert a == b


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: the bound is a property of the algorithm, far above its real cost."""
    def expire(signum: int, frame: object) -> None:
        raise AssertionError(f"did not finish within {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("per_hour", [30.0, 100.0, 1e6, 1e300])
def test_interruptions_far_more_often_than_checkpoints_never_finish(per_hour: float) -> None:
    o = offer(**(SPOT | {"interruptions_per_hour": per_hour}))
    with within(20), pytest.raises(SpotNeverFinishes, match="checkpoint") as err:
        price_job(o, 10 * 3600.0)
    assert "Checkpoint more often" in err.value.fix


@pytest.mark.parametrize("hours", [1e5, 1e9])
def test_very_long_spot_jobs_are_priced_in_bounded_time(hours: float) -> None:
    o = offer(**SPOT)
    with within(20):
        cost = price_job(o, hours * 3600.0)
    assert math.isfinite(cost.total_p95) and cost.total_p95 > cost.total > 2.0 * hours
    assert "normal approximation" in cost.p95_method


def test_the_normal_approximation_agrees_with_the_simulation() -> None:
    """Where both apply (hundreds of interruptions), the approximate P95 is within 2% of the simulated one."""
    o = offer(**(SPOT | {"interruptions_per_hour": 0.5, "checkpoint_interval_s": 900}))
    work = 1000 * 3600.0  # ~ 500 interruptions: simulated in 200 runs = 100,000 events, under the budget
    simulated, method = spot_p95_billed_s(o, work, runs=200, seed=5)
    assert "simulation" in method
    approximated = expected_spot_run(o, work).billed_s + Z_95 * math.sqrt(running_variance(o, work))
    assert approximated == pytest.approx(simulated, rel=0.02)


def test_pick_excludes_an_offer_that_never_finishes_on_spot() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="qlora", seq_len=1024, dataset_tokens=10**8)
    row = pick(job, load_llm_preset("llama-3-8b"), [offer(**(SPOT | {"interruptions_per_hour": 100.0}))],
               today=date(2026, 11, 30)).rows[0]
    assert row.excluded is not None and row.excluded.startswith("never finishes on spot")


# --- when billing starts (docs/cost.md §2.4) -------------------------------------------------------

LAUNCH = {"provision_s": 60, "power_on_s": 30, "boot_s": 90, "startup_s": 240}


@pytest.mark.parametrize(("starts", "billed_startup"), [("request", 420), ("created", 360), ("running", 330),
                                                        ("healthy", 240)])
def test_the_meter_bills_only_the_launch_phases_after_it_starts(starts: str, billed_startup: float) -> None:
    o = offer(price=3.6, billing_starts=starts, **LAUNCH)
    assert billed_startup_s(o) == billed_startup
    cost = price_job(o, 3600)
    assert cost.billed_s == 3600 + billed_startup
    assert cost.total == pytest.approx(3.6 * (3600 + billed_startup) / 3600)
    assert f"billed from {starts}" in cost.lines[0].formula


def test_the_same_boot_is_paid_on_aws_and_free_on_lambda() -> None:
    aws = offer(billing_starts="running", boot_s=90, startup_s=240)
    lam = offer(billing_starts="healthy", boot_s=90, startup_s=240)
    assert price_job(aws, 3600).billed_s - price_job(lam, 3600).billed_s == 90


def test_an_offer_with_only_startup_is_billed_exactly_that_from_any_start() -> None:
    for starts in ("request", "created", "running", "healthy"):
        assert price_job(offer(billing_starts=starts, startup_s=300), 3600).billed_s == 3900


def test_every_failed_attempt_and_the_first_spot_segment_pay_the_billed_launch() -> None:
    early, late = (offer(price=3.6, billing_starts=s, **LAUNCH) for s in ("request", "healthy"))
    fail = CostOptions(failed_attempts=1, failure_progress=0.0)
    failed = [next(ln.amount for ln in price_job(o, 3600, fail).lines if ln.name == "failed attempts")
              for o in (early, late)]
    assert failed == [pytest.approx(3.6 * 420 / 3600), pytest.approx(3.6 * 240 / 3600)]
    spot_early, spot_late = (offer(**(SPOT | LAUNCH | {"billing_starts": s})) for s in ("request", "healthy"))
    work = 10 * 3600.0
    assert expected_spot_run(spot_early, work).running_s - expected_spot_run(spot_late, work).running_s == \
        pytest.approx(180)
    first = [simulate_spot_run(o, work, runs=1, seed=2)[0] for o in (spot_early, spot_late)]
    assert first[0].running_s - first[1].running_s == pytest.approx(180)


# --- stop or release after the job (docs/cost.md §2.6) ---------------------------------------------

def test_keeping_the_machine_stopped_bills_its_disks_at_the_stopped_rate() -> None:
    # RunPod volume disk: 0.10 running, 0.20 stopped per GB-month; kept stopped 7 days = 168 h.
    disk = StorageItem(name="volume", size_gb=100, price_per_gb_month=0.10, stopped_price_per_gb_month=0.20)
    o = offer(storage=(disk,))
    released = price_job(o, 3600)
    kept = price_job(o, 3600, CostOptions(keep_stopped_days=7))
    storage = [next(ln.amount for ln in c.lines if ln.name == "storage: volume") for c in (released, kept)]
    assert storage[1] - storage[0] == pytest.approx(100 * 0.20 * 168 / 730)
    assert kept.total - released.total == pytest.approx(100 * 0.20 * 168 / 730)
    compute = next(ln for ln in kept.lines if ln.name == "compute kept stopped after the job")
    assert compute.amount == 0.0  # shown at zero: keeping it was priced, and compute stops when stopped
    assert not any(ln.name == "compute kept stopped after the job" for ln in released.lines)


def test_keeping_stopped_bills_stopped_compute_where_the_provider_does() -> None:
    # Azure "Stopped" (not deallocated) keeps billing compute.
    cost = price_job(offer(stopped_price_per_hour=1.5), 3600, CostOptions(keep_stopped_days=2))
    assert next(ln.amount for ln in cost.lines if ln.name == "compute kept stopped after the job") == \
        pytest.approx(48 * 1.5)


def test_storage_with_its_own_lifetime_is_not_extended_by_keeping_the_machine() -> None:
    volume = StorageItem(name="network volume", size_gb=730, price_per_gb_month=1.0, lifetime_hours=10)
    released, kept = (price_job(offer(storage=(volume,)), 3600, CostOptions(keep_stopped_days=d)) for d in (0, 30))
    amounts = [next(ln.amount for ln in c.lines if ln.name == "storage: network volume") for c in (released, kept)]
    assert amounts == [pytest.approx(10.0), pytest.approx(10.0)]


@pytest.mark.parametrize("days", [-1.0, math.nan, math.inf, 3651.0])
def test_days_kept_stopped_are_checked(days: float) -> None:
    with pytest.raises(SpecError, match="--keep-stopped-days") as err:
        cost_options(keep_stopped_days=days)
    assert "3650" in err.value.why


# --- a bill in another currency ---------------------------------------------------------------------

CNY = ExchangeRate(currency="CNY", usd_per_unit=0.14, observed_at=date(2026, 11, 30), source="test rate")


def test_a_bill_is_shown_in_the_users_currency_line_by_line() -> None:
    bill = price_job(offer(price=10.0, currency="CNY", startup_s=360), 3600)
    in_usd = bill_in(bill, display_currency("USD", [CNY]), [CNY])
    assert in_usd.currency == "USD" and in_usd.total == pytest.approx(bill.total * 0.14)
    assert [ln.amount for ln in in_usd.lines] == [pytest.approx(ln.amount * 0.14) for ln in bill.lines]
    assert "converted from CNY to USD" in in_usd.note
    assert bill_in(bill, display_currency("CNY", [CNY]), [CNY]) == bill  # same currency: nothing to convert
    with pytest.raises(SpecError, match="No exchange rate for CNY"):
        bill_in(bill, display_currency(None, []), [])


def test_pick_prices_keeping_the_machine_stopped_instead_of_releasing_it() -> None:
    from gpuscout import api

    released, kept = ({r.offer_id: r for r in api.pick(None, options=CostOptions(keep_stopped_days=d),
                                                        today=date(2026, 12, 1)).pick.rows} for d in (0, 7))
    runpod, lam = "runpod-community-h100-sxm", "lambda-h100-sxm-1x"  # a 100 GB volume at 0.20 stopped; no disk
    assert kept[runpod].total_usd == pytest.approx((released[runpod].total_usd or 0) + 100 * 0.20 * 168 / 730)
    assert kept[lam].total_usd == pytest.approx(released[lam].total_usd)
