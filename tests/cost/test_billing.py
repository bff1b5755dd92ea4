"""Every billing rule with a hand-computed case; the plain product; spot closed form vs simulation."""

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

from gpuscout.cost.billed_time import billed_seconds
from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.pick import pick
from gpuscout.cost.spot import (
    Z_95,
    SpotNeverFinishes,
    expected_spot_run,
    running_variance,
    simulate_spot_run,
    spot_p95_billed_s,
)
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
