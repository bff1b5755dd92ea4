"""Cost bands on known numbers: the band's ends, where overlap begins (touching ends overlap), offers
that share one runtime, the money at stake, and what a trial costs under a billing minimum."""

from __future__ import annotations

import inspect
import math
from datetime import date
from typing import Any

import pytest

from gpuscout.cli import app as cli_app
from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.cost_band import band_of, mark_separable, overlaps, separable, stake_usd, total_band
from gpuscout.cost.pick import pick
from gpuscout.cost.pick_row import PickRow, row_base
from gpuscout.cost.trial_price import (
    BENCH_REPEATS,
    BENCH_RUNS,
    BENCH_WARMUP,
    bench_command,
    trial_advice,
    trial_bill,
    trial_work_s,
)
from gpuscout.hardware.offers import Offer
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.presets import load_llm_preset

TODAY = date(2026, 12, 1)


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "t", "provider": "test", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 30),
                            "source": "hand-made test offer"}
    return Offer.model_validate(base | kw)


def row(low: float, high: float | None, total: float | None = None, *, gpu: str = "h100", oid: str = "r",
        **kw: Any) -> PickRow:
    fields: dict[str, Any] = row_base(offer(id=oid, gpu=gpu), TODAY) | {
        "fits": True, "excluded": None, "total_usd": total if total is not None else low,
        "total_p95_usd": total if total is not None else low, "total_low_usd": low, "total_high_usd": high,
        "runtime_s": 1000.0, "runtime_low_s": 800.0, "runtime_high_s": 1500.0, "gpus_per_replica": 1,
        "replicas": 1, "bound": "compute"}
    return PickRow(**fields | kw)


def test_touching_bands_overlap_and_a_cent_apart_do_not() -> None:
    assert overlaps((10.0, 20.0), (20.0, 30.0))  # a shared end is a tie the estimate cannot break
    assert not overlaps((10.0, 20.0), (20.01, 30.0))
    assert overlaps((20.0, 30.0), (10.0, 20.0))  # symmetric
    assert overlaps((10.0, None), (1e9, 2e9))  # an open high end reaches everything


def test_the_boundary_on_rows_of_different_gpus() -> None:
    winner = row(10.0, 20.0, oid="w", gpu="rtx-4090")
    assert not separable(winner, row(20.0, 30.0, oid="touch"))
    assert separable(winner, row(20.01, 30.0, oid="apart"))
    marked = mark_separable([winner, row(20.0, 30.0, oid="touch"), row(20.01, 30.0, oid="apart")])
    assert [r.separable for r in marked] == [None, False, True]


def test_offers_sharing_one_runtime_are_told_apart_by_price_alone() -> None:
    # Same GPU, count, layout and plan: at any runtime the dearer offer is dearer, though the bands overlap.
    winner = row(10.0, 20.0, oid="w")
    dearer = row(12.0, 25.0, oid="d")
    assert overlaps(band_of(winner), band_of(dearer)) and separable(winner, dearer)
    assert stake_usd(winner, dearer) == 0.0
    # Cheaper at the slow end (a longer billing minimum on the winner, say): the order depends on the runtime.
    crossing = row(12.0, 18.0, oid="c")
    assert not separable(winner, crossing)
    assert stake_usd(winner, crossing) == pytest.approx(2.0)  # 20 − 18 at the slow end


def test_money_at_stake_is_the_largest_difference_the_bands_allow() -> None:
    winner = row(10.0, 20.0, oid="w", gpu="rtx-4090")
    assert stake_usd(winner, row(15.0, 30.0, oid="c")) == pytest.approx(5.0)  # winner at 20, challenger at 15
    assert stake_usd(winner, row(25.0, 30.0, oid="c")) == 0.0  # apart: nothing at stake


def test_a_risk_is_one_more_term_on_the_high_end() -> None:
    assert total_band(10.0, 20.0) == (10.0, 20.0)
    assert total_band(10.0, 20.0, (1.5, 0.5)) == (10.0, 22.0)
    assert total_band(10.0, None, (1.5,)) == (10.0, None)


def test_the_band_ends_are_the_bills_at_the_runtime_band_ends() -> None:
    # Per-second billing and no extras: each end is price × hours at that end of the runtime band.
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="qlora", seq_len=1024, dataset_tokens=10**8)
    model = load_llm_preset("llama-3-8b")
    result = pick(job, model, [offer(id="a", price=3.6)], today=TODAY)
    (r,) = result.rows
    assert r.excluded is None and r.runtime_low_s is not None and r.runtime_high_s is not None
    # (billed in whole seconds: the default 1 s increment)
    assert r.total_low_usd == pytest.approx(3.6 * math.ceil(r.runtime_low_s) / 3600)
    assert r.total_high_usd == pytest.approx(3.6 * math.ceil(r.runtime_high_s) / 3600)
    assert r.total_low_usd < (r.total_usd or 0) < r.total_high_usd


def test_the_trial_is_the_default_bench_billed_under_the_minimum() -> None:
    # Defaults of `gpuscout bench`: the trial's slice is that bench.
    params = inspect.signature(cli_app.bench).parameters
    assert (params["warmup"].default, params["repeats"].default, params["runs"].default) == \
        (BENCH_WARMUP, BENCH_REPEATS, BENCH_RUNS)
    r = row(10.0, 20.0, metrics={"step_s": 2.0})  # runtime 1000 s, slow end 1500 s: steps at 1.5 × 2 s
    assert trial_work_s(r) == pytest.approx(21 * 2.0 * 1.5)  # 3 runs × (2 warm-up + 5 timed) = 21 steps
    hourly_minimum = offer(price=2.0, min_billed_s=3600, startup_s=120, idle_tail_s=60)
    bill = trial_bill(r, hourly_minimum, (), "cmd")
    assert bill is not None and bill.billed_s == 3600 and bill.total_usd == pytest.approx(2.0)
    per_second = offer(price=2.0, startup_s=120, idle_tail_s=60)
    bill = trial_bill(r, per_second, (), "cmd")
    assert bill is not None and bill.billed_s == pytest.approx(120 + 63 + 60)
    assert bill.total_usd == pytest.approx(2.0 * 243 / 3600)


def test_a_trial_never_runs_longer_than_the_job() -> None:
    r = row(1.0, 2.0, metrics={"step_s": 100.0})
    assert trial_work_s(r) == 1500.0  # the slow end of the whole job
    assert trial_work_s(row(1.0, 2.0)) is None  # no step time: no slice to price


def test_the_advice_prices_both_trials_against_the_stake() -> None:
    offers = [offer(id="w", gpu="rtx-4090", price=1.0, min_billed_s=3600), offer(id="c", price=2.0)]
    winner = row(10.0, 20.0, oid="w", gpu="rtx-4090", metrics={"step_s": 1.0})
    challenger = row(15.0, 30.0, oid="c", metrics={"step_s": 1.0}, separable=False)
    advice = trial_advice([winner, challenger], offers, job_arg="job.toml")
    assert advice is not None and advice.needed and advice.challenger_id == "c"
    assert advice.stake_usd == pytest.approx(5.0)
    slice_s = math.ceil(21 * 1.0 * 1.5)  # billed in whole seconds (the default 1 s increment)
    assert [t.total_usd for t in advice.trials] == pytest.approx([1.0, 2.0 * slice_s / 3600])
    assert advice.trial_usd == pytest.approx(1.0 + 2.0 * slice_s / 3600) and advice.pays
    assert advice.trials[0].command == "gpuscout bench job.toml --offer w -o a.json"
    assert advice.compare_command == "gpuscout compare a.json b.json --offer w --offer c"
    # A stake smaller than the trial: not worth it.
    close = row(19.5, 30.0, oid="c", metrics={"step_s": 1.0}, separable=False)
    advice = trial_advice([winner, close], offers)
    assert advice is not None and advice.stake_usd == pytest.approx(0.5) and not advice.pays


def test_a_clear_winner_needs_no_trial() -> None:
    advice = trial_advice([row(10.0, 20.0, oid="w", gpu="rtx-4090"), row(25.0, 30.0, oid="c", separable=True)],
                          [offer(id="w"), offer(id="c")])
    assert advice is not None and not advice.needed and advice.trials == ()
    assert trial_advice([row(10.0, 20.0)], [offer()]) is None  # one ranked offer: nothing to order


def test_the_commands_name_the_sheet_the_user_gave() -> None:
    assert bench_command("", "x", "a.json", None) == "gpuscout bench --offer x -o a.json"
    assert bench_command("j.toml", "x", "b.json", "my.toml") == \
        "gpuscout bench j.toml --offers my.toml --offer x -o b.json"


@pytest.mark.parametrize("terms", [{}, {"min_billed_s": 3600, "billing_increment_s": 60, "startup_s": 300},
                                   {"interruptions_per_hour": 0.2, "restart_overhead_s": 600, "tier": "spot"},
                                   {"storage": [{"name": "disk", "size_gb": 100, "price_per_gb_month": 0.1}]}])
def test_a_bill_without_formulas_has_the_same_amounts(terms: dict[str, Any]) -> None:
    # The band ends are priced without the formula strings; every amount must be the full bill's.
    o = offer(**terms)
    opts = CostOptions(failed_attempts=1.0, egress_gb=0.0)
    full, bare = price_job(o, 7200.0, opts), price_job(o, 7200.0, opts, formulas=False)
    assert (bare.total, bare.total_p95, bare.billed_s) == (full.total, full.total_p95, full.billed_s)
    assert [line.amount for line in bare.lines] == [line.amount for line in full.lines]
