"""Ranking offers: placement on the instance, plans that keep the task, exclusions with reasons,
Pareto frontier, currencies."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.cost.pick import lay_out, mark_pareto, pick, place, slo_met
from gpuscout.cost.pick_row import PickRow, exclusion
from gpuscout.estimator.fit import planned_job
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.serving.from_speed import engine_limits, sim_config, step_costs
from gpuscout.estimator.serving.model import Arrivals, SimConfig
from gpuscout.estimator.serving.replica import sim_requests
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Slo
from gpuscout.workload.jobs import default_job
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


@pytest.mark.parametrize("seed", range(20))
def test_pareto_sweep_matches_the_pairwise_definition(seed: int) -> None:
    """Ties included: a small grid of runtimes and totals makes many equal values."""
    import random

    rnd = random.Random(seed)
    rows = [row(rnd.randint(1, 6), rnd.randint(1, 6), f"r{i}") for i in range(rnd.randint(1, 30))]

    def dominated(r: PickRow) -> bool:
        rt, tot = r.runtime_s or 0, r.total_usd or 0
        return any((o.runtime_s or 0) <= rt and (o.total_usd or 0) <= tot
                   and ((o.runtime_s or 0) < rt or (o.total_usd or 0) < tot) for o in rows)

    assert [r.pareto for r in mark_pareto(rows)] == [not dominated(r) for r in rows]


@pytest.mark.parametrize(("args", "reason"), [
    ((10.0, 5.0, "TPOT 0.0700 s > 0.05 s at the band's slow end", None, None), "misses the latency SLO: TPOT"),
    ((7200.0, 5.0, None, 3600.0, None), "misses the deadline"),
    ((10.0, 50.0, None, None, 20.0), "over budget"),
    ((10.0, 5.0, None, 3600.0, 20.0), None),
])
def test_exclusions_have_one_line_reasons(args: tuple[Any, ...], reason: str | None) -> None:
    got = exclusion(*args)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason))


def test_a_job_that_does_not_fit_is_excluded_with_the_reason_and_no_time() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3.1-70b", method="full", seq_len=2048)
    row = pick(job, LLAMA70, [offer(gpu="rtx-4090")], today=TODAY).rows[0]
    assert row.excluded and row.excluded.startswith("does not fit") and row.excluded.endswith("even with a plan")
    assert row.runtime_s is None and row.total_usd is None and not row.plan
    assert row.options and all(not o.keeps_task and o.saves_bytes > 0 for o in row.options)
    assert "LoRA instead of full fine-tuning" in [o.change for o in row.options]


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
    reason = pick(strict, LLAMA8, [offer()], today=TODAY).rows[0].excluded
    assert reason is not None and reason.startswith("misses the latency SLO: P95 TTFT ")
    assert "> 0.001 s at 1 user a replica (simulated, the band's slow end)" in reason


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
    # pick simulates the load; its verdict is judged at the slow end of the same band
    gpu = find_gpu("h100")
    users = Arrivals(kind="concurrency", concurrency=8, requests=400, prompt_tokens=1000, output_tokens=200)
    mid, end = (simulate(sim_config(job, LLAMA8, gpu, slow_end=s), users).tpot_s.p95 for s in (False, True))
    assert end > mid * 1.1
    target = Slo(tpot_p95_s=(mid + end) / 2)
    reason = pick(job.model_copy(update={"slo": target}), LLAMA8, [offer()], today=TODAY).rows[0].excluded
    assert reason is not None and reason.startswith(f"misses the latency SLO: P95 TPOT {end:.3g} s > ")
    assert "at 8 users a replica (simulated, the band's slow end)" in reason
    met = pick(job.model_copy(update={"slo": Slo(tpot_p95_s=end * 1.01)}), LLAMA8, [offer()], today=TODAY).rows[0]
    assert met.excluded is None and met.slo_met and met.slo_source == "simulated"


@pytest.mark.parametrize("job", [
    InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=1000, output_tokens=200, requests=4000,
                 concurrency=8),
    ImageJob(kind="image", model="sdxl", images=800),
], ids=["serving", "image"])
def test_every_gpu_of_the_instance_serves_as_a_replica(job: InferenceJob | ImageJob) -> None:
    """One replica fits one GPU, so 8 GPUs work through the requests or images 8 times as fast. A serving
    job's `concurrency` is its users, spread over the replicas: 8 times the users keep 8 replicas as busy
    as one."""
    model = LLAMA8 if isinstance(job, InferenceJob) else load_image_preset("sdxl")
    many = job.model_copy(update={"concurrency": 64}) if isinstance(job, InferenceJob) else job
    one, eight = pick(job, model, [offer(gpu_count=1)], today=TODAY).rows[0], \
        pick(many, model, [offer(gpu_count=8)], today=TODAY).rows[0]
    assert one.runtime_s is not None and eight.runtime_s is not None
    assert eight.runtime_s == pytest.approx(one.runtime_s / 8)
    throughput = "output_tokens_per_s" if isinstance(job, InferenceJob) else "images_per_s"
    assert eight.metrics[throughput] == pytest.approx(8 * one.metrics[throughput])
    latency = "tpot_s" if isinstance(job, InferenceJob) else "s_per_image"
    if latency in one.metrics:
        assert eight.metrics[latency] == pytest.approx(one.metrics[latency])  # latency does not scale


# A plain bf16 LoRA of Llama-3-8B, 91.6 GiB as written: past an H100 until a plan changes it.
PLAIN_LORA = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", micro_batch=4, seq_len=2048,
                         grad_accum=4, dataset_tokens=10**7)
SMALL_CARDS = ("rtx-4090", "a100-40gb")


def test_plain_lora_ranks_small_cards_under_a_plan_that_keeps_the_task() -> None:
    assert not estimate_memory(PLAIN_LORA, LLAMA8, find_gpu("h100")).fits
    offers = [offer(id=g, gpu=g, price=1.0) for g in (*SMALL_CARDS, "h100")]
    rows = {r.offer_id: r for r in pick(PLAIN_LORA, LLAMA8, offers, today=TODAY).rows}
    for gpu in (*SMALL_CARDS, "h100"):
        r = rows[gpu]
        assert r.excluded is None and r.fits and r.plan, gpu
        assert all(step.keeps_task for step in r.plan)
        planned = planned_job(PLAIN_LORA, r.plan)
        assert estimate_memory(planned, LLAMA8, find_gpu(gpu)).fits
        assert isinstance(planned, FinetuneJob)
        assert planned.micro_batch * planned.grad_accum == 16 and planned.seq_len == 2048  # same global batch


def test_as_written_excludes_what_only_a_plan_fits() -> None:
    offers = [offer(id=g, gpu=g) for g in SMALL_CARDS]
    rows = pick(PLAIN_LORA, LLAMA8, offers, today=TODAY, as_written=True).rows
    assert all(r.excluded is not None and r.excluded.endswith("as written") for r in rows)
    assert all(not r.plan and not r.options and r.runtime_s is None for r in rows)


def test_the_default_qlora_job_ranks_24_gb_cards() -> None:
    job = default_job()
    gpu = find_gpu("rtx-4090")
    assert not estimate_memory(job, LLAMA8, gpu).fits
    r = pick(job, LLAMA8, [offer(gpu="rtx-4090")], today=TODAY).rows[0]
    assert r.excluded is None and r.plan and r.total_usd is not None
    assert r.plan[0].spec_change == {"micro_batch": 1, "grad_accum": 16}
    assert pick(job, LLAMA8, [offer(gpu="rtx-4090")], today=TODAY, as_written=True).rows[0].excluded


def test_a_plan_is_never_free() -> None:
    """The planned runtime is at least the as-written runtime on a GPU where both would run,
    and the band's slow end widens by the plan's factor for what the model leaves out."""
    layout = lay_out(PLAIN_LORA, LLAMA8, find_gpu("rtx-4090"), 1)
    assert layout.placement is not None and layout.speed is not None and layout.placement.plan
    as_if = estimate_speed(PLAIN_LORA, LLAMA8, find_gpu("rtx-4090"))
    assert layout.runtime_s >= as_if.job_s
    assert layout.runtime_high_s > layout.speed.job_high_s * 0.999
    assert layout.runtime_high_s / layout.runtime_s > as_if.job_high_s / as_if.job_s


def test_task_changing_fixes_never_enter_a_ranked_plan() -> None:
    jobs: list[tuple[FinetuneJob | InferenceJob | ImageJob, Any]] = [
        (FinetuneJob(kind="finetune", model="llama-3-8b", method="full", seq_len=4096, micro_batch=2), LLAMA8),
        (PLAIN_LORA, LLAMA8),
        (InferenceJob(kind="inference", model="llama-3.1-70b", prompt_tokens=8000, output_tokens=500,
                      concurrency=32), LLAMA70),
        (ImageJob(kind="image", model="sdxl", batch=8, dtype="fp32"), load_image_preset("sdxl")),
    ]
    offers = [offer(id=f"{g}-{n}", gpu=g, gpu_count=n) for g in ("rtx-4090", "l40s", "a100-40gb", "h100")
              for n in (1, 2, 8)]
    planned = offered = 0
    for job, model in jobs:
        rows = pick(job, model, offers, today=TODAY).rows
        assert all(step.keeps_task for r in rows for step in r.plan)
        assert all(not o.keeps_task for r in rows for o in r.options)
        assert all(not r.options for r in rows if r.excluded is None)
        planned += sum(1 for r in rows if r.plan and r.excluded is None)
        offered += sum(1 for r in rows if r.options)
    assert planned and offered  # plans were made, and task changes were on the table but left out


def test_json_carries_the_plan_in_full() -> None:
    result = pick(PLAIN_LORA, LLAMA8, [offer(gpu="rtx-4090")], today=TODAY)
    dumped = result.model_dump(mode="json")
    plan = dumped["rows"][0]["plan"]
    assert plan and {"change", "spec_change", "saves_bytes", "peak_bytes", "speed_cost", "keeps_task",
                     "slowdown", "slowdown_high"} <= set(plan[0])
    assert plan[-1]["fits"] and all(step["saves_bytes"] > 0 for step in plan)
    assert dumped["as_written"] is False


def test_serving_plans_time_fp8_kv_at_the_original_width() -> None:
    """fp8 KV frees memory but brings no latency gain in vLLM: the plan must not look faster for it."""
    job = InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=6000, output_tokens=2000,
                       concurrency=32)
    gpu = find_gpu("l40s")
    layout = lay_out(job, LLAMA8, gpu, 1)
    assert layout.placement is not None and layout.speed is not None
    # fp8 KV makes it fit; with serving's error band the plan may also raise vLLM's memory share
    changes = [s.spec_change for s in layout.placement.plan]
    assert {"kv_cache_dtype": "fp8"} in changes
    assert all(set(c) <= {"kv_cache_dtype", "gpu_memory_utilization"} for c in changes)
    as_written = estimate_speed(job, LLAMA8, gpu).metrics["tpot_s"]
    assert layout.speed.metrics["tpot_s"] == pytest.approx(as_written)
    # The simulated row times steps at the original KV width too (the plan's fp8 cache only holds more)
    assert layout.sim is not None
    original = job.model_copy(update={"tensor_parallel": 1})
    assert layout.sim.costs_source == step_costs(original, LLAMA8, gpu).source
    runs = simulate(SimConfig(costs=step_costs(original, LLAMA8, gpu),
                              limits=engine_limits(layout.placement.job, LLAMA8, gpu)),  # type: ignore[arg-type]
                    Arrivals(kind="concurrency", concurrency=32, requests=sim_requests(32), prompt_tokens=6000,
                             output_tokens=2000))
    assert layout.metrics["tpot_s"] == pytest.approx(runs.tpot_s.mean)
    assert layout.runtime_high_s > layout.runtime_s


def test_offers_sharing_a_shape_are_laid_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscout.cost import pick as module

    calls: list[tuple[str, int]] = []
    real = module.lay_out

    def counting(job: Any, model: Any, gpu: Any, count: int, **kw: Any) -> Any:
        calls.append((gpu.sku, count))
        return real(job, model, gpu, count, **kw)

    monkeypatch.setattr(module, "lay_out", counting)
    offers = [offer(id=f"o{i}", price=1.0 + i) for i in range(20)] + [offer(id="eight", gpu_count=8)]
    result = pick(PLAIN_LORA, LLAMA8, offers, today=TODAY)
    assert len(result.rows) == 21 and sorted(calls) == [("h100-sxm5-80gb", 1), ("h100-sxm5-80gb", 8)]
