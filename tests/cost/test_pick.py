"""Ranking offers: placement on the instance, exclusions with reasons, Pareto frontier, currencies."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.cost.pick import PickRow, exclusion, mark_pareto, pick, place, slo_met
from gpuscout.estimator.speed import estimate_speed
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Slo
from gpuscout.workload.presets import load_llm_preset

TODAY = date(2026, 11, 30)
LLAMA8 = load_llm_preset("llama-3-8b")
LLAMA70 = load_llm_preset("llama-3.1-70b")
EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "prices.example.toml"


def offer(**kw: Any) -> Offer:
    base: dict[str, Any] = {"id": "o", "provider": "p", "gpu": "h100", "gpu_count": 1, "price": 2.0,
                            "price_basis": "gpu", "currency": "USD", "observed_at": TODAY, "source": "test"}
    return Offer.model_validate(base | kw)


def row(runtime: float, total: float, name: str = "r") -> PickRow:
    return PickRow(offer_id=name, provider="p", tier="on-demand", gpu_sku="h100-sxm5-80gb", gpu_count=1,
                   currency="USD", observed_at=TODAY, stale=False, fits=True, gpus_needed=1, runtime_s=runtime,
                   runtime_low_s=runtime, runtime_high_s=runtime, bound="compute", total_usd=total,
                   total_p95_usd=total, unit_costs_usd={}, slo_met=None, metrics={}, excluded=None)


def test_pareto_marks_only_undominated_rows() -> None:
    rows = mark_pareto([row(10, 5, "cheap-slow"), row(5, 10, "fast-dear"), row(10, 10, "dominated"),
                        row(7, 7, "middle")])
    assert {r.offer_id: r.pareto for r in rows} == {"cheap-slow": True, "fast-dear": True, "dominated": False,
                                                     "middle": True}


@pytest.mark.parametrize(("args", "reason"), [
    ((10.0, 5.0, False, None, None), "misses the latency SLO"),
    ((7200.0, 5.0, None, 3600.0, None), "misses the deadline"),
    ((10.0, 50.0, None, None, 20.0), "over budget"),
    ((10.0, 5.0, True, 3600.0, 20.0), None),
])
def test_exclusions_have_one_line_reasons(args: tuple[Any, ...], reason: str | None) -> None:
    got = exclusion(*args)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason))


def test_a_job_that_does_not_fit_is_excluded_with_the_reason() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3.1-70b", method="full", seq_len=2048)
    result = pick(job, LLAMA70, [offer(gpu="rtx-4090")], today=TODAY)
    assert result.rows[0].excluded and result.rows[0].excluded.startswith("does not fit")


def test_serving_uses_the_smallest_tensor_parallel_group_and_replicas() -> None:
    job = InferenceJob(kind="inference", model="llama-3.1-70b", prompt_tokens=2000, output_tokens=500, concurrency=8)
    placement = place(job, LLAMA70, find_gpu("h100"), 8)
    assert placement is not None
    assert placement.group in (2, 4) and placement.replicas == 8 // placement.group


def test_eight_gpus_finish_sooner_than_one() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", seq_len=2048, dataset_tokens=10**8)
    one, eight = (pick(job, LLAMA8, [offer(gpu_count=n)], today=TODAY).rows[0] for n in (1, 8))
    assert eight.runtime_s is not None and one.runtime_s is not None
    assert eight.runtime_s < one.runtime_s / 4


def test_ranked_by_total_cost_and_deadline_excludes() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", seq_len=2048, dataset_tokens=10**8)
    offers = [offer(id="dear", price=9.0), offer(id="cheap", price=1.0), offer(id="slow", gpu="l40s", price=0.5)]
    result = pick(job, LLAMA8, offers, today=TODAY, deadline_s=4 * 3600)
    ranked = [r.offer_id for r in result.rows if r.excluded is None]
    assert ranked == ["cheap", "dear"]
    slow = next(r for r in result.rows if r.offer_id == "slow")
    assert slow.excluded is not None and "deadline" in slow.excluded


def test_slo_misses_are_excluded() -> None:
    strict = InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=4000, output_tokens=200,
                          slo=Slo(ttft_p95_s=0.001))
    result = pick(strict, LLAMA8, [offer()], today=TODAY)
    assert result.rows[0].excluded == "misses the latency SLO"


def test_other_currencies_need_an_exchange_rate() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="qlora", seq_len=1024)
    cny = offer(id="cny", currency="CNY", price=14.0)
    without = pick(job, LLAMA8, [cny], today=TODAY).rows[0]
    assert without.excluded is not None and "--fx CNY" in without.excluded
    rate = ExchangeRate(currency="CNY", usd_per_unit=0.14, observed_at=TODAY, source="test")
    with_rate = pick(job, LLAMA8, [cny], rates=[rate], today=TODAY).rows[0]
    assert with_rate.excluded is None and with_rate.cost is not None
    assert with_rate.total_usd == pytest.approx(with_rate.cost.total * 0.14)


def test_the_example_sheet_ranks_and_warns() -> None:
    sheet = load_price_sheet(EXAMPLE)
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="qlora", seq_len=2048)
    result = pick(job, LLAMA8, sheet.offers, rates=sheet.exchange_rates, today=TODAY)
    ranked = [r for r in result.rows if r.excluded is None]
    assert len(ranked) >= 10 and any(r.pareto for r in ranked)
    totals = [r.total_usd or 0 for r in ranked]
    assert totals == sorted(totals)
    assert any("EXAMPLE" in w for w in result.warnings) and any("older than 30 days" in w for w in result.warnings)


def test_unit_costs_divide_the_total() -> None:
    job = InferenceJob(kind="inference", model="llama-3-8b", requests=1000, output_tokens=250)
    r = pick(job, LLAMA8, [offer()], today=TODAY).rows[0]
    assert r.total_usd is not None
    assert r.unit_costs_usd["usd_per_request"] == pytest.approx(r.total_usd / 1000)
    assert r.unit_costs_usd["usd_per_1m_output_tokens"] == pytest.approx(r.total_usd / 250_000 * 1e6)


def test_slo_is_judged_at_the_slow_end_of_the_band() -> None:
    """A P95 target the mean estimate meets but the band's slow end misses is a miss: a mean flatters."""
    job = InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=1000, output_tokens=200, concurrency=8)
    speed = estimate_speed(job, LLAMA8, find_gpu("h100"))
    tpot, slow = speed.metrics["tpot_s"], speed.efficiency.band_high
    assert slow > 1.1
    between = job.model_copy(update={"slo": Slo(tpot_p95_s=tpot * (1 + slow) / 2)})
    beyond = job.model_copy(update={"slo": Slo(tpot_p95_s=tpot * slow * 1.01)})
    assert slo_met(between, speed) is False and slo_met(beyond, speed) is True
    assert pick(between, LLAMA8, [offer()], today=TODAY).rows[0].excluded == "misses the latency SLO"


@pytest.mark.parametrize("job", [
    InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=1000, output_tokens=200, requests=4000),
    ImageJob(kind="image", model="sdxl", images=800),
], ids=["serving", "image"])
def test_every_gpu_of_the_instance_serves_as_a_replica(job: InferenceJob | ImageJob) -> None:
    """One replica fits one GPU, so 8 GPUs work through the requests or images 8 times as fast."""
    model = LLAMA8 if isinstance(job, InferenceJob) else load_image_preset("sdxl")
    one, eight = (pick(job, model, [offer(gpu_count=n)], today=TODAY).rows[0] for n in (1, 8))
    assert one.runtime_s is not None and eight.runtime_s is not None
    assert eight.runtime_s == pytest.approx(one.runtime_s / 8)
    throughput = "output_tokens_per_s" if isinstance(job, InferenceJob) else "images_per_s"
    assert eight.metrics[throughput] == pytest.approx(8 * one.metrics[throughput])
    latency = "tpot_s" if isinstance(job, InferenceJob) else "s_per_image"
    if latency in one.metrics:
        assert eight.metrics[latency] == pytest.approx(one.metrics[latency])  # latency does not scale
