"""Several models served on one GPU: memory adds up per model, the KV budget is shared, the fit and
each model's largest concurrency follow, the split of gpu_memory_utilization, speed, pick, and
clear errors for specs that cannot be co-served."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

import gpuscout
from gpuscout.cost.pick import pick
from gpuscout.cost.pick_row import unit_costs
from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.colocate import colocation
from gpuscout.estimator.fit import largest_fitting
from gpuscout.estimator.memory import estimate_memory
from gpuscout.estimator.overhead import VLLM_PROFILE_FLOOR_BYTES
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.hardware.catalog import find_gpu, usable_memory_bytes
from gpuscout.hardware.offers import Offer
from gpuscout.units import GIB, MIB
from gpuscout.workload.colocated import ColocatedShape, served_jobs
from gpuscout.workload.job import InferenceJob, parse_job
from gpuscout.workload.jobs import resolve_job_model
from gpuscout.workload.presets import load_llm_preset

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "two-models-one-gpu.toml"
H100 = find_gpu("h100")
LLAMA_PARAMS = 8_030_261_248  # Llama 3.1 8B, published parameter count
QWEN_PARAMS = 7_615_616_512  # Qwen2.5 7B


def spec(main: dict[str, Any] | None = None, *others: dict[str, Any]) -> dict[str, Any]:
    """Llama 3.1 8B at concurrency 8 beside Qwen2.5 7B at 16, both at 1,024 + 1,024 tokens."""
    base = {"kind": "inference", "model": "llama-3.1-8b", "prompt_tokens": 1024, "output_tokens": 1024,
            "concurrency": 8}
    qwen = {"model": "qwen2.5-7b", "prompt_tokens": 1024, "output_tokens": 1024, "concurrency": 16}
    return base | (main or {}) | {"co_served": [qwen | o for o in others] if others else [qwen]}


def load(data: dict[str, Any]) -> tuple[InferenceJob, ColocatedShape]:
    job = parse_job(data)
    assert isinstance(job, InferenceJob)
    model = resolve_job_model(job, None)
    assert isinstance(model, ColocatedShape)
    return job, model


def test_two_models_on_an_h100_add_up_term_by_term() -> None:
    """Hand-computed from the two configs: weights + 2 CUDA contexts + 2 graph pools + each KV cache
    at its concurrency + each prefill working set and sampler + one reserve."""
    job, model = load(spec())
    assert (model.params_total, model.co_served[0].params_total) == (LLAMA_PARAMS, QWEN_PARAMS)
    weights = 2 * LLAMA_PARAMS + 2 * QWEN_PARAMS  # bf16
    # K and V × layers × KV heads × head size × 2 B: Llama 32 × 8 × 128, Qwen 28 × 4 × 128.
    kv = 8 * 2048 * (2 * 32 * 8 * 128 * 2) + 16 * 2048 * (2 * 28 * 4 * 128 * 2)
    # vLLM's profiled peak per engine: the larger of the forward pass (8,192 batched tokens ×
    # (residual 2+2 B; vLLM's fused RMSNorm makes no fp32 copy) · h + the larger transient: Llama
    # MLP 2 · 3 · 14,336, Qwen MLP 2 · 3 · 18,944) and the sampler (1,024 seqs on an H100 × V ×
    # 36 B), plus the floor.
    activations = (max(8192 * (4 * 4096 + 6 * 14336), 1024 * 128_256 * 36) + VLLM_PROFILE_FLOOR_BYTES
                   + max(8192 * (4 * 3584 + 6 * 18944), 1024 * 152_064 * 36) + VLLM_PROFILE_FLOOR_BYTES)
    overhead = 2 * 768 * MIB + 2 * 1 * GIB + math.ceil(usable_memory_bytes(H100) * (1 - 0.9))
    b = estimate_memory(job, model, H100)
    assert bytes_by_category(b) == {"weights": weights, "kv_cache": kv, "activations": activations,
                                    "overhead": overhead}
    assert b.peak_bytes == weights + kv + activations + overhead
    assert [t.name for t in b.terms if t.category == "kv_cache"] == ["llama-3.1-8b: KV cache",
                                                                     "qwen2.5-7b: KV cache"]
    assert sum(t.name == "engine reserve" for t in b.terms) == 1  # one margin for all engines


def test_each_models_terms_are_its_single_model_estimate() -> None:
    job, model = load(spec())
    together = estimate_memory(job, model, H100)
    alone = [estimate_memory(j, s, H100) for j, s in zip(served_jobs(job), (model, *model.co_served), strict=True)]
    reserve = next(t.bytes for t in together.terms if t.name == "engine reserve")
    assert together.peak_bytes == sum(a.peak_bytes for a in alone) - reserve  # each alone carries a reserve


@pytest.mark.parametrize("which", [0, 1])
def test_fit_flips_past_the_largest_concurrency_of_each_model(which: int) -> None:
    job, model = load(spec())
    largest = colocation(job, model, H100).models[which].largest_concurrency
    assert largest > 16

    def fits(concurrency: int) -> bool:
        data = spec({"concurrency": concurrency}) if which == 0 else spec({}, {"concurrency": concurrency})
        return estimate_memory(*load(data), H100).fits

    assert fits(largest) and not fits(largest + 1)


def test_the_main_models_largest_concurrency_agrees_with_the_inverse_query() -> None:
    job, model = load(spec())
    plan = colocation(job, model, H100)
    assert largest_fitting(job, model, H100, "concurrency", 1 << 20) == plan.models[0].largest_concurrency


def test_the_kv_budget_is_shared() -> None:
    """Eight more Llama sequences cost Qwen their KV bytes, in Qwen sequences."""
    small, big = (colocation(*load(spec({"concurrency": c})), H100).models for c in (8, 16))
    llama_seq, qwen_seq = small[0].kv_bytes_per_sequence, small[1].kv_bytes_per_sequence
    assert (llama_seq, qwen_seq) == (2048 * 131_072, 2048 * 57_344)
    assert small[1].largest_concurrency - big[1].largest_concurrency in (
        8 * llama_seq // qwen_seq, 8 * llama_seq // qwen_seq + 1)


def test_the_split_covers_each_model_and_stays_within_the_budget() -> None:
    job, model = load(spec())
    usable = usable_memory_bytes(H100)
    plan = colocation(job, model, H100)
    assert plan.fits and plan.spare_bytes > 0
    for m in plan.models:
        assert m.gpu_memory_utilization * usable >= m.inside_bytes  # its share holds what it needs
    held = sum(m.gpu_memory_utilization * usable + m.outside_bytes for m in plan.models)
    assert held <= 0.9 * usable + 1  # shares + what each process adds beside them ≤ the budget
    assert held >= 0.9 * usable - 3 * usable / 1000  # the spare is handed out (rounding to 0.001 aside)


def test_a_job_that_does_not_fit_says_so_and_shows_the_shares_needed() -> None:
    job, model = load(spec({"concurrency": 200}, {"concurrency": 200}))
    plan = colocation(job, model, H100)
    b = estimate_memory(job, model, H100)
    assert not plan.fits and not b.fits and plan.spare_bytes == b.usable_bytes - b.peak_bytes
    assert sum(m.gpu_memory_utilization for m in plan.models) > 0.9
    assert b.notes[0].startswith("does not fit")


def test_a_single_model_spec_is_unchanged() -> None:
    data = spec()
    del data["co_served"]
    job = parse_job(data)
    assert isinstance(job, InferenceJob) and job.co_served == ()
    assert type(resolve_job_model(job, None)) is not ColocatedShape


def test_the_example_through_the_api() -> None:
    report = gpuscout.estimate(EXAMPLE, gpus=["h100"])
    v = report.screening.verdicts[0]
    assert v.fits and v.colocation is not None and v.speed is not None
    assert [m.label for m in v.colocation.models] == ["llama-3.1-8b", "qwen2.5-7b tasks"]
    assert all(m.largest_concurrency >= m.concurrency for m in v.colocation.models)
    assert v.limits.values["concurrency"] == v.colocation.models[0].largest_concurrency
    assert "largest concurrency, each with the others at theirs" in v.breakdown.notes[1]


def test_the_example_through_estimate_json() -> None:
    out = subprocess.run([sys.executable, "-m", "gpuscout", "estimate", str(EXAMPLE), "--gpu", "h100", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)["screening"]["verdicts"][0]
    models = verdict["colocation"]["models"]
    assert [m["model"] for m in models] == ["llama-3.1-8b", "qwen2.5-7b"]
    assert all(isinstance(m["largest_concurrency"], int) and 0 < m["gpu_memory_utilization"] < 0.9 for m in models)
    names = [t["name"] for t in verdict["breakdown"]["terms"]]
    assert "qwen2.5-7b tasks: KV cache" in names and "llama-3.1-8b: CUDA context and libraries" in names


def test_speed_is_time_sliced() -> None:
    job, model = load(spec())
    together = estimate_speed(job, model, H100)
    alone = [estimate_speed(j, s, H100) for j, s in zip(served_jobs(job), (model, *model.co_served), strict=True)]
    assert together.job_s == pytest.approx(sum(a.job_s for a in alone))
    assert together.job_high_s == pytest.approx(sum(a.job_high_s for a in alone) * 1.1)
    assert together.metrics["tpot_s"] == pytest.approx(alone[0].metrics["tpot_s"] + alone[1].metrics["decode_step_s"])
    assert together.units["requests"] == job.requests + job.co_served[0].requests
    assert together.efficiency.band_high == pytest.approx(together.job_high_s / together.job_s)


def test_pick_ranks_a_co_served_job_and_costs_every_models_requests() -> None:
    job, model = load(spec())
    offer = Offer.model_validate({"id": "o", "provider": "p", "gpu": "h100", "gpu_count": 2, "price": 2.0,
                                  "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 30),
                                  "source": "test"})
    row = pick(job, model, [offer], today=date(2026, 11, 30)).rows[0]
    assert row.excluded is None and row.total_usd is not None and row.gpus_needed == 1
    assert row.unit_costs_usd["usd_per_request"] == pytest.approx(row.total_usd / (1000 + 1000))
    assert unit_costs(job, 10.0)["usd_per_1m_output_tokens"] == pytest.approx(10.0 / (2 * 1000 * 1024) * 1e6)


@pytest.mark.parametrize(("main", "other", "words"), [
    ({"tensor_parallel": 2}, {"tensor_parallel": 1}, ["co_served[0]", "tensor_parallel = 1, the job 2", "same GPUs"]),
    ({}, {"engine": "hf"}, ["co_served[0]", "engine"]),
    ({"engine": "hf"}, {}, ["co_served needs engine", "vllm"]),
    ({}, {"concurrency": 0}, ["co_served.0.concurrency"]),
    ({}, {"modle": "x"}, ["unknown field 'modle' in [[co_served]]: did you mean 'model'?"]),
])
def test_bad_co_served_specs_name_the_problem(main: dict[str, Any], other: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_job(spec(main, other))
    assert all(w in str(err.value) for w in words) and "To fix" in str(err.value)


def test_an_unknown_co_served_model_gets_did_you_mean() -> None:
    job = parse_job(spec({}, {"model": "qwen2.5-7bb"}))
    with pytest.raises(UnknownNameError) as err:
        resolve_job_model(job, None)
    assert "co_served[0]" in err.value.what and "qwen2.5-7b" in err.value.fix


def test_a_co_served_model_whose_heads_do_not_split_is_refused() -> None:
    job = parse_job(spec({"tensor_parallel": 8}))  # Llama's 32 heads split over 8, Qwen's 28 do not
    with pytest.raises(SpecError) as err:
        resolve_job_model(job, None)
    assert err.value.what.startswith("co_served[0]: tensor_parallel = 8")


def test_a_bare_main_shape_is_a_clear_error() -> None:
    job, _ = load(spec())
    with pytest.raises(SpecError, match=r"only Llama 3\.1 8B's shape"):
        estimate_memory(job, load_llm_preset("llama-3.1-8b"), H100)


def test_bench_refuses_a_co_served_spec_before_any_work() -> None:
    with pytest.raises(SpecError, match="serves 2 models; bench runs one"):
        gpuscout.bench(EXAMPLE)

