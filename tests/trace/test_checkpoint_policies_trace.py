"""torchtitan's op-level selective checkpointing (docs/estimator.md §2.16) against FakeTensor traces of
real transformers steps running that policy (`torchmodel.llm.op_level_checkpoint_context`, torchtitan's
rule: save mm and SDPA outputs except every second mm), and every k-th layer checkpointing (transformers'
per-layer flag cleared on the other layers). What a policy saves beyond full checkpointing is compared,
so the rest of the step (states, logits, the recomputed layer) cancels out."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscout.estimator.training import estimate_finetune_memory
from gpuscout.trace.llm import trace_finetune_step
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob

from .oracle_models import CONFIGS, GPU, PEAK_TOL, allocated

pytest.importorskip("transformers")

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def run(policy: str, **kw: Any) -> tuple[int, int, int]:
    """(analytic checkpointed bytes, analytic allocated peak, traced peak) of the llama oracle model."""
    spec: dict[str, Any] = {"kind": "finetune", "model": "llama", "method": "full", "micro_batch": 2,
                            "seq_len": 512, "precision": "bf16", "optimizer": "adamw",
                            "gradient_checkpointing": True, "checkpoint_policy": policy} | kw
    job = FinetuneJob.model_validate(spec)
    shape = shape_from_hf_config(CONFIGS["llama"], name="llama", source="test")
    analytic = estimate_finetune_memory(job, shape, GPU)
    saved = sum(t.bytes for t in analytic.terms if t.name.startswith(("checkpointed layer", "layer activations")))
    traced = trace_finetune_step(
        CONFIGS["llama"], micro_batch=job.micro_batch, seq_len=job.seq_len, precision=job.precision,
        optimizer=job.optimizer, method=job.method, lora_rank=job.lora.rank, lora_target_modules=TARGETS,
        gradient_checkpointing=True, checkpoint_policy=policy,  # type: ignore[arg-type]
        checkpoint_layer_interval=job.checkpoint_layer_interval)
    return saved, allocated(analytic), traced.peak_total_bytes


CASES = [{}, {"precision": "bf16_mixed"}, {"method": "lora", "lora": {"rank": 8}, "precision": "bf16_mixed"}]


@pytest.mark.parametrize("kw", CASES, ids=[str(kw) for kw in CASES])
def test_op_level_policy_saves_what_the_trace_saves(kw: dict[str, Any]) -> None:
    full_saved, _, full_traced = run("full", **kw)
    op_saved, op_peak, op_traced = run("selective_op", **kw)
    assert op_saved - full_saved == pytest.approx(op_traced - full_traced, rel=0.02)
    assert op_peak == pytest.approx(op_traced, rel=PEAK_TOL)
    # Fewer saves than gpuscout's every-matmul policy, more than full checkpointing, in the trace too.
    _, _, every_mm_traced = run("selective", **kw)
    assert every_mm_traced > op_traced > full_traced


def test_every_second_layer_checkpointed_saves_what_the_trace_saves() -> None:
    """Blocks 2 and 4 of the 4-layer oracle model checkpointed, 1 and 3 keep every activation."""
    full_saved, _, full_traced = run("full")
    spec: dict[str, Any] = {"checkpoint_layer_interval": 2}
    layers_saved, layers_peak, layers_traced = run("selective_layers", **spec)
    assert layers_saved - full_saved == pytest.approx(layers_traced - full_traced, rel=0.02)
    _, none_traced = run_none()
    assert none_traced > layers_traced > full_traced
    assert layers_peak == pytest.approx(layers_traced, rel=PEAK_TOL)


def run_none() -> tuple[int, int]:
    job = FinetuneJob.model_validate({"kind": "finetune", "model": "llama", "method": "full", "micro_batch": 2,
                                      "seq_len": 512, "precision": "bf16", "optimizer": "adamw"})
    shape = shape_from_hf_config(CONFIGS["llama"], name="llama", source="test")
    traced = trace_finetune_step(CONFIGS["llama"], micro_batch=2, seq_len=512, precision="bf16", optimizer="adamw",
                                 method="full")
    return allocated(estimate_finetune_memory(job, shape, GPU)), traced.peak_total_bytes
