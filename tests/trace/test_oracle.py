"""The analytic estimator against its oracle: FakeTensor traces of real transformers steps.

Tolerances held (small configs, CPU trace, torch 2.13, transformers 5):
* weights, gradients, optimizer states: within 1% (these are exact byte counts on both sides);
* allocated peak (everything but GPU-only overheads): within 10%. Observed when this was written:
  0.95–1.05 across llama/qwen2/qwen3/mistral/phi3/gemma2/gpt2 and five recipes, and 0.99–1.00
  for inference prefill.

GPU-only overheads (CUDA context, allocator reserve, NCCL) are not traced and not compared.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.estimator.inference import estimate_inference_memory
from gpuscout.estimator.training import estimate_finetune_memory
from gpuscout.trace.llm import trace_finetune_step, trace_inference_step
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, InferenceJob, Lora

from .oracle_models import CONFIGS, EAGER_ONLY, GPU, PEAK_TOL, STATE_TOL, allocated

pytest.importorskip("transformers")

def finetune_case(family: str, **kw: Any) -> tuple[MemoryBreakdown, Any]:
    config = CONFIGS[family]
    attention = "eager" if family in EAGER_ONLY else kw.pop("attention", "sdpa")
    spec: dict[str, Any] = {"kind": "finetune", "model": family, "method": "full", "micro_batch": 2,
                            "seq_len": 512, "optimizer": "adamw", "attention": attention} | kw
    job = FinetuneJob.model_validate(spec)
    analytic = estimate_finetune_memory(job, shape_from_hf_config(config, name=family, source="test"), GPU)
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    traced = trace_finetune_step(
        config, micro_batch=job.micro_batch, seq_len=job.seq_len, precision=job.precision,
        optimizer=job.optimizer, method=job.method, lora_rank=job.lora.rank, lora_target_modules=targets,
        gradient_checkpointing=job.gradient_checkpointing, attention=attention)
    return analytic, traced


FINETUNE_CASES = [
    *[(family, {"precision": p}) for family in CONFIGS for p in ("bf16_mixed", "bf16")],
    ("llama", {"precision": "fp32"}),
    ("llama", {"precision": "bf16_mixed", "gradient_checkpointing": True}),
    ("llama", {"precision": "bf16_mixed", "attention": "eager"}),
    ("llama", {"precision": "bf16_mixed", "micro_batch": 4, "seq_len": 1024}),
    ("llama", {"precision": "bf16_mixed", "method": "lora", "lora": Lora(rank=8)}),
    ("llama", {"precision": "bf16", "optimizer": "sgd"}),
]


@pytest.mark.parametrize(("family", "kw"), FINETUNE_CASES,
                         ids=[f"{f}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for f, kw in FINETUNE_CASES])
def test_training_step_matches_the_trace(family: str, kw: dict[str, Any]) -> None:
    analytic, traced = finetune_case(family, **kw)
    ours = bytes_by_category(analytic)
    theirs = traced.peak_bytes
    assert ours["weights"] == pytest.approx(theirs["parameters"] + theirs["buffers"], rel=STATE_TOL)
    assert ours["gradients"] == pytest.approx(theirs["gradients"], rel=STATE_TOL)
    assert ours["optimizer_states"] == pytest.approx(theirs["optimizer_states"], rel=STATE_TOL)
    assert allocated(analytic) == pytest.approx(traced.peak_total_bytes, rel=PEAK_TOL)


@pytest.mark.parametrize(("batch", "prompt"), [(1, 512), (4, 1024), (8, 4096)])
def test_inference_prefill_matches_the_trace(batch: int, prompt: int) -> None:
    config = CONFIGS["llama"]
    job = InferenceJob(kind="inference", model="llama", engine="hf", concurrency=batch, prompt_tokens=prompt,
                       output_tokens=1)
    analytic = estimate_inference_memory(job, shape_from_hf_config(config, name="llama", source="test"), GPU)
    traced = trace_inference_step(config, batch=batch, prompt_tokens=prompt, weight_dtype="bf16")
    assert bytes_by_category(analytic)["weights"] == pytest.approx(traced.peak_bytes["parameters"], rel=STATE_TOL)
    assert allocated(analytic) == pytest.approx(traced.peak_total_bytes, rel=PEAK_TOL)
