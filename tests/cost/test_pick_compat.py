"""`pick` and the compatibility rules: a setup that cannot run is excluded with the reason and the fix;
one that runs on a slower path is ranked at the slower runtime and carries the finding."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.cost.pick import lay_out, pick
from gpuscout.cost.pick_row import PickRow
from gpuscout.hardware.catalog import find_gpu
from gpuscout.hardware.offers import Offer
from gpuscout.report.pick import pick_screen
from gpuscout.workload.job import InferenceJob, Slo, load_job
from gpuscout.workload.jobs import resolve_job_model
from gpuscout.workload.presets import load_llm_preset
from report.screens import render

TODAY = date(2026, 11, 30)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA70 = load_llm_preset("llama-3.1-70b")


def offer(oid: str, gpu: str, count: int, price: float) -> Offer:
    base: dict[str, Any] = {"id": oid, "provider": "p", "gpu": gpu, "gpu_count": count, "price": price,
                            "price_basis": "gpu", "currency": "USD", "observed_at": TODAY, "source": "test"}
    return Offer.model_validate(base)


def serving_70b() -> InferenceJob:
    job = load_job(EXAMPLES / "llama3-70b-serving-8k.toml")
    assert isinstance(job, InferenceJob)
    return job.model_copy(update={"slo": Slo()})


def test_eight_4090s_without_p2p_are_ranked_at_the_host_staged_runtime_with_the_finding() -> None:
    job = serving_70b()
    result = pick(job, LLAMA70, [offer("g", "rtx-4090", 8, 0.34), offer("a", "a100", 8, 1.29)], today=TODAY)
    rows = {r.offer_id: r for r in result.rows}
    geforce = rows["g"]
    assert geforce.excluded is None and [f.rule for f in geforce.compat] == ["no-peer-to-peer"]
    assert rows["a"].compat == ()
    # The ranked runtime is the staged one: the same layout with peer-to-peer would be faster by the
    # finding's slowdown.
    gpu = find_gpu("rtx-4090")
    staged = lay_out(job, LLAMA70, gpu, 8)
    direct = lay_out(job, LLAMA70, gpu.model_copy(update={"peer_to_peer": True}), 8)
    assert geforce.runtime_s == pytest.approx(staged.runtime_s)
    slowdown = geforce.compat[0].slowdown
    assert slowdown is not None and slowdown > 1
    # The finding's slowdown is the speed model's; the simulated runtime mixes prefill and decode steps
    # whose all-reduce shares differ a little from its two phases': equal within 0.1%.
    assert staged.runtime_s / direct.runtime_s == pytest.approx(slowdown, rel=1e-3)


def test_the_ranked_4090_row_says_so_on_the_screen() -> None:
    job = serving_70b()
    result = pick(job, LLAMA70, [offer("g", "rtx-4090", 8, 0.34), offer("a", "a100", 8, 1.29)], today=TODAY)
    assert result.rows[0].offer_id == "g"  # cheapest even when slowed: it must not rank first unmarked
    text = render(pick_screen(result), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "! no P2P +" in text
    assert "Runs slower: this GPU's driver refuses GPU-to-GPU (P2P) copies" in " ".join(text.split())


def test_a_t4_offer_for_a_flash_attention_job_is_excluded_with_the_fix() -> None:
    job = load_job(EXAMPLES / "llama3-8b-qlora.toml")
    model = resolve_job_model(job, EXAMPLES)
    result = pick(job, model, [offer("t4", "t4", 1, 0.35), offer("a", "a100", 1, 1.29)], today=TODAY)
    rows = {r.offer_id: r for r in result.rows}
    t4 = rows["t4"]
    assert t4.excluded is not None and t4.excluded.startswith("cannot run: FlashAttention 2 needs sm80+")
    assert 'attention = "sdpa"' in t4.excluded and 'precision = "fp16_mixed"' in t4.excluded
    assert t4.runtime_s is None and t4.total_usd is None  # no job time for a setup that cannot run
    assert {f.rule for f in t4.compat} == {"flash-attention-2", "bf16"}
    assert rows["a"].excluded is None and rows["a"].compat == ()


def test_fp8_serving_on_an_a100_is_ranked_with_the_weight_only_finding() -> None:
    job = load_job(EXAMPLES / "qwen3-30b-a3b-fp8.toml")
    model = resolve_job_model(job, EXAMPLES)
    result = pick(job, model, [offer("a", "a100", 1, 1.29), offer("h", "h100", 1, 2.0)], today=TODAY)
    rows = {r.offer_id: r for r in result.rows}
    assert rows["a"].excluded is None and [f.rule for f in rows["a"].compat] == ["fp8-weight-only"]
    assert rows["h"].compat == ()


def test_a_row_with_findings_survives_json() -> None:
    job = serving_70b()
    (row,) = pick(job, LLAMA70, [offer("g", "rtx-4090", 8, 0.34)], today=TODAY).rows
    again = PickRow.model_validate(row.model_dump(mode="json"))
    assert again.compat == row.compat and again.compat
