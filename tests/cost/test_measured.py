"""Total job cost from a measured throughput, checked against hand-computed bills."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

import pytest

from gpuscout.cost.billing import CostOptions, price_job
from gpuscout.cost.measured import cost_point, match_offers, measured_work, price_measured
from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import PriceSheet
from gpuscout.results.schema import Case, Failure
from results import A100, BASE_TPS, FINETUNE_JOB, bench_result, metric, train_case

TODAY = date(2026, 10, 1)
MEAN_TPS = sum(BASE_TPS) / len(BASE_TPS)  # 1000.625 tokens/s


def offer(oid: str = "lambda-h100", *, gpu: str = "h100-sxm5-80gb", price: float = 3.60, currency: str = "USD",
          gpu_count: int = 1, **extra: Any) -> Offer:
    return Offer(id=oid, provider="Lambda", gpu=gpu, gpu_count=gpu_count, price=price, price_basis="instance",
                 currency=currency, billing_increment_s=60, startup_s=120, observed_at=date(2026, 9, 20),
                 source="test", **extra)


def test_finetune_work_is_dataset_tokens_times_epochs_over_measured_tokens_per_s() -> None:
    work = measured_work(bench_result("A"))
    assert work.metric == "tokens_per_s" and work.case == "train" and not work.extrapolated
    assert work.units == 36_000_000
    assert work.work_s == pytest.approx(36_000_000 / MEAN_TPS)
    assert work.work_low_s is not None and work.work_high_s is not None
    assert work.work_low_s < work.work_s < work.work_high_s
    assert "dataset_tokens 36,000,000 × epochs 1" in work.formula


def test_cost_matches_a_hand_computed_bill() -> None:
    # 36e6 tokens / 1000.625 tokens/s = 35,977.5 s of work; + 120 s startup = 36,097.5 s,
    # rounded up to whole minutes = 36,120 s = 10.0333 h × $3.60/h = $36.12.
    cost = price_measured(bench_result("A"), offer(), today=TODAY)
    assert cost.cost.billed_s == 36_120
    assert cost.total_usd == pytest.approx(36.12)
    assert cost.total_usd == pytest.approx(price_job(offer(), 36_000_000 / MEAN_TPS).total)
    assert cost.unit_costs_usd["usd_per_1m_train_tokens"] == pytest.approx(36.12 / 36)
    assert cost.low_usd is not None and cost.high_usd is not None
    assert cost.low_usd <= cost.total_usd <= cost.high_usd
    assert not cost.stale and cost.warnings == ()
    assert cost_point(cost).price_note == "Lambda's 2026-09-20 price"


def test_foreign_currency_is_converted_with_the_given_rate() -> None:
    eur = offer(currency="EUR", price=3.0)
    rate = ExchangeRate(currency="EUR", usd_per_unit=1.1, observed_at=TODAY, source="test")
    cost = price_measured(bench_result("A"), eur, rates=[rate], today=TODAY)
    assert cost.cost.total == pytest.approx(36_120 / 3600 * 3.0)
    assert cost.total_usd == pytest.approx(cost.cost.total * 1.1)
    with pytest.raises(SpecError, match="No exchange rate for EUR"):
        price_measured(bench_result("A"), eur, today=TODAY)


INFERENCE_JOB = {"kind": "inference", "name": "chat", "model": "llama-3-8b", "prompt_tokens": 512,
                 "output_tokens": 128, "concurrency": 8, "requests": 3600}


def serve_case(concurrency: int, rps: float, *, with_rps: bool = True) -> Case:
    samples = [rps * f for f in (0.99, 1.0, 1.01, 1.0)]
    metrics = [metric("output_tokens_per_s", [s * 128 for s in samples], "tokens/s")]
    if with_rps:
        metrics.append(metric("requests_per_s", samples, "requests/s"))
    return Case(name=f"c{concurrency}", params={"concurrency": concurrency}, metrics=tuple(metrics))


def test_inference_uses_the_case_at_the_jobs_concurrency() -> None:
    result = bench_result("A", kind="inference", job=INFERENCE_JOB, cases=[serve_case(1, 0.5), serve_case(8, 2.0)])
    work = measured_work(result)
    assert work.case == "c8" and work.metric == "requests_per_s"
    assert work.work_s == pytest.approx(3600 / 2.0)
    cost = price_measured(result, offer(), today=TODAY)
    assert cost.unit_costs_usd["usd_per_request"] == pytest.approx(cost.total_usd / 3600)


def test_inference_falls_back_to_output_tokens_per_s() -> None:
    result = bench_result("A", kind="inference", job=INFERENCE_JOB, cases=[serve_case(8, 2.0, with_rps=False)])
    work = measured_work(result)
    assert work.metric == "output_tokens_per_s"
    assert work.work_s == pytest.approx(3600 * 128 / 256.0)


def test_image_work_is_images_over_images_per_s() -> None:
    job = {"kind": "image", "name": "sdxl", "model": "sdxl", "images": 1000}
    case = Case(name="gen", params={}, metrics=(metric("images_per_s", [0.5, 0.51, 0.49], "images/s"),))
    work = measured_work(bench_result("A", kind="image", job=job, cases=[case]))
    assert work.work_s == pytest.approx(2000.0)


def test_depth_slice_is_priced_at_the_extrapolated_throughput() -> None:
    full = metric("tokens_per_s", [t / 10 for t in BASE_TPS], "tokens/s", extrapolated=True)
    case = train_case(BASE_TPS, extra=[full]).model_copy(update={"layers": 2, "full_layers": 32})
    work = measured_work(bench_result("A", cases=[case], layers=2))
    assert work.extrapolated and "extrapolated" in work.formula
    assert work.work_s == pytest.approx(36_000_000 / (MEAN_TPS / 10))


def sheet(offers: list[Offer]) -> PriceSheet:
    return PriceSheet(path="test sheet", offers=tuple(offers))


def test_offers_match_results_by_gpu_when_not_given() -> None:
    offers = [offer("h100"), offer("a100", gpu="a100-sxm4-80gb"), offer("h100-8x", gpu_count=8)]
    results = [bench_result("A"), bench_result("B", gpu=A100)]
    assert [o.id for o in match_offers(results, sheet(offers), [])] == ["h100", "a100"]
    with pytest.raises(SpecError, match="Several offers match") as err:
        match_offers(results, sheet([*offers, offer("h100-other")]), [])
    assert "--offer" in err.value.fix
    with pytest.raises(SpecError, match="No offer in the price sheet is for a100"):
        match_offers(results, sheet(offers[:1]), [])


def test_given_offer_ids_are_checked() -> None:
    offers = [offer("h100"), offer("a100", gpu="a100-sxm4-80gb")]
    results = [bench_result("A"), bench_result("B", gpu=A100)]
    assert [o.id for o in match_offers(results, sheet(offers), ["h100", "a100"])] == ["h100", "a100"]
    with pytest.raises(SpecError, match="for 2 results"):
        match_offers(results, sheet(offers), ["h100"])
    with pytest.raises(UnknownNameError, match="No offer 'h10'") as err:
        match_offers(results, sheet(offers), ["h10", "a100"])
    assert "h100" in err.value.fix
    with pytest.raises(SpecError, match="ran on h100-sxm5-80gb"):
        match_offers(results, sheet(offers), ["a100", "h100"])


def test_gpu_count_mismatch_is_warned_not_rescaled() -> None:
    cost = price_measured(bench_result("A"), offer(gpu_count=8, product="8x H100"), today=TODAY)
    assert any("asks for 1 GPU(s) but offer lambda-h100 has 8" in w for w in cost.warnings)
    assert math.isclose(cost.work.work_s, 36_000_000 / MEAN_TPS)


def test_multi_gpu_finetune_is_projected_over_its_data_parallel_ranks() -> None:
    job = FINETUNE_JOB | {"gpus": 8, "tensor_parallel": 2}
    work = measured_work(bench_result("A", job=job))
    assert work.work_s == pytest.approx(36_000_000 / MEAN_TPS / 4)
    assert "/ 4 data-parallel ranks" in work.formula
    cost = price_measured(bench_result("A", job=job), offer(gpu_count=8, product="8x H100"), today=TODAY)
    assert cost.warnings == ()


def test_a_failed_case_at_the_jobs_concurrency_is_not_replaced_by_another_level() -> None:
    failed = Case(name="c8", params={"concurrency": 8},
                  failure=Failure(case="c8", kind="oom", message="CUDA out of memory", size={"concurrency": 8}))
    result = bench_result("A", kind="inference", job=INFERENCE_JOB, cases=[serve_case(1, 0.5), failed])
    with pytest.raises(SpecError, match=r"the job.s own case failed \(oom"):
        measured_work(result)


def test_full_depth_metrics_named_as_the_bench_writes_them() -> None:
    full = metric("tokens_per_s_full_depth", [t / 10 for t in BASE_TPS], "tokens/s", extrapolated=True)
    case = train_case(BASE_TPS, extra=[full]).model_copy(update={"layers": 2, "full_layers": 32})
    work = measured_work(bench_result("A", cases=[case], layers=2))
    assert work.metric == "tokens_per_s_full_depth" and work.extrapolated
    assert work.work_s == pytest.approx(36_000_000 / (MEAN_TPS / 10))


def test_a_result_that_measured_no_work_is_a_clear_error() -> None:
    zero = metric("tokens_per_s", [0.0, 0.0, 0.0], "tokens/s")
    stalled = bench_result("A", cases=[train_case(BASE_TPS).model_copy(update={"metrics": (zero,)})])
    with pytest.raises(SpecError, match="never finish"):
        measured_work(stalled)


def job_time_case(per_run: list[list[float]], failed: int = 0) -> Case:
    """A train case whose runs measured the whole-job time directly (job_s), as `bench` records it;
    `failed` more runs ran out of memory."""
    from gpuscout.results.runs import merge_runs

    runs = [train_case(BASE_TPS, extra=(metric("job_s", samples, "s", higher=False),)) for samples in per_run]
    runs += [failed_case_run() for _ in range(failed)]
    return merge_runs(runs)


def failed_case_run() -> Case:
    return Case(name="train", params={"micro_batch": 1, "seq_len": 512},
                failure=Failure(case="train", kind="oom", message="CUDA out of memory", size={}))


def test_the_whole_job_time_bench_reports_is_the_time_compare_bills() -> None:
    result = bench_result("A", cases=[job_time_case([[600.0, 610.0], [590.0, 600.0], [605.0, 595.0]])])
    work = measured_work(result)
    assert work.metric == "job_s" and work.work_s == pytest.approx(600.0)  # the mean of the run means
    assert "mean of 3 runs" in work.formula
    assert work.work_low_s is not None and work.work_high_s is not None
    assert work.work_low_s < 600.0 < work.work_high_s
    cost = price_measured(result, offer(), today=TODAY)
    assert cost.cost.total == pytest.approx(price_job(offer(), 600.0).total)


def test_failed_runs_are_billed_as_failed_attempts_with_their_count() -> None:
    result = bench_result("A", cases=[job_time_case([[600.0, 600.0], [600.0, 600.0]], failed=1)])
    cost = price_measured(result, offer(), today=TODAY)
    assert (cost.failed_runs, cost.runs) == (1, 3)
    # One run in three failed: 1/3 / (1 − 1/3) = 0.5 failed attempts expected per job.
    assert cost.cost.total == pytest.approx(price_job(offer(), 600.0, CostOptions(failed_attempts=0.5)).total)
    assert cost.total_usd > price_job(offer(), 600.0).total
