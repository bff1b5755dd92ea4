"""Per-GPU memory of sharded fine-tuning, term by term: what FSDP / ZeRO shard, gather, replicate, offload.

Each test states the framework behaviour it holds the estimate to (docs/estimator.md §2.2).
"""

from __future__ import annotations

import pytest

from gpuscout.estimator import overhead
from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.params import layer_params, nonlinear_params, quantized_linear_params
from gpuscout.estimator.training import (
    FSDP_UNITS_ON_GPU,
    NF4_BYTES,
    NF4_CONSTANT_BYTES,
    ZERO_REDUCE_BUCKET_ELEMENTS,
    Layout,
    estimate_finetune_memory,
    root_reduce_scatter_bytes,
)
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.presets import load_llm_preset

L70 = load_llm_preset("llama-3.1-70b")
L8 = load_llm_preset("llama-3-8b")
H100 = find_gpu("h100")


def job(model: str = "llama-3.1-70b", **kw: object) -> FinetuneJob:
    base: dict[str, object] = {"kind": "finetune", "model": model, "method": "qlora", "seq_len": 2048,
                               "gradient_checkpointing": True}
    return FinetuneJob.model_validate(base | kw)


def named(b: MemoryBreakdown, prefix: str) -> float:
    found = [t.bytes for t in b.terms if t.name.startswith(prefix)]
    assert found, f"no term named {prefix!r} in {[t.name for t in b.terms]}"
    return float(sum(found))


def test_fsdp_qlora_70b_on_8_gpus_holds_the_16_bit_lm_head_and_two_layer_units() -> None:
    """The LM head and embeddings are never quantized and FSDP keeps the root unit gathered from forward to
    backward; two decoder layers (current + prefetched) are gathered as packed 4-bit storage."""
    b = estimate_finetune_memory(job(gpus=8, sharding="fsdp"), L70, H100)
    head = L70.vocab_size * L70.hidden_size
    assert named(b, "root unit gathered") >= 2 * head * 2  # embeddings + LM head, at least 16-bit
    packed = quantized_linear_params(L70) / L70.num_layers * NF4_BYTES
    assert named(b, "gathered layer units") >= FSDP_UNITS_ON_GPU * packed
    # ... and not the 16-bit size of a layer: FSDP gathers what it shards, the packed codes.
    assert named(b, "gathered layer units") < FSDP_UNITS_ON_GPU * layer_params(L70) * 2 / 2
    assert b.peak_bytes >= sum(t.bytes for t in b.terms if t.category in ("weights", "temporaries"))


def test_nf4_constants_are_whole_on_every_rank() -> None:
    """QuantState is not a parameter: FSDP and ZeRO-3 shard parameters only, so the absmax stay whole."""
    one = estimate_finetune_memory(job(gpus=1), L70, H100)
    for sharding in ("fsdp", "zero3", "none"):
        many = estimate_finetune_memory(job(gpus=8, sharding=sharding), L70, H100)
        assert named(many, "quantization constants") == named(one, "quantization constants")
    assert named(one, "quantization constants") == pytest.approx(quantized_linear_params(L70) * NF4_CONSTANT_BYTES)


def test_sharding_shrinks_the_shards_but_not_the_gathered_root() -> None:
    two = estimate_finetune_memory(job(gpus=2, sharding="fsdp"), L70, H100)
    eight = estimate_finetune_memory(job(gpus=8, sharding="fsdp"), L70, H100)
    assert named(eight, "frozen base weights") * 4 == pytest.approx(named(two, "frozen base weights"))
    assert named(eight, "root unit gathered") == named(two, "root unit gathered")


def test_zero3_gathers_the_lm_head_at_the_loss_not_the_whole_root() -> None:
    fsdp = estimate_finetune_memory(job(gpus=8, sharding="fsdp"), L70, H100)
    zero3 = estimate_finetune_memory(job(gpus=8, sharding="zero3"), L70, H100)
    head = L70.vocab_size * L70.hidden_size
    assert named(zero3, "LM head gathered") >= head * 2
    assert named(zero3, "LM head gathered") < named(fsdp, "root unit gathered")


@pytest.mark.parametrize("sharding", ["zero1", "zero2", "zero3"])
def test_deepspeed_reduce_bucket_is_paid_whole_by_a_lora_job(sharding: str) -> None:
    """ZeRO allocates reduce_bucket_size elements whatever the trainable count (stage_1_and_2 backward,
    stage3 __ipg_bucket_flat_buffer): far more than a LoRA job's gradients."""
    b = estimate_finetune_memory(job("llama-3-8b", method="lora", gpus=4, sharding=sharding), L8, H100)
    assert named(b, "ZeRO gradient bucket") == ZERO_REDUCE_BUCKET_ELEMENTS * 2
    assert named(b, "ZeRO gradient bucket") > 5 * bytes_by_category(b)["gradients"]
    fsdp = estimate_finetune_memory(job("llama-3-8b", method="lora", gpus=4, sharding="fsdp"), L8, H100)
    assert not [t for t in fsdp.terms if t.name.startswith("ZeRO")]


def test_fsdp_full_fine_tune_holds_one_units_unsharded_gradients() -> None:
    b = estimate_finetune_memory(job("llama-3-8b", method="full", gpus=8, sharding="fsdp"), L8, H100)
    assert named(b, "unsharded gradients of one unit") == pytest.approx(layer_params(L8) * 4)


def test_ddp_keeps_a_full_replica_and_its_gradient_buckets() -> None:
    one = estimate_finetune_memory(job(gpus=1), L70, H100)
    ddp = estimate_finetune_memory(job(gpus=4, sharding="none"), L70, H100)
    assert named(ddp, "frozen base weights") == named(one, "frozen base weights")
    assert named(ddp, "DDP gradient buckets") == named(ddp, "gradients")
    assert not [t for t in ddp.terms if "gathered" in t.name]


def test_nccl_buffers_only_with_several_ranks() -> None:
    one = estimate_finetune_memory(job(gpus=1), L70, H100)
    two = estimate_finetune_memory(job(gpus=2, sharding="fsdp"), L70, H100)
    assert not [t for t in one.terms if t.name == "NCCL buffers"]
    assert named(two, "NCCL buffers") == overhead.NCCL_TRAINING_BYTES


def test_parameter_offload_moves_states_off_the_gpu_but_not_the_gathered_units() -> None:
    """FSDP CPUOffload / ZeRO-3 offload_param: parameters, gradients and optimizer states live in host RAM;
    the root unit, two gathered layers (with the shards copied in for their all-gathers) and the NF4
    constants (not parameters, so never offloaded) stay on the GPU."""
    resident = estimate_finetune_memory(job(gpus=2, sharding="fsdp"), L70, H100)
    offloaded = estimate_finetune_memory(job(gpus=2, sharding="fsdp", offload_params=True), L70, H100)
    assert bytes_by_category(offloaded)["optimizer_states"] == 0
    assert bytes_by_category(resident)["optimizer_states"] > 0
    packed = quantized_linear_params(L70) / L70.num_layers * NF4_BYTES
    assert named(offloaded, "gathered layer units") >= FSDP_UNITS_ON_GPU * packed * (1 + 1 / 2)
    assert named(offloaded, "root unit") >= nonlinear_params(L70) * 2
    assert named(offloaded, "quantization constants") == named(resident, "quantization constants")
    assert not [t for t in offloaded.terms if t.name.startswith("frozen base weights")]
    assert offloaded.peak_bytes < resident.peak_bytes


def test_fsdp_full_fine_tune_holds_the_root_units_gradients_but_lora_does_not() -> None:
    """The trainable root unit is reduce-scattered only at the end of the backward (its embeddings come
    last): the LM head's 16-bit gradient is held throughout, and at the end the whole root's gradients and
    their fp32 reduce-scatter copy form a phase of their own. LoRA leaves the root frozen."""
    spec = job("llama-3-8b", method="full", gpus=8, sharding="fsdp")
    full = estimate_finetune_memory(spec, L8, H100)
    assert named(full, "unsharded LM-head gradient") == L8.vocab_size * L8.hidden_size * 2
    layout = Layout(gpus=8, tp=1, sharding="fsdp")
    assert root_reduce_scatter_bytes(spec, L8, layout) == nonlinear_params(L8) * (2 + 4)
    assert "root reduce-scatter" in full.notes[0]
    lora = job("llama-3-8b", method="lora", gpus=8, sharding="fsdp")
    assert root_reduce_scatter_bytes(lora, L8, layout) == 0
    assert not [t for t in estimate_finetune_memory(lora, L8, H100).terms if "LM-head gradient" in t.name]
