"""Trace mode under FSDP: rank 0 of a fake process group against the analytic sharding terms.

The trace runs FSDP2 (`fully_shard` per decoder layer, then the root) on fake tensors, so what it
gathers, keeps and frees is the real schedule; the analytic estimate must not fall below it.
"""

from __future__ import annotations

import pytest

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.params import nonlinear_params
from gpuscout.estimator.training import Layout, estimate_finetune_memory, root_reduce_scatter_bytes
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.lora import lora_target_names

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

SMALL_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}
WORLD = 4


def _named(terms: object, prefix: str) -> float:
    return float(sum(t.bytes for t in terms if t.name.startswith(prefix)))  # type: ignore[attr-defined]


def test_fsdp_lora_trace_gathers_the_root_whole_and_the_estimate_covers_it() -> None:
    from gpuscout.trace.sharded import trace_fsdp_finetune_step

    shape = shape_from_hf_config(SMALL_LLAMA, name="small llama", source="test")
    job = FinetuneJob.model_validate({"kind": "finetune", "model": "llama-3-8b", "method": "lora",
                                     "seq_len": 256, "gpus": WORLD, "sharding": "fsdp",
                                     "gradient_checkpointing": True})
    traced = trace_fsdp_finetune_step(
        SMALL_LLAMA, world_size=WORLD, micro_batch=1, seq_len=256, precision="bf16_mixed", method="lora",
        lora_target_modules=lora_target_names(shape, job.lora), gradient_checkpointing=True)
    fsdp = traced.fsdp_peak_bytes
    assert fsdp is not None
    root = nonlinear_params(shape) * 2  # embeddings, final norm, LM head, gathered in bf16
    # The root unit stays gathered while a decoder layer is gathered too: unsharded params exceed it.
    assert fsdp["UNSHARDED_PARAM"] > root
    estimate = estimate_finetune_memory(job, shape, find_gpu("h100"))
    assert _named(estimate.terms, "root unit gathered") == pytest.approx(root, rel=0.01)
    # What the trace holds gathered (unsharded params + the all-gather buffer in flight) is within the
    # estimate's root unit + its two gathered units.
    gathered = _named(estimate.terms, "root unit gathered") + _named(estimate.terms, "gathered layer units")
    assert fsdp["UNSHARDED_PARAM"] <= gathered
    assert traced.peak_total_bytes <= estimate.peak_bytes
    assert any("fake process group" in note for note in traced.notes)


def test_fsdp_full_trace_holds_the_root_gradients_and_the_estimate_covers_them() -> None:
    from gpuscout.trace.sharded import trace_fsdp_finetune_step

    shape = shape_from_hf_config(SMALL_LLAMA, name="small llama", source="test")
    job = FinetuneJob.model_validate({"kind": "finetune", "model": "llama-3-8b", "method": "full",
                                     "seq_len": 256, "gpus": WORLD, "sharding": "fsdp"})
    traced = trace_fsdp_finetune_step(SMALL_LLAMA, world_size=WORLD, micro_batch=1, seq_len=256,
                                      precision="bf16_mixed", method="full")
    fsdp = traced.fsdp_peak_bytes
    assert fsdp is not None
    # Embeddings, LM head and final norm (nonlinear_params also counts the decoder layers' norms).
    root = 2 * SMALL_LLAMA["vocab_size"] * SMALL_LLAMA["hidden_size"] + SMALL_LLAMA["hidden_size"]
    assert fsdp["UNSHARDED_GRAD"] >= root * 2  # the root's 16-bit gradients, whole, before its reduce-scatter
    estimate = estimate_finetune_memory(job, shape, find_gpu("h100"))
    layout = Layout(gpus=WORLD, tp=1, sharding="fsdp")
    # The end of the backward: the root's 16-bit gradients and their fp32 reduce-scatter copy.
    assert root_reduce_scatter_bytes(job, shape, layout) >= fsdp["UNSHARDED_GRAD"] + root * 4
    assert traced.peak_total_bytes <= estimate.peak_bytes


def test_sharded_qlora_cannot_be_traced_and_says_why() -> None:
    from gpuscout.trace.sharded import trace_fsdp_finetune_step

    with pytest.raises(GpuscoutError, match="QLoRA"):
        trace_fsdp_finetune_step(SMALL_LLAMA, world_size=WORLD, micro_batch=1, seq_len=8,
                                 precision="bf16_mixed", method="qlora")


def test_an_fsdp_job_is_traced_as_rank_0_of_its_gpus_and_the_rest_on_one_gpu() -> None:
    from gpuscout.trace.scope import as_traced, fsdp_traceable

    def spec(**kw: object) -> FinetuneJob:
        base: dict[str, object] = {"kind": "finetune", "model": "llama-3-8b", "method": "lora", "gpus": 4,
                                   "sharding": "fsdp", "grad_accum": 4}
        return FinetuneJob.model_validate(base | kw)

    kept = as_traced(spec())
    assert isinstance(kept, FinetuneJob)
    assert (kept.gpus, kept.sharding, kept.grad_accum) == (4, "fsdp", 1)
    for other in (spec(method="qlora"), spec(sharding="zero3"), spec(optimizer="adamw_8bit"),
                  spec(offload_params=True)):
        assert not fsdp_traceable(other)
        single = as_traced(other)
        assert isinstance(single, FinetuneJob)
        assert (single.gpus, single.sharding) == (1, "none")
