"""Fit verdicts, suggestions and inverse queries: each checked by re-running the estimator."""

from __future__ import annotations

import pytest

from gpuscout.estimator.fit import (
    candidates,
    combined_plan,
    largest_fitting,
    limits,
    plan_keeping_task,
    planned_job,
    suggest_changes,
)
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.screen import screen
from gpuscout.hardware.catalog import find_gpu, load_catalog
from gpuscout.report.estimate_detail import limits_text
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob
from gpuscout.workload.presets import load_llm_preset

LLAMA = load_llm_preset("llama-3-8b")
RTX4090 = find_gpu("rtx-4090")

TOO_BIG = FinetuneJob(kind="finetune", model="llama-3-8b", method="qlora", micro_batch=4, seq_len=4096,
                      grad_accum=4, gradient_checkpointing=False)


def test_suggestions_each_save_memory_and_are_ordered_cheapest_first() -> None:
    base = estimate_memory(TOO_BIG, LLAMA, RTX4090)
    assert not base.fits
    suggestions = suggest_changes(TOO_BIG, LLAMA, RTX4090)
    assert suggestions[0].change.startswith("micro_batch 4 → 1")
    for s in suggestions:
        assert s.peak_bytes == base.peak_bytes - s.saves_bytes
    names = [s.change for s in suggestions]
    assert names.index("gradient checkpointing") < names.index("offload optimizer states to CPU")


def test_combined_plan_ends_in_a_fit() -> None:
    plan = combined_plan(TOO_BIG, LLAMA, RTX4090)
    assert plan and plan[-1].fits and not any(s.fits for s in plan[:-1])


def test_more_gpus_is_offered_when_nothing_else_fits() -> None:
    seventy = load_llm_preset("llama-3.1-70b")
    full = FinetuneJob(kind="finetune", model="llama-3.1-70b", method="full", seq_len=2048,
                       gradient_checkpointing=True)
    offers = [s for s in suggest_changes(full, seventy, find_gpu("h100")) if "gpus" in s.spec_change]
    assert offers and offers[0].fits and offers[0].spec_change["sharding"] == "zero3"


@pytest.mark.parametrize("field", ["micro_batch", "seq_len"])
def test_largest_fitting_is_the_edge(field: str) -> None:
    job = TOO_BIG.model_copy(update={"gradient_checkpointing": True, "micro_batch": 1})
    n = largest_fitting(job, LLAMA, RTX4090, field, 1 << 16)
    assert 0 < n < 1 << 16
    assert estimate_memory(job.model_copy(update={field: n}), LLAMA, RTX4090).fits
    assert not estimate_memory(job.model_copy(update={field: n + 1}), LLAMA, RTX4090).fits


def test_limits_cover_every_kind() -> None:
    h100 = find_gpu("h100")
    serve = InferenceJob(kind="inference", model="llama-3-8b", prompt_tokens=2000, output_tokens=500)
    assert set(limits(serve, LLAMA, h100).values) == {"concurrency", "context_tokens"}
    assert limits(serve, LLAMA, h100).values["context_tokens"] == LLAMA.max_position_embeddings
    image = ImageJob(kind="image", model="sdxl")
    lim = limits(image, load_image_preset("sdxl"), h100).values
    assert lim["batch"] >= 1 and lim["side_px"] % 8 == 0


def test_a_model_that_never_fits_reports_zero() -> None:
    job = FinetuneJob(kind="finetune", model="llama-3.1-70b", method="full", seq_len=2048)
    assert limits(job, load_llm_preset("llama-3.1-70b"), find_gpu("l4")).values["micro_batch"] == 0


def test_screening_covers_the_whole_catalog() -> None:
    result = screen(TOO_BIG, LLAMA, load_catalog())
    assert len(result.verdicts) == len(load_catalog())
    assert any(v.fits for v in result.verdicts) and any(not v.fits for v in result.verdicts)
    assert all(v.plan or v.fits or v.suggestions for v in result.verdicts)


def test_every_candidate_says_whether_it_keeps_the_task() -> None:
    """The changes that alter what the job computes are exactly the ones classed as such."""
    seventy = load_llm_preset("llama-3.1-70b")
    jobs = [
        (FinetuneJob(kind="finetune", model="llama-3-8b", method="full", micro_batch=4, seq_len=4096,
                     attention="eager"), LLAMA),
        (InferenceJob(kind="inference", model="llama-3.1-70b", prompt_tokens=8000, concurrency=16), seventy),
        (ImageJob(kind="image", model="sdxl", batch=4, dtype="fp32", attention="eager"), load_image_preset("sdxl")),
    ]
    changing = {"LoRA instead of full fine-tuning", "QLoRA (4-bit NF4 base weights)", "seq_len 4096 → 2048",
                "concurrency 16 → 8", "fp8 weights", "int4 weights", "prompt_tokens 8000 → 4000",
                "1024×1024 → 512×512"}
    seen = set()
    for job, model in jobs:
        for c in candidates(job, model, find_gpu("rtx-4090")):
            assert c.keeps_task == (c.change not in changing), c.change
            assert c.slowdown[0] >= 1.0 and c.slowdown[1] >= c.slowdown[0]
            seen.add(c.change)
    assert changing <= seen


def test_a_plan_keeps_the_task_when_it_can_and_needs_every_step() -> None:
    plain_lora = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", micro_batch=4, seq_len=2048,
                             grad_accum=4)
    plan = combined_plan(plain_lora, LLAMA, RTX4090)
    assert plan and all(s.keeps_task for s in plan) and plan[-1].fits
    assert estimate_memory(planned_job(plain_lora, plan), LLAMA, RTX4090).fits
    for i in range(len(plan)):  # pruned: leaving any step out no longer fits
        assert not estimate_memory(planned_job(plain_lora, plan[:i] + plan[i + 1:]), LLAMA, RTX4090).fits


def test_same_gpus_plans_leave_the_gpu_count_alone() -> None:
    seventy, h100 = load_llm_preset("llama-3.1-70b"), find_gpu("h100")
    full = FinetuneJob(kind="finetune", model="llama-3.1-70b", method="full", seq_len=2048,
                       gradient_checkpointing=True)
    spread = plan_keeping_task(full, seventy, h100)
    assert spread and "gpus" in spread[-1].spec_change and all(s.keeps_task for s in spread)
    assert plan_keeping_task(full, seventy, h100, same_gpus=True) == ()  # one H100 cannot hold it, whatever


def test_nothing_fits_is_said_in_words() -> None:
    assert limits_text({"micro_batch": 0, "seq_len": 9216}) == "micro_batch: nothing fits, even at 1; seq_len = 9,216"


def test_a_gpu_the_job_does_not_fit_shows_no_job_time() -> None:
    """As written the job does not run there, so a time would mislead; the fix column says what would."""
    from gpuscout.report.estimate import screening_table
    from gpuscout.report.footnotes import Footnotes
    from report.screens import render, rows_by_header

    plain_lora = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", micro_batch=4, seq_len=2048,
                             grad_accum=4)  # 91.6 GiB: an H200 holds it, an RTX 4090 does not
    gpus = [RTX4090, find_gpu("h200")]
    rows = rows_by_header(render(screening_table(screen(plain_lora, LLAMA, gpus), Footnotes()), 120), "GPU")
    by_fit = {r["fits"]: r for r in rows if r["fits"] in ("yes", "no")}
    assert by_fit["no"]["job time"] == "-" and by_fit["no"]["cheapest fix"]
    assert by_fit["yes"]["job time"] not in ("", "-")
