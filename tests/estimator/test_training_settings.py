"""Training settings people use (docs/estimator.md §2.14): each parses, errors clearly when it cannot
apply, and moves the memory, speed and host-RAM estimates the way its mechanism says, by the amount
its formula says. The trace checks (tests/trace/test_settings_trace.py) and the real CPU runs
(tests/measure/test_finetune_settings.py) hold the same formulas against real PyTorch code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.fit import suggest_changes
from gpuscout.estimator.host import OFFLOAD_HOST_COPIES, estimate_host
from gpuscout.estimator.inference import estimate_inference_memory
from gpuscout.estimator.params import linear_params, quantized_linear_params, unquantized_linear_params
from gpuscout.estimator.speed.train import COMPILE_COMPUTE_GAIN, estimate_finetune_speed
from gpuscout.estimator.training import (
    NF4_BYTES,
    NF4_CONSTANT_BYTES,
    OFFLOAD_LAYERS_ON_GPU,
    estimate_finetune_memory,
)
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.flops import training_flops
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, InferenceJob, parse_job
from gpuscout.workload.presets import load_llm_preset

LLAMA = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100")
RTX4090 = find_gpu("rtx4090")
TINY: dict[str, Any] = json.loads((Path(__file__).parents[2] / "examples" / "tiny-llama" / "config.json").read_text())


def job(**kw: Any) -> FinetuneJob:
    spec: dict[str, Any] = {"kind": "finetune", "model": "llama-3-8b", "method": "full", "seq_len": 2048}
    parsed = parse_job(spec | kw)
    assert isinstance(parsed, FinetuneJob)
    return parsed


def peak(j: FinetuneJob, gpu: Any = H100) -> int:
    return estimate_finetune_memory(j, LLAMA, gpu).peak_bytes


def named(b: MemoryBreakdown, prefix: str) -> int:
    return sum(t.bytes for t in b.terms if t.name.startswith(prefix))


# --- the spec ----------------------------------------------------------------------------------------


def test_every_setting_parses_and_defaults_keep_the_old_meaning() -> None:
    j = job(compile=True, gradient_checkpointing=True, checkpoint_policy="selective", activation_offload=True,
            optimizer_in_backward=True, optimizer="paged_adamw_8bit", packing=True, sample_tokens=300,
            padding="longest")
    assert j.compile and j.checkpoint_policy == "selective" and j.sample_tokens == 300
    q = job(method="qlora", unquantized_modules=["down_proj"])
    assert q.unquantized_modules == ("down_proj",)
    old = job()
    assert (old.compile, old.checkpoint_policy, old.activation_offload, old.offload_params, old.optimizer_in_backward,
            old.packing, old.sample_tokens, old.unquantized_modules) == (False, "full", False, False, False, False,
                                                                        None, ())


@pytest.mark.parametrize(("fields", "says"), [
    ({"checkpoint_policy": "selective"}, "gradient_checkpointing = true"),
    ({"optimizer_in_backward": True, "grad_accum": 4, "micro_batch": 2}, "raise micro_batch to 8"),
    ({"offload_params": True}, 'sharding = "fsdp"'),
    ({"method": "lora", "unquantized_modules": ["down_proj"]}, 'method = "qlora"'),
    ({"sample_tokens": 4096}, "cannot exceed seq_len"),
])
def test_settings_that_cannot_apply_are_clear_errors(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as err:
        job(**fields)
    assert says in err.value.why


def test_served_skip_modules_need_quantized_weights() -> None:
    with pytest.raises(SpecError, match="unquantized_modules"):
        parse_job({"kind": "inference", "model": "llama-3-8b", "unquantized_modules": ["down_proj"]})


def test_an_unknown_skip_module_is_named_with_the_real_ones() -> None:
    with pytest.raises(SpecError) as err:
        peak(job(method="qlora", precision="bf16_mixed", unquantized_modules=["down_prj"]))
    assert "down_prj" in err.value.what and "down_proj" in err.value.why


# --- memory ------------------------------------------------------------------------------------------


def test_selective_checkpointing_sits_between_none_and_full() -> None:
    none, full = peak(job(method="lora")), peak(job(method="lora", gradient_checkpointing=True))
    selective = peak(job(method="lora", gradient_checkpointing=True, checkpoint_policy="selective"))
    assert full < selective < none


def test_activation_offload_keeps_one_layer_of_activations_on_the_gpu() -> None:
    kept = estimate_finetune_memory(job(method="lora"), LLAMA, H100)
    moved = estimate_finetune_memory(job(method="lora", activation_offload=True), LLAMA, H100)
    per_layer = named(kept, "layer activations") / LLAMA.num_layers
    assert named(moved, "layer activations") == pytest.approx(OFFLOAD_LAYERS_ON_GPU * per_layer)
    assert moved.peak_bytes < kept.peak_bytes


def test_fsdp_parameter_offload_leaves_the_root_unit_and_two_layers() -> None:
    sharded = estimate_finetune_memory(job(sharding="fsdp"), LLAMA, H100)
    offloaded = estimate_finetune_memory(job(sharding="fsdp", offload_params=True), LLAMA, H100)
    cats = bytes_by_category(offloaded)
    assert cats["optimizer_states"] == 0
    layer = linear_params(LLAMA) / LLAMA.num_layers * 2  # 16-bit gathered decoder layer (norms are tiny)
    root = (LLAMA.params_total - linear_params(LLAMA)) * 2
    assert cats["weights"] == pytest.approx(root + 2 * layer, rel=0.01)
    assert offloaded.peak_bytes < sharded.peak_bytes - 100 * 2**30


def test_fsdp_parameter_offload_against_torchtunes_70b_run() -> None:
    """torchtune's Llama 3.1 70B full fine-tune on 8 A100s with fsdp_cpu_offload (README table at commit
    30b8519: 13.9 GiB per GPU; bf16, checkpointing, chunked CE, bs 2, packed 2048). Optimizer offload alone
    left the estimate at 3× the measurement; parameter offload brings it within 10%, above it."""
    shape = load_llm_preset("llama-3.1-70b")
    spec = {"model": "llama-3.1-70b", "precision": "bf16", "micro_batch": 2, "gradient_checkpointing": True,
            "chunked_cross_entropy": True, "gpus": 8, "sharding": "fsdp", "optimizer_offload": True}
    a100 = find_gpu("a100-sxm4-80gb")
    before = estimate_finetune_memory(job(**spec), shape, a100)
    after = estimate_finetune_memory(job(offload_params=True, **spec), shape, a100)
    measured = 13.9 * 2**30
    allocated = after.peak_bytes - bytes_by_category(after)["overhead"]
    assert before.peak_bytes > 3 * measured
    assert measured <= allocated <= 1.10 * measured


def test_optimizer_in_backward_holds_one_gradient() -> None:
    b = estimate_finetune_memory(job(optimizer_in_backward=True), LLAMA, H100)
    assert bytes_by_category(b)["gradients"] == LLAMA.vocab_size * LLAMA.hidden_size * 4  # the fp32 embedding
    # Where the optimizer step is the largest phase (short sequences, checkpointing), the peak falls by
    # the gradients and the foreach temporaries the step no longer needs all at once.
    short = {"seq_len": 256, "gradient_checkpointing": True}
    assert peak(job(optimizer_in_backward=True, **short)) < peak(job(**short)) - 40 * 2**30


def test_paged_states_leave_the_backward_peak_and_count_in_the_step() -> None:
    plain = estimate_finetune_memory(job(optimizer="adamw_8bit", seq_len=8192), LLAMA, H100)
    paged = estimate_finetune_memory(job(optimizer="paged_adamw_8bit", seq_len=8192), LLAMA, H100)
    states = bytes_by_category(plain)["optimizer_states"]
    assert bytes_by_category(paged)["optimizer_states"] == states
    # The loss backward is the largest phase here, so the states drop out of the allocated peak
    # (and out of the 10% allocator reserve on it).
    assert plain.peak_bytes - paged.peak_bytes == pytest.approx(states * 1.1, rel=0.01)


def test_a_loop_holding_the_output_keeps_the_fp32_logits_through_the_loss_backward() -> None:
    """transformers < 4.45 returned fp32 logits in the output; a loop that keeps the output through
    loss.backward() (Answer.AI fsdp_qlora train.py) holds 4 B per logit more than transformers' Trainer."""
    spec = {"method": "lora", "precision": "bf16", "seq_len": 4096, "micro_batch": 2}
    full = estimate_finetune_memory(job(**spec), LLAMA, H100)
    held = estimate_finetune_memory(job(loss="full_output_held", **spec), LLAMA, H100)
    logits = 2 * 4096 * LLAMA.vocab_size
    assert named(held, "logits and loss") - named(full, "logits and loss") == logits * 4
    # The loss backward is the largest phase here: the peak grows by the held logits and their reserve.
    assert held.peak_bytes - full.peak_bytes == pytest.approx(logits * 4 * 1.1, rel=0.01)
    with pytest.raises(SpecError, match="chunked_cross_entropy"):
        job(loss="full_output_held", chunked_cross_entropy=True)


def test_paged_states_with_the_optimizer_in_backward_page_one_tensor_at_a_time() -> None:
    """torchtune's Llama 3.1 8B full fine-tune on one RTX 4090 (README table at commit 30b8519: 18.9 GiB;
    bf16, PagedAdamW8bit, optimizer_in_bwd, checkpointing, chunked CE, bs 2, packed 2048, compile).
    Without the settings the estimate was 3× the measurement; with them it sits within 10% and fits."""
    spec = {"model": "llama-3.1-8b", "precision": "bf16", "micro_batch": 2, "gradient_checkpointing": True,
            "chunked_cross_entropy": True}
    shape = load_llm_preset("llama-3.1-8b")
    before = estimate_finetune_memory(job(optimizer="adamw_8bit", **spec), shape, RTX4090)
    after = estimate_finetune_memory(job(optimizer="paged_adamw_8bit", optimizer_in_backward=True, packing=True,
                                         compile=True, **spec), shape, RTX4090)
    measured = 18.9 * 2**30
    allocated = after.peak_bytes - bytes_by_category(after)["overhead"]
    assert before.peak_bytes > 3 * measured
    assert allocated == pytest.approx(measured, rel=0.10)
    assert after.fits


def test_unquantized_modules_add_their_params_at_fp32_after_peft_upcast() -> None:
    base = job(method="qlora", precision="bf16_mixed")
    skip = job(method="qlora", precision="bf16_mixed", unquantized_modules=["down_proj"])
    kept = unquantized_linear_params(LLAMA, ("down_proj",))
    assert kept == LLAMA.num_layers * LLAMA.hidden_size * LLAMA.intermediate_size
    a, b = (estimate_finetune_memory(j, LLAMA, H100) for j in (base, skip))
    weights = bytes_by_category(b)["weights"] - bytes_by_category(a)["weights"]
    assert weights == pytest.approx(kept * (4 - NF4_BYTES - NF4_CONSTANT_BYTES), rel=1e-6)
    assert named(b, "16-bit copies of the fp32 unquantized") == kept * 2
    no_upcast = [j.model_copy(update={"upcast_unquantized": False}) for j in (base, skip)]
    c, d = (estimate_finetune_memory(j, LLAMA, H100) for j in no_upcast)
    assert bytes_by_category(d)["weights"] - bytes_by_category(c)["weights"] == pytest.approx(
        kept * (2 - NF4_BYTES - NF4_CONSTANT_BYTES), rel=1e-6)


def test_lm_head_in_skip_modules_changes_nothing() -> None:
    assert peak(job(method="qlora", unquantized_modules=["lm_head"])) == peak(job(method="qlora"))


def test_one_layer_path_keeps_one_instance() -> None:
    one = unquantized_linear_params(LLAMA, ("model.layers.0.mlp.down_proj",))
    assert one == LLAMA.hidden_size * LLAMA.intermediate_size


def test_served_int4_skip_modules_keep_them_16_bit() -> None:
    def weights(**kw: Any) -> int:
        j = InferenceJob(kind="inference", model="llama-3-8b", weights="int4", **kw)
        return bytes_by_category(estimate_inference_memory(j, LLAMA, H100))["weights"]

    kept = unquantized_linear_params(LLAMA, ("down_proj",))
    assert weights(unquantized_modules=("down_proj",)) - weights() == pytest.approx(
        kept * (2 - 0.5 - 2.5 / 128), rel=1e-6)


def test_quantized_linears_match_the_real_models_module_names() -> None:
    """The shape-level rule against the real transformers model: the same modules, the same params."""
    torch = pytest.importorskip("torch")
    from gpuscout.torchmodel.llm import build_causal_lm, is_unquantized

    model = build_causal_lm(TINY, attention="sdpa", dtype=torch.bfloat16, device="meta")
    shape = shape_from_hf_config(TINY, name="tiny-llama", source="test")
    for skip in (("down_proj",), ("q_proj", "k_proj"), ("model.layers.1.mlp.up_proj",), ("lm_head",)):
        real = sum(m.weight.numel() for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and name != "lm_head" and is_unquantized(name, skip))
        assert unquantized_linear_params(shape, skip) == real
        assert quantized_linear_params(shape, skip) == linear_params(shape) - real


# --- speed -------------------------------------------------------------------------------------------


def step_s(j: FinetuneJob) -> float:
    return estimate_finetune_speed(j, LLAMA, H100, gpus=None, efficiency=None).metrics["step_s"]


def test_compile_raises_the_compute_rate_by_the_torchtitan_gain() -> None:
    eager = estimate_finetune_speed(job(), LLAMA, H100, gpus=None, efficiency=None)
    compiled = estimate_finetune_speed(job(compile=True), LLAMA, H100, gpus=None, efficiency=None)
    assert compiled.efficiency.compute == pytest.approx(eager.efficiency.compute * COMPILE_COMPUTE_GAIN)
    assert 0.57 < compiled.efficiency.compute < 0.6  # the implied ≈ 0.59 of compiled public runs
    assert compiled.job_s < eager.job_s


def test_selective_checkpointing_recomputes_no_matmul_flops() -> None:
    plain, full = training_flops(job(), LLAMA), training_flops(job(gradient_checkpointing=True), LLAMA)
    selective = training_flops(job(gradient_checkpointing=True, checkpoint_policy="selective"), LLAMA)
    assert selective.total == plain.total < full.total
    assert step_s(job()) <= step_s(job(gradient_checkpointing=True, checkpoint_policy="selective")) \
        < step_s(job(gradient_checkpointing=True))


def test_padding_costs_the_padded_tokens_and_packing_removes_them() -> None:
    packed = estimate_finetune_speed(job(method="lora", packing=True, sample_tokens=512), LLAMA, H100,
                                     gpus=None, efficiency=None)
    padded = estimate_finetune_speed(job(method="lora", sample_tokens=512), LLAMA, H100, gpus=None,
                                     efficiency=None)
    # Every 2048-token row carries one 512-token example: 4× the rows, each as dear as a packed row.
    assert padded.units["steps"] == pytest.approx(4 * packed.units["steps"], rel=0.01)
    assert padded.job_s > 3.5 * packed.job_s
    dynamic = estimate_finetune_speed(job(method="lora", sample_tokens=512, padding="longest"), LLAMA, H100,
                                      gpus=None, efficiency=None)
    assert dynamic.job_s < padded.job_s  # micro_batch 1: each row only as long as its example


def test_packing_with_flash_attention_counts_attention_per_document() -> None:
    whole = training_flops(job(packing=True, sample_tokens=512, seq_len=8192), LLAMA)
    per_doc = training_flops(job(packing=True, sample_tokens=512, seq_len=8192, attention="flash"), LLAMA)
    assert per_doc.attention_fwd == pytest.approx(whole.attention_fwd * 512 / 8192, rel=1e-9)
    assert per_doc.linear_fwd == whole.linear_fwd


def test_offloads_add_pcie_phases() -> None:
    j = job(method="lora", activation_offload=True)
    names = [p.name for p in estimate_finetune_speed(j, LLAMA, H100, gpus=None, efficiency=None).phases]
    assert "activation offload transfer" in names
    j = job(sharding="fsdp", offload_params=True)
    names = [p.name for p in estimate_finetune_speed(j, LLAMA, H100, gpus=None, efficiency=None).phases]
    assert "parameter offload transfer" in names and "optimizer offload transfer" in names


def test_paged_states_that_do_not_fit_beside_the_backward_are_paged_every_step() -> None:
    fits = job(method="lora", optimizer="paged_adamw_32bit", seq_len=512)
    spills = job(method="full", optimizer="paged_adamw_32bit", precision="bf16", seq_len=512)
    phases = [p.name for p in estimate_finetune_speed(fits, LLAMA, H100, gpus=None, efficiency=None).phases]
    assert "paged optimizer states in and out" not in phases
    phases = [p.name for p in estimate_finetune_speed(spills, LLAMA, H100, gpus=None, efficiency=None).phases]
    assert "paged optimizer states in and out" in phases


# --- host RAM and fixes ------------------------------------------------------------------------------


def test_offloaded_activations_land_in_host_ram() -> None:
    j = job(method="lora", activation_offload=True)
    ram = {t.name: t.bytes for t in estimate_host(j, LLAMA).ram}
    saved = bytes_by_category(estimate_finetune_memory(job(method="lora"), LLAMA, H100))["activations"]
    logits = named(estimate_finetune_memory(job(method="lora"), LLAMA, H100), "logits")
    assert ram["offloaded activations (pinned)"] == pytest.approx(OFFLOAD_HOST_COPIES * (saved - logits), rel=0.01)


def test_offloaded_parameters_land_in_host_ram() -> None:
    ram = {t.name: t.bytes for t in estimate_host(job(sharding="fsdp", offload_params=True), LLAMA).ram}
    # fp32 master + fp32 gradient + Adam m, v: ZeRO's 16 B per parameter.
    assert ram["offloaded parameters, gradients and optimizer states"] == 16 * LLAMA.params_total


def test_task_keeping_fixes_include_the_new_settings_with_their_savings() -> None:
    suggestions = {s.change: s for s in suggest_changes(job(method="lora", seq_len=8192), LLAMA, RTX4090)}
    picked = [s for name, s in suggestions.items() if name.startswith(("selective activation", "offload activations"))]
    assert len(picked) == 2
    assert all(s.keeps_task and s.saves_bytes > 0 for s in picked)
    full = {s.change: s for s in suggest_changes(job(seq_len=256, gradient_checkpointing=True), LLAMA, H100)}
    in_backward = full["optimizer step in the backward"]
    assert in_backward.keeps_task and in_backward.saves_bytes > 40 * 2**30
    full = {s.change: s for s in suggest_changes(job(seq_len=8192), LLAMA, H100)}
    paged = full["paged 8-bit AdamW (bitsandbytes)"]
    assert paged.keeps_task and paged.saves_bytes > full["8-bit AdamW (bitsandbytes)"].saves_bytes
