"""The compatibility rules (hardware/compat.toml) judged on known cases, each at its boundary.

FlashAttention 2 and bf16 need sm80 (A100 passes at exactly 8.0, a T4 at 7.5 does not), fp8 matmuls
sm89 (an A100 falls back to weight-only, an L40S at exactly 8.9 does not), bitsandbytes on ROCm is a
caveat, and a GPU whose driver refuses peer-to-peer is priced with collectives staged through host
memory. The loader is checked on planted documents too, so a broken checker cannot pass silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscout.estimator.compat import check, excluded, job_features, no_time_note
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.estimator.speed.roofline import link_bytes_per_s
from gpuscout.hardware.catalog import Gpu, find_gpu, load_catalog
from gpuscout.hardware.compat import load_rules, parse_rules
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, load_job
from gpuscout.workload.jobs import resolve_job_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> tuple[Any, Any]:
    job = load_job(EXAMPLES / name)
    return job, resolve_job_model(job, EXAMPLES)


def _rules(findings: tuple[Any, ...]) -> dict[str, str]:
    return {f.rule: f.outcome for f in findings}


# --- the data ------------------------------------------------------------------------------------

def test_every_nvidia_gpu_has_a_compute_capability_and_no_amd_gpu_has_one() -> None:
    for gpu in load_catalog():
        assert (gpu.compute_capability is not None) == (gpu.vendor == "nvidia"), gpu.sku
    assert find_gpu("t4").sm == 75 and find_gpu("a100").sm == 80 and find_gpu("rtx-5090").sm == 120


def test_geforce_40_and_50_cards_have_no_peer_to_peer_and_datacenter_cards_do() -> None:
    refused = {g.sku for g in load_catalog() if not g.peer_to_peer}
    assert {"rtx-4090", "rtx-4090d", "rtx-5090"} <= refused
    assert not refused & {"a100-sxm4-80gb", "h100-sxm5-80gb", "l40s", "mi300x"}


def test_every_rule_cites_a_source_that_exists() -> None:
    rules = load_rules()
    for rule in rules.rules:
        assert rule.sources and all(s in rules.sources for s in rule.sources), rule.id
    assert 0 < rules.host_staged_link_fraction < 1
    assert rules.host_staged_link_fraction == pytest.approx(25.8 / 41.4, abs=1e-3)  # the measured pair it cites


@pytest.mark.parametrize(("change", "message"), [
    ({"nvidia_below_sm": None}, "fires on no GPU"),
    ({"fix": {}}, "needs a fix"),
    ({"sources": ["NOPE"]}, "missing from [sources]"),
])
def test_a_broken_rules_document_is_refused(change: dict[str, Any], message: str) -> None:
    rule = {"id": "x", "feature": "bf16", "nvidia_below_sm": 80, "outcome": "excluded", "reason": "r",
            "fix_text": "f", "fix": {"finetune": {"precision": "fp16_mixed"}}, "sources": ["S"]}
    document = {"host_staged": {"link_fraction": 0.5}, "rule": [rule | change], "sources": {"S": "a source"}}
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_rules(document)


def test_duplicate_rule_ids_are_refused() -> None:
    rule = {"id": "x", "feature": "collectives", "no_peer_to_peer": True, "outcome": "fallback", "reason": "r",
            "fallback": "f", "sources": ["S"]}
    with pytest.raises(ValueError, match="duplicate rule ids"):
        parse_rules({"host_staged": {"link_fraction": 0.5}, "rule": [rule, rule], "sources": {"S": "s"}})


# --- FlashAttention 2 and bf16: sm80 ----------------------------------------------------------------

def test_flash_attention_2_and_bf16_exclude_a_t4_and_a_v100_with_their_fixes() -> None:
    job, model = _example("llama3-8b-qlora.toml")
    assert job.attention == "flash" and job.precision == "bf16_mixed"
    for sku in ("t4", "v100"):
        findings = check(job, model, find_gpu(sku))
        assert _rules(findings) == {"flash-attention-2": "excluded", "bf16": "excluded"}, sku
        by_rule = {f.rule: f for f in findings}
        assert by_rule["flash-attention-2"].fix_change == {"attention": "sdpa"}
        assert by_rule["bf16"].fix_change == {"precision": "fp16_mixed"}
        # The fixes together make a job the speed model times; the SDPA fix alone costs nothing there
        # (the speed model times fused attention alike), and bf16 as written has no time to compare with.
        assert by_rule["flash-attention-2"].fix_job_s is not None and by_rule["flash-attention-2"].fix_job_s > 0
        assert by_rule["flash-attention-2"].slowdown == pytest.approx(1.0)
        assert by_rule["bf16"].slowdown is None
        fixed = job.model_copy(update={"attention": "sdpa", "precision": "fp16_mixed"})
        assert check(fixed, model, find_gpu(sku)) == ()
        assert estimate_speed(fixed, model, find_gpu(sku)).job_s == pytest.approx(by_rule["bf16"].fix_job_s)


def test_flash_attention_2_runs_at_exactly_sm80_and_on_an_mi300x() -> None:
    job, model = _example("llama3-8b-qlora.toml")
    assert "flash-attention-2" not in _rules(check(job, model, find_gpu("a100")))  # 8.0: the boundary
    assert "flash-attention-2" not in _rules(check(job, model, find_gpu("mi300x")))  # ROCm build: MI300


def test_an_image_job_in_bf16_on_a_t4_is_told_to_use_fp16() -> None:
    job, model = _example("sdxl-1024.toml")
    assert isinstance(job, ImageJob)
    bf16 = job.model_copy(update={"dtype": "bf16"})
    (finding,) = check(bf16, model, find_gpu("t4"))
    assert finding.rule == "bf16" and finding.fix_change == {"dtype": "fp16"}
    assert check(job, model, find_gpu("t4")) == ()  # the example is fp16 already


def test_no_time_note_names_each_reason_and_fix_but_no_gpu() -> None:
    job, model = _example("llama3-8b-qlora.toml")
    note = no_time_note(check(job, model, find_gpu("v100-sxm2-32gb")))
    assert note is not None and note.startswith("No job time: FlashAttention 2 needs sm80+")
    assert 'attention = "sdpa"' in note and 'precision = "fp16_mixed"' in note and "+0% time" in note
    assert "V100" not in note  # one footnote serves every V100 variant
    assert no_time_note(check(job, model, find_gpu("a100"))) is None


# --- fp8: sm89 for W8A8, sm75 for weight-only ---------------------------------------------------------

def test_fp8_weights_on_an_a100_run_weight_only_and_keep_a_time() -> None:
    job, model = _example("qwen3-30b-a3b-fp8.toml")
    assert isinstance(job, InferenceJob) and job.weights == "fp8"
    (finding,) = check(job, model, find_gpu("a100"))
    assert finding.rule == "fp8-weight-only" and finding.outcome == "fallback"
    assert "W8A16" in (finding.fallback or "")
    speed = estimate_speed(job, model, find_gpu("a100"))  # priced: 16-bit math on the fp8 weights
    assert speed.job_s > 0 and "compute dtype bf16" in " ".join(speed.notes)


def test_fp8_needs_nothing_more_at_exactly_sm89_and_on_an_mi300x() -> None:
    job, model = _example("qwen3-30b-a3b-fp8.toml")
    for sku in ("l40s", "h100", "mi300x"):
        assert check(job, model, find_gpu(sku)) == (), sku


def test_fp8_weights_on_a_v100_are_excluded_and_the_16_bit_fix_is_priced() -> None:
    job, model = _example("qwen3-30b-a3b-fp8.toml")
    (finding,) = check(job, model, find_gpu("v100"))
    assert finding.rule == "fp8-volta" and finding.outcome == "excluded"
    assert finding.fix_change == {"weights": "fp16"}
    # Twice the weight bytes read per decoded token: the fix is slower than the fp8 time would be.
    assert finding.slowdown is not None and finding.slowdown > 1.2


# --- bitsandbytes, vLLM -----------------------------------------------------------------------------

def test_qlora_on_an_mi300x_runs_with_the_dated_bitsandbytes_caveat() -> None:
    job, model = _example("llama3-8b-qlora.toml")
    (finding,) = check(job, model, find_gpu("mi300x"))
    assert finding.rule == "bitsandbytes-rocm" and finding.outcome == "caveat"
    assert "0.50" in finding.reason and "2026-12-03" in finding.reason
    assert "bitsandbytes" not in _rules(check(job, model, find_gpu("a100")))
    lora = job.model_copy(update={"method": "lora", "optimizer": "adamw"})
    assert "bitsandbytes" not in job_features(lora, 1)


def _old_gpu(sm: str) -> Gpu:
    """A GPU below every catalogued one (a Pascal P100 is sm60): the rules' low boundaries."""
    return find_gpu("v100").model_copy(update={"sku": "old", "compute_capability": sm})


def test_vllm_and_bitsandbytes_refuse_gpus_below_their_minimum() -> None:
    serving, smodel = _example("qwen3-30b-a3b-fp8.toml")
    served = serving.model_copy(update={"weights": "fp16"})
    assert "vllm-min-sm" in _rules(check(served, smodel, _old_gpu("6.0")))
    assert "vllm-min-sm" not in _rules(check(served, smodel, _old_gpu("7.0")))  # the boundary
    tune, tmodel = _example("llama3-8b-qlora.toml")
    assert _rules(check(tune, tmodel, _old_gpu("5.2")))["bitsandbytes-cuda"] == "excluded"
    assert "bitsandbytes-cuda" not in _rules(check(tune, tmodel, _old_gpu("6.0")))


# --- peer-to-peer: collectives through host memory ----------------------------------------------------

def test_a_gpu_without_p2p_times_collectives_at_the_host_staged_rate() -> None:
    gpu = find_gpu("rtx-4090")
    assert gpu.pcie_bytes_per_s is not None
    assert link_bytes_per_s(gpu, 2) == pytest.approx(gpu.pcie_bytes_per_s * load_rules().host_staged_link_fraction)
    assert link_bytes_per_s(gpu.model_copy(update={"peer_to_peer": True}), 2) == gpu.pcie_bytes_per_s
    assert link_bytes_per_s(gpu, 1) == link_bytes_per_s(gpu.model_copy(update={"peer_to_peer": True}), 1)


def test_tensor_parallel_over_eight_4090s_is_priced_with_the_host_staged_slowdown() -> None:
    job, model = _example("llama3-70b-serving-8k.toml")
    gpu = find_gpu("rtx-4090")
    (finding,) = check(job, model, gpu, gpus=8)
    assert finding.rule == "no-peer-to-peer" and finding.outcome == "fallback"
    staged = estimate_speed(job, model, gpu, gpus=8).job_s
    direct = estimate_speed(job, model, gpu.model_copy(update={"peer_to_peer": True}), gpus=8).job_s
    assert staged > direct and finding.slowdown == pytest.approx(staged / direct)
    assert check(job, model, find_gpu("a100"), gpus=8) == ()  # NVLink: nothing to say
    assert check(job, model, gpu, gpus=1) == ()  # one GPU exchanges nothing


def test_data_parallel_training_over_4090s_is_slowed_too() -> None:
    job, model = _example("llama3-8b-full-zero3.toml")
    assert isinstance(job, FinetuneJob) and job.gpus > 1
    lora = job.model_copy(update={"attention": "sdpa"})
    (finding,) = check(lora, model, find_gpu("rtx-4090"))
    assert finding.rule == "no-peer-to-peer" and finding.slowdown is not None and finding.slowdown > 1
    assert excluded((finding,)) == ()
