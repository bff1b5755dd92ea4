"""Trace mode: the exact memory oracle for a job's real `transformers` model.

One real training step (forward, backward, optimizer step, zero_grad) or one inference step
(prefill into a `DynamicCache`, then one decode step) runs under PyTorch's `FakeTensorMode`, so
no memory is allocated, while `torch.distributed._tools.mem_tracker.MemTracker` records every
tensor storage by category (parameter, buffer, gradient, optimizer state, activation, temporary,
other). This is the "FT" approach of docs/estimator.md §5 (torchtitan PR #425).
The model and its recipe come from `torchmodel.llm`, the builder the bench uses too.

It runs on the CPU device: a CPU-only torch cannot place fake tensors on `cuda`. So the kernels
are the CPU ones (SDPA's CPU memory-efficient path, fused AdamW on CPU) and GPU-only memory
(CUDA context, cuBLAS workspace, caching-allocator rounding and fragmentation) is not traced.

torch, transformers and peft are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from typing import Any, Literal

from gpuscout.errors import GpuscoutError
from gpuscout.frozen import Frozen
from gpuscout.torchmodel.llm import (
    OffloadLedger,
    apply_lora,
    autocast,
    build_causal_lm,
    build_optimizer,
    enable_checkpointing,
    next_token,
    offload_activations,
    optimizer_in_backward,
    param_dtype,
)
from gpuscout.trace.memtrace import (
    CATEGORIES,
    at_peak_note,
    category_peak_tracker,
    explain_fake_failures,
    import_trace_stack,
    materialize_fake,
    peak_total,
    require_positive,
)
from gpuscout.workload.hf_config import config_with_depth

Precision = Literal["fp32", "bf16_mixed", "bf16", "fp16_mixed"]
OptimizerName = Literal["adamw", "adamw_8bit", "sgd", "adafactor", "paged_adamw_8bit", "paged_adamw_32bit"]
CheckpointPolicy = Literal["full", "selective", "selective_op", "selective_layers"]
Method = Literal["full", "lora", "qlora"]
Attention = Literal["sdpa", "eager"]
WeightDtype = Literal["fp32", "bf16", "fp16"]

_FAKE_FAILURE = "Trace mode could not run this model's step on fake CPU tensors."
_FAKE_FAILURE_FIX = (
    "use the analytic estimate (drop --trace). Mixture-of-experts models trace only in pure "
    "bf16 (precision='bf16' / weight_dtype='bf16'): torch's grouped matmul needs bf16 inputs."
)

__all__ = ["CATEGORIES", "TraceResult", "trace_finetune_step", "trace_inference_step"]

_DEVICE = "cpu (fake)"
_NOTE_GPU_ONLY = (
    "GPU-only parts (CUDA context, cuBLAS workspace, caching-allocator rounding and fragmentation) "
    "are not traced; add them from the analytic estimate"
)
_NOTE_CPU_KERNELS = (
    "traced on the CPU device: kernels are the CPU ones (SDPA memory-efficient CPU path, "
    "fused AdamW as the HF Trainer defaults to), which can differ from what CUDA picks"
)
_NOTE_PEAK_SEMANTICS = (
    "peak_bytes holds each category's own maximum over the step; the maxima need not coincide, "
    "so their sum can exceed peak_total_bytes (the total at the single overall peak)"
)
_WARMUP_SEQ_LEN = 8


class TraceResult(Frozen):
    """Peak memory of one traced step, by category, as MemTracker saw it."""


    kind: Literal["finetune", "inference"]
    peak_bytes: dict[str, int]
    peak_total_bytes: int
    wall_s: float
    device: str
    notes: tuple[str, ...]
    # With activation_offload: bytes the hooks moved off the device in the traced step (host RAM's share).
    offloaded_bytes: int | None = None
    # Under FSDP (`trace.sharded`): FSDP's own categories (gathered units, reduce-scatter buffers, ...),
    # each at its own maximum.
    fsdp_peak_bytes: dict[str, int] | None = None


def trace_finetune_step(
    hf_config: dict[str, Any],
    *,
    micro_batch: int,
    seq_len: int,
    precision: Precision,
    optimizer: OptimizerName,
    method: Method,
    lora_rank: int = 16,
    lora_alpha: int = 32,
    lora_target_modules: tuple[str, ...] | str = "all-linear",
    gradient_checkpointing: bool = False,
    attention: Attention = "sdpa",
    num_layers: int | None = None,
    checkpoint_policy: CheckpointPolicy = "full",
    activation_offload: bool = False,
    optimizer_in_bwd: bool = False,
    checkpoint_layer_interval: int = 1,
) -> TraceResult:
    """Trace one steady-state training step (optimizer states already exist) and report its peaks.

    The training settings of docs/estimator.md §2.14 run as the real code paths: selective checkpointing
    through PyTorch's SAC contexts, activation offloading through saved-tensor hooks (what leaves the
    device is dropped and recreated on unpack: the device's view of a host copy), and the optimizer in
    the backward through post-accumulate-grad hooks.
    """
    _refuse_bitsandbytes(method, optimizer)
    require_positive(micro_batch=micro_batch, seq_len=seq_len, lora_rank=lora_rank)
    torch = import_trace_stack("transformers", *(["peft"] if method == "lora" else []))
    from torch._subclasses.fake_tensor import FakeTensorMode

    start_s = time.perf_counter()
    model = _build_model(hf_config, attention, num_layers, param_dtype(torch, precision, method))
    if gradient_checkpointing:
        enable_checkpointing(model, checkpoint_policy, checkpoint_layer_interval)
    if method == "lora":
        model = apply_lora(model, lora_rank, lora_alpha, lora_target_modules)
    model.train()
    with explain_fake_failures(_FAKE_FAILURE, _FAKE_FAILURE_FIX), FakeTensorMode():
        materialize_fake(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        per_param = optimizer_in_backward(optimizer, trainable, "cpu") if optimizer_in_bwd else None
        opts = tuple(per_param.values()) if per_param else (build_optimizer(optimizer, trainable, "cpu"),)
        vocab = int(model.config.vocab_size)
        ledger = OffloadLedger()

        def step(batch: int, tokens: int) -> None:
            ids = torch.randint(0, vocab, (batch, tokens))
            ledger.moved_bytes = 0
            offload = offload_activations(torch, model, fake=True, ledger=ledger) if activation_offload \
                else nullcontext()
            with offload:
                with autocast(torch, precision, "cpu"):
                    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                loss.backward()
            for opt in () if per_param else opts:
                opt.step()
                opt.zero_grad(set_to_none=True)

        # Warm-up, untracked and tiny: optimizer states are created lazily by the first step, and a
        # real run's peak (every step after the first) has them resident.
        step(1, min(seq_len, _WARMUP_SEQ_LEN))
        tracker = category_peak_tracker()
        with warnings.catch_warnings():
            # MemTracker warns on the parameters' None gradients, which the optimizer in the backward
            # frees as soon as each update is done.
            warnings.filterwarnings("ignore", message="Expected a tensor or a traceable wrapper-subclass")
            tracker.track_external(model, *opts)
            with tracker:
                step(micro_batch, seq_len)
    wall_s = time.perf_counter() - start_s
    notes = (
        _NOTE_GPU_ONLY,
        _NOTE_CPU_KERNELS,
        _NOTE_PEAK_SEMANTICS,
        "traced the second optimizer step (an untracked warm-up step created the optimizer states); "
        "scratch buffers of optimizer.step() count as temporaries, not optimizer_states",
        *_precision_notes(precision, method),
        at_peak_note(tracker),
    )
    result = _result("finetune", tracker, wall_s, notes)
    return result.model_copy(update={"offloaded_bytes": ledger.moved_bytes}) if activation_offload else result


def trace_inference_step(
    hf_config: dict[str, Any],
    *,
    batch: int,
    prompt_tokens: int,
    weight_dtype: WeightDtype,
    attention: Attention = "sdpa",
    num_layers: int | None = None,
) -> TraceResult:
    """Trace a prefill of `prompt_tokens` into a DynamicCache plus one decode step; peak over both."""
    require_positive(batch=batch, prompt_tokens=prompt_tokens)
    torch = import_trace_stack("transformers")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import DynamicCache

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[weight_dtype]
    start_s = time.perf_counter()
    model = _build_model(hf_config, attention, num_layers, dtype)
    model.eval()
    with explain_fake_failures(_FAKE_FAILURE, _FAKE_FAILURE_FIX), FakeTensorMode():
        materialize_fake(model)
        ids = torch.randint(0, int(model.config.vocab_size), (batch, prompt_tokens))
        tracker = category_peak_tracker()
        tracker.track_external(model, ids)
        with tracker, torch.no_grad():
            cache = DynamicCache(config=model.config)
            next_ids = next_token(model, ids, cache)
            tracker.reset_mod_stats()  # MemTracker refuses a second root forward without this
            next_token(model, next_ids, cache)
        cache_bytes = _cache_bytes(cache)
    wall_s = time.perf_counter() - start_s
    notes = (
        _NOTE_GPU_ONLY,
        _NOTE_CPU_KERNELS,
        _NOTE_PEAK_SEMANTICS,
        "the KV cache is created during the traced forward passes, so MemTracker counts it inside "
        f"activations; after the decode step it holds {cache_bytes} bytes",
        "prefill computes logits for the last position only (as generate() does)",
        at_peak_note(tracker),
    )
    return _result("inference", tracker, wall_s, notes)


# --- guards -------------------------------------------------------------------------------------


def _refuse_bitsandbytes(method: str, optimizer: str) -> None:
    if method == "qlora" or optimizer in ("adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit"):
        raise GpuscoutError(
            "Trace mode cannot run QLoRA/8-bit optimizers on this machine.",
            "bitsandbytes kernels (4-bit weights, 8-bit optimizer states) need CUDA, and fake tensors cannot run them.",
            "use the analytic estimate (drop --trace), or trace with method='lora' / "
            "optimizer='adamw' and apply the analytic byte difference.",
        )


# --- building the job ----------------------------------------------------------------------------


def _build_model(hf_config: dict[str, Any], attention: str, num_layers: int | None, dtype: Any) -> Any:
    """The causal LM on the meta device (no weights, nothing downloaded), `num_layers` deep if given.

    It is built and adapted (PEFT) on meta, then made fake by `materialize_fake` (peft's adapter
    placement via `Module.to()` fails under FakeTensorMode).
    """
    if num_layers is not None:
        require_positive(num_layers=num_layers)
        hf_config = config_with_depth(hf_config, num_layers)
    return build_causal_lm(hf_config, attention=attention, dtype=dtype, device="meta")


def _precision_notes(precision: str, method: str) -> tuple[str, ...]:
    notes = []
    if precision in ("bf16_mixed", "fp16_mixed"):
        notes.append(
            "mixed precision: fp32 weights/gradients/optimizer states, autocast compute; autocast's "
            "low-precision weight copies count as activations"
        )
    if precision == "fp16_mixed":
        notes.append("GradScaler is not modelled: its state is a few scalars")
    if method == "lora":
        notes.append("LoRA: frozen base weights in 16-bit under 16-bit recipes (fp32 for fp32); adapters "
                     "upcast to fp32 by peft under mixed recipes")
    return tuple(notes)


# --- inference helpers ---------------------------------------------------------------------------


def _cache_bytes(cache: Any) -> int:
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "untyped_storage"):
                total += int(tensor.numel() * tensor.element_size())
    return total


# --- reading the tracker -------------------------------------------------------------------------


def _result(kind: Literal["finetune", "inference"], tracker: Any, wall_s: float, notes: tuple[str, ...]) -> TraceResult:
    return TraceResult(
        kind=kind,
        peak_bytes=dict(tracker.category_peak_bytes),
        peak_total_bytes=peak_total(tracker),
        wall_s=wall_s,
        device=_DEVICE,
        notes=notes,
    )
