"""Trace mode for FSDP: rank 0 of a fully sharded data-parallel training step, on fake tensors.

One process plays rank 0 of `world_size` ranks through PyTorch's fake process group (the "fake"
backend of `torch.testing._internal.distributed.fake_pg`: every collective returns at once with
tensors of the right shapes, nothing is sent). The model is wrapped as FSDP2 (`fully_shard`) wraps it
in transformers/accelerate and torchtitan: one unit per decoder layer, then the root (embeddings, final
norm, LM head), 16-bit gathers under mixed recipes (`MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`). `FSDPMemTracker` (torch.distributed._tools.fsdp2_mem_tracker, the tool torchtitan's
memory estimation uses) records every storage by FSDP's own categories: sharded and unsharded
parameters, all-gather and reduce-scatter buffers, sharded and unsharded gradients, activations,
temporaries, optimizer states.

What it cannot show: QLoRA (bitsandbytes' 4-bit kernels need CUDA), FSDP1's flat parameters, DeepSpeed
ZeRO, CPU offload of parameters (the fake device is the CPU, so host and device are one), NCCL's own
buffers and the caching allocator's reserve (they are outside PyTorch's tensors). Those stay analytic.

torch, transformers and peft are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpuscout.errors import GpuscoutError
from gpuscout.trace.memtrace import (
    CATEGORIES,
    explain_fake_failures,
    import_trace_stack,
    materialize_fake,
    require_positive,
)

# FSDPMemTracker's `_FSDPRefType` names → the trace's categories. The FSDP-specific ones are kept apart
# in `fsdp_peak_bytes` so the gathered units and reduce-scatter buffers can be read on their own.
_CATEGORY_OF_FSDP_REFTYPE = {
    "SHARDED_PARAM": "parameters",
    "UNSHARDED_PARAM": "parameters",
    "ALL_GATHER": "parameters",
    "BUFFER": "buffers",
    "SHARDED_GRAD": "gradients",
    "UNSHARDED_GRAD": "gradients",
    "REDUCE_SCATTER": "gradients",
    "OPT": "optimizer_states",
    "ACT": "activations",
    "TEMP": "temporaries",
    "INP": "other",
}
FSDP_CATEGORIES = tuple(_CATEGORY_OF_FSDP_REFTYPE)
_TOTAL_KEY = "Total"

_FAILURE = "Trace mode could not run this model's sharded step on fake CPU tensors."
_FIX = "use the analytic estimate (drop --trace), or trace one GPU (gpus = 1) beside it."


def trace_fsdp_finetune_step(
    hf_config: dict[str, Any],
    *,
    world_size: int,
    micro_batch: int,
    seq_len: int,
    precision: str,
    method: str,
    lora_rank: int = 16,
    lora_alpha: int = 32,
    lora_target_modules: tuple[str, ...] | str = "all-linear",
    gradient_checkpointing: bool = False,
    attention: str = "sdpa",
    num_layers: int | None = None,
) -> Any:
    """Trace rank 0's steady-state step (optimizer states already exist) under FSDP2 and report its peaks.

    Returns a `TraceResult` whose `fsdp_peak_bytes` holds FSDP's own categories, each at its own maximum.
    """
    if method == "qlora":
        raise GpuscoutError(
            "Trace mode cannot run sharded QLoRA on this machine.",
            "bitsandbytes' 4-bit kernels need CUDA, and fake tensors cannot run them.",
            "use the analytic estimate (drop --trace), or trace the same job with method = 'lora': the "
            "gathered units and root unit follow the same FSDP schedule.",
        )
    require_positive(world_size=world_size, micro_batch=micro_batch, seq_len=seq_len, lora_rank=lora_rank)
    torch = import_trace_stack("transformers", *(["peft"] if method == "lora" else []))
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from gpuscout.torchmodel.llm import apply_lora, build_optimizer, enable_checkpointing, param_dtype
    from gpuscout.trace.llm import TraceResult, _build_model

    start_s = time.perf_counter()
    model = _build_model(hf_config, attention, num_layers, param_dtype(torch, precision, method))
    if gradient_checkpointing:
        enable_checkpointing(model, "full")
    if method == "lora":
        model = apply_lora(model, lora_rank, lora_alpha, lora_target_modules)
    model.train()
    mixed = precision in ("bf16_mixed", "fp16_mixed")
    low = torch.float16 if precision == "fp16_mixed" else torch.bfloat16
    mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    with _fake_process_group(dist, world_size):
        mesh = init_device_mesh("cpu", (world_size,))  # outside FakeTensorMode: it reads its rank map
        with explain_fake_failures(_FAILURE, _FIX), FakeTensorMode():
            materialize_fake(model)
            for layer in _decoder_layers(model):
                fully_shard(layer, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
            trainable = [p for p in model.parameters() if p.requires_grad]
            opt = build_optimizer("adamw", trainable, "cpu")
            vocab = int(model.config.vocab_size)

            def step(batch: int, tokens: int) -> None:
                ids = torch.randint(0, vocab, (batch, tokens))
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            step(1, min(seq_len, 8))  # warm-up, untracked: creates the optimizer states
            tracker = _fsdp_category_tracker(model, opt)
            with tracker:
                step(micro_batch, seq_len)
    wall_s = time.perf_counter() - start_s
    at_peak = ", ".join(f"{k} {v}" for k, v in tracker.at_peak.items() if v)
    notes = (
        f"rank 0 of {world_size} under FSDP2 (fully_shard per decoder layer, then the root), fake process "
        "group: collectives return at once, so prefetching overlaps nothing and at most the unit in use "
        "and the next are gathered",
        "NCCL buffers, the CUDA context and the caching allocator's reserve are not traced; add them from "
        "the analytic estimate",
        "peak_bytes holds each category's own maximum over the step (FSDP's categories in fsdp_peak_bytes)",
        f"bytes at the overall peak by FSDP category: {at_peak}",
    )
    return TraceResult(kind="finetune", peak_bytes=dict(tracker.category_peak), peak_total_bytes=tracker.peak_total,
                       wall_s=wall_s, device="cpu (fake), fake process group", notes=notes,
                       fsdp_peak_bytes=dict(tracker.fsdp_peak))


def _decoder_layers(model: Any) -> list[Any]:
    """The decoder layers FSDP wraps one by one (transformers' `_no_split_modules`, as accelerate's
    TRANSFORMER_BASED_WRAP does)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    found = [m for m in model.modules() if type(m).__name__ in names]
    if not found:
        raise GpuscoutError(f"Trace mode cannot find the decoder layers of {type(model).__name__} to shard.",
                            "FSDP wraps each decoder layer; this model names none in _no_split_modules.", _FIX)
    return found


@contextmanager
def _fake_process_group(dist: Any, world_size: int) -> Iterator[None]:
    """A fake process group of `world_size` ranks for the duration of the trace, this process as rank 0."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise GpuscoutError("Trace mode cannot fake a process group inside a distributed run.",
                            "torch.distributed is already initialised in this process.",
                            "run `gpuscout estimate --trace` as a plain process, not under torchrun.")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _fsdp_category_tracker(model: Any, opt: Any) -> Any:
    """An FSDPMemTracker that remembers each category's own maximum and the totals at the overall peak."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    class _Tracker(FSDPMemTracker):  # type: ignore[misc,no-untyped-call,unused-ignore]
        def __init__(self) -> None:
            super().__init__(model, opt)
            self.category_peak: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
            self.fsdp_peak: dict[str, int] = dict.fromkeys(FSDP_CATEGORIES, 0)
            self.at_peak: dict[str, int] = dict.fromkeys(FSDP_CATEGORIES, 0)
            self.peak_total = 0

        def _update_snap(self, *args: Any, **kwargs: Any) -> None:
            super()._update_snap(*args, **kwargs)
            fsdp = dict.fromkeys(FSDP_CATEGORIES, 0)
            total = 0
            for dev_snap in self._curr_mem_snap.values():
                for reftype, value in dev_snap.items():
                    name = getattr(reftype, "name", "")
                    if name in fsdp:
                        fsdp[name] += int(value)
                        total += int(value)
            mapped = dict.fromkeys(CATEGORIES, 0)
            for name, value in fsdp.items():
                mapped[_CATEGORY_OF_FSDP_REFTYPE[name]] += value
                self.fsdp_peak[name] = max(self.fsdp_peak[name], value)
            for name, value in mapped.items():
                self.category_peak[name] = max(self.category_peak[name], value)
            if total > self.peak_total:
                self.peak_total, self.at_peak = total, fsdp

    return _Tracker()
