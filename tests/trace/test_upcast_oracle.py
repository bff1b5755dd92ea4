"""QLoRA after peft's prepare_model_for_kbit_training: the analytic upcast against a traced one.

bitsandbytes cannot run on fake CPU tensors, so the trace is a LoRA step on a 16-bit base whose
non-linear parameters (embeddings, norms, lm_head) are cast to fp32 exactly as peft casts every
parameter that is not 4-bit. The 4-bit linears do not change between the two runs, so the traced
difference (upcast − not) is the oracle for the analytic difference of a QLoRA job with
`upcast_unquantized` on and off.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuscout.estimator.breakdown import bytes_by_category
from gpuscout.estimator.training import estimate_finetune_memory
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import FinetuneJob

pytest.importorskip("transformers")
pytest.importorskip("peft")

CONFIG: dict[str, Any] = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                          "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                          "vocab_size": 8000, "max_position_embeddings": 4096}
TOL = 0.03  # the differences are exact byte counts on both sides but for a few small temporaries


def traced_total(upcast: bool, seq_len: int) -> int:
    """Peak of one traced LoRA step (bf16 autocast, checkpointing) with or without peft's upcast."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuscout.torchmodel.llm import apply_lora, autocast, build_causal_lm, build_optimizer, enable_checkpointing
    from gpuscout.trace.memtrace import category_peak_tracker, materialize_fake, peak_total

    model = build_causal_lm(CONFIG, attention="sdpa", dtype=torch.bfloat16, device="meta")
    if upcast:  # what prepare_model_for_kbit_training does to every parameter that is not 4-bit
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear) or name.endswith("lm_head"):
                for param in module.parameters(recurse=False):
                    param.data = param.data.to(torch.float32)
    enable_checkpointing(model)
    model = apply_lora(model, 16, 32, "all-linear")
    model.train()
    with FakeTensorMode():
        materialize_fake(model)
        opt = build_optimizer("adamw", [p for p in model.parameters() if p.requires_grad], "cpu")

        def step(tokens: int) -> None:
            ids = torch.randint(0, CONFIG["vocab_size"], (1, tokens))
            with autocast(torch, "bf16_mixed", "cpu"):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step(8)  # optimizer states exist before the measured step, as in a real run
        tracker = category_peak_tracker()
        tracker.track_external(model, opt)
        with tracker:
            step(seq_len)
    return int(peak_total(tracker))


def analytic_allocated(upcast: bool, seq_len: int) -> int:
    job = FinetuneJob(kind="finetune", model="tiny", method="qlora", seq_len=seq_len,
                      gradient_checkpointing=True, upcast_unquantized=upcast)
    breakdown = estimate_finetune_memory(job, shape_from_hf_config(CONFIG, name="tiny", source="test"),
                                         find_gpu("h100"))
    return breakdown.peak_bytes - bytes_by_category(breakdown).get("overhead", 0)


@pytest.mark.parametrize("seq_len", [512, 2048])
def test_upcast_costs_what_the_trace_says(seq_len: int) -> None:
    traced = traced_total(True, seq_len) - traced_total(False, seq_len)
    analytic = analytic_allocated(True, seq_len) - analytic_allocated(False, seq_len)
    assert traced > 0
    assert analytic == pytest.approx(traced, rel=TOL)


def test_upcast_is_qlora_only() -> None:
    lora = FinetuneJob(kind="finetune", model="tiny", method="lora", gradient_checkpointing=True)
    shape = shape_from_hf_config(CONFIG, name="tiny", source="test")
    on = estimate_finetune_memory(lora, shape, find_gpu("h100"))
    off = estimate_finetune_memory(lora.model_copy(update={"upcast_unquantized": False}), shape, find_gpu("h100"))
    assert on.peak_bytes == off.peak_bytes
