"""Trace mode: the exact memory oracle for a job's real `transformers` model.

One real training step (forward, backward, optimizer step, zero_grad) or one inference step
(prefill into a `DynamicCache`, then one decode step) runs under PyTorch's `FakeTensorMode`, so
no memory is allocated, while `torch.distributed._tools.mem_tracker.MemTracker` records every
tensor storage by category (parameter, buffer, gradient, optimizer state, activation, temporary,
other). This is the "FT" approach of reference/estimators.md §1/§2 (torchtitan PR #425).

It runs on the CPU device: a CPU-only torch cannot place fake tensors on `cuda`. So the kernels
are the CPU ones (SDPA's CPU memory-efficient path, fused AdamW on CPU) and GPU-only memory
(CUDA context, cuBLAS workspace, caching-allocator rounding and fragmentation) is not traced.

torch, transformers and peft are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import inspect
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.measure.memtrace import (
    CATEGORIES,
    at_peak_note,
    category_peak_tracker,
    explain_fake_failures,
    import_trace_stack,
    peak_total,
)
from gpuscout.measure.memtrace import materialize_fake as _materialize_fake
from gpuscout.measure.memtrace import require_positive as _require_positive

Precision = Literal["fp32", "bf16_mixed", "bf16", "fp16_mixed"]
OptimizerName = Literal["adamw", "adamw_8bit", "sgd", "adafactor"]
Method = Literal["full", "lora", "qlora"]
Attention = Literal["sdpa", "eager"]
WeightDtype = Literal["fp32", "bf16", "fp16"]

_FAKE_FAILURE = "Trace mode could not run this model's step on fake CPU tensors."
_FAKE_FAILURE_FIX = (
    "use the analytic estimate (drop --trace). Mixture-of-experts models trace only in pure "
    "bf16 (precision='bf16' / weight_dtype='bf16'): torch's grouped matmul needs bf16 inputs."
)

__all__ = ["CATEGORIES", "DEFAULT_LORA_TARGETS", "TraceResult", "trace_finetune_step", "trace_inference_step"]

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

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


class TraceResult(BaseModel):
    """Peak memory of one traced step, by category, as MemTracker saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["finetune", "inference"]
    peak_bytes: dict[str, int]
    peak_total_bytes: int
    wall_s: float
    device: str
    notes: tuple[str, ...]


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
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS,
    gradient_checkpointing: bool = False,
    attention: Attention = "sdpa",
    num_layers: int | None = None,
) -> TraceResult:
    """Trace one steady-state training step (optimizer states already exist) and report its peaks."""
    _refuse_bitsandbytes(method, optimizer)
    _require_positive(micro_batch=micro_batch, seq_len=seq_len, lora_rank=lora_rank)
    torch = _import_torch_stack(peft_needed=method == "lora")
    from torch._subclasses.fake_tensor import FakeTensorMode

    start_s = time.perf_counter()
    model = _build_model(hf_config, attention, num_layers, _base_dtype(torch, precision, method))
    if gradient_checkpointing:
        _enable_checkpointing(model)
    if method == "lora":
        model = _apply_lora(model, lora_rank, lora_alpha, lora_target_modules)
    model.train()
    with explain_fake_failures(_FAKE_FAILURE, _FAKE_FAILURE_FIX), FakeTensorMode():
        _materialize_fake(model)
        opt = _build_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
        vocab = int(model.config.vocab_size)

        def step(batch: int, tokens: int) -> None:
            ids = torch.randint(0, vocab, (batch, tokens))
            with _autocast(precision):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        # Warm-up, untracked and tiny: optimizer states are created lazily by the first step, and a
        # real run's peak (every step after the first) has them resident.
        step(1, min(seq_len, _WARMUP_SEQ_LEN))
        tracker = category_peak_tracker()
        tracker.track_external(model, opt)
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
    return _result("finetune", tracker, wall_s, notes)


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
    _require_positive(batch=batch, prompt_tokens=prompt_tokens)
    torch = _import_torch_stack(peft_needed=False)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import DynamicCache

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[weight_dtype]
    start_s = time.perf_counter()
    model = _build_model(hf_config, attention, num_layers, dtype)
    model.eval()
    with explain_fake_failures(_FAKE_FAILURE, _FAKE_FAILURE_FIX), FakeTensorMode():
        _materialize_fake(model)
        ids = torch.randint(0, int(model.config.vocab_size), (batch, prompt_tokens))
        tracker = category_peak_tracker()
        tracker.track_external(model, ids)
        with tracker, torch.no_grad():
            cache = DynamicCache(config=model.config)
            next_ids = _next_token(model, ids, cache)
            tracker.reset_mod_stats()  # MemTracker refuses a second root forward without this
            _next_token(model, next_ids, cache)
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
    if method == "qlora" or optimizer == "adamw_8bit":
        raise GpuscoutError(
            "Trace mode cannot run QLoRA/8-bit optimizers on this machine.",
            "bitsandbytes kernels (4-bit weights, 8-bit optimizer states) need CUDA, and fake tensors cannot run them.",
            "use the analytic estimate (drop --trace), or trace with method='lora' / "
            "optimizer='adamw' and apply the analytic byte difference.",
        )


def _import_torch_stack(*, peft_needed: bool) -> Any:
    """Import torch (returned), transformers and, for LoRA, peft; explain what is missing."""
    return import_trace_stack("torch", "transformers", *(["peft"] if peft_needed else []))


# --- building the job ----------------------------------------------------------------------------


def _build_model(hf_config: dict[str, Any], attention: str, num_layers: int | None, dtype: Any) -> Any:
    """Build the causal LM from a config dict on the meta device (no weights; nothing is downloaded).

    The model is built and adapted (PEFT) on meta, then made fake by `_materialize_fake` (peft's
    adapter placement via `Module.to()` fails under FakeTensorMode). The dtype is passed at build
    time because `from_config` would otherwise use the config's own `torch_dtype`.
    """
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config_kwargs = dict(hf_config)
    model_type = config_kwargs.pop("model_type", None)
    if not model_type:
        raise SpecError(
            "The model config has no 'model_type'.",
            "transformers needs it to pick the model class (e.g. 'llama', 'qwen2').",
            "pass the model's config.json contents, which include 'model_type'.",
        )
    try:
        config = AutoConfig.for_model(model_type, **config_kwargs)
    except (ValueError, KeyError) as exc:
        raise SpecError(
            f"transformers cannot build a config for model_type '{model_type}'.",
            str(exc),
            "check the model_type, or upgrade transformers if the architecture is new.",
        ) from exc
    if num_layers is not None:
        _slice_depth(config, num_layers)
    # transformers 4.56 renamed `torch_dtype` to `dtype`.
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    auto_model: Any = AutoModelForCausalLM  # typed in some transformers releases, untyped in others
    try:
        with torch.device("meta"):
            return auto_model.from_config(config, attn_implementation=attention, **{dtype_key: dtype})
    except ValueError as exc:
        if "attention implementation" not in str(exc):
            raise
        raise SpecError(
            f"transformers has no '{attention}' attention for model_type '{model_type}'.",
            str(exc).split(". ")[0] + ".",
            'Set attention = "eager" in the job spec to trace this model.',
        ) from None


def _slice_depth(config: Any, num_layers: int) -> None:
    """Keep the first `num_layers` decoder layers (depth slicing)."""
    _require_positive(num_layers=num_layers)
    config.num_hidden_layers = num_layers
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list):
        config.layer_types = layer_types[:num_layers]


def _enable_checkpointing(model: Any) -> None:
    """HF per-decoder-layer activation checkpointing, non-reentrant (no input-grad hack needed)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _apply_lora(model: Any, rank: int, alpha: int, targets: tuple[str, ...]) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), task_type="CAUSAL_LM")
    try:
        with warnings.catch_warnings():
            # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing` property.
            warnings.filterwarnings(
                "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
            )
            return get_peft_model(model, config)
    except ValueError as exc:
        raise SpecError(
            "peft could not attach LoRA adapters to this model.",
            str(exc),
            "set lora_target_modules to module names that exist in the model (e.g. q_proj, v_proj).",
        ) from exc


def _build_optimizer(name: str, params: list[Any]) -> Any:
    """The optimizer the HF Trainer would use for `name`."""
    import torch

    match name:
        case "adamw":
            # `adamw_torch_fused`, the HF Trainer's default optimizer with torch >= 2.8.
            return torch.optim.AdamW(params, lr=1e-5, fused=True)
        case "sgd":
            # SGD with momentum: one state per parameter (job specs name "SGD with momentum").
            return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        case "adafactor":
            # transformers' Adafactor (the HF Trainer's `optim="adafactor"`); torch.optim.Adafactor
            # calls `.item()` on the parameter norm, which fake tensors cannot answer.
            from transformers.optimization import Adafactor

            adafactor: Any = Adafactor
            return adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)
    raise SpecError(
        f"Unknown optimizer '{name}'.",
        "trace mode supports adamw, sgd and adafactor.",
        "pick one of those.",
    )


def _autocast(precision: str) -> AbstractContextManager[Any]:
    import torch

    match precision:
        case "bf16_mixed":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        case "fp16_mixed":
            return torch.autocast("cpu", dtype=torch.float16)
    return nullcontext()


def _base_dtype(torch: Any, precision: str, method: str) -> Any:
    """Parameter dtype of the model as built.

    Full fine-tuning under a mixed recipe keeps fp32 parameters (AMP). LoRA users load the frozen
    base in 16-bit (`torch_dtype=bfloat16`) and peft upcasts only the adapters to fp32
    (`autocast_adapter_dtype=True`), which is what the analytic estimate assumes too.
    """
    sixteen = {"bf16": torch.bfloat16, "bf16_mixed": torch.bfloat16, "fp16_mixed": torch.float16}
    if precision == "bf16" or (method == "lora" and precision in sixteen):
        return sixteen[precision]
    return torch.float32


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


def _next_token(model: Any, ids: Any, cache: Any) -> Any:
    """One forward into the cache, keeping only the last position's logits; returns the next ids."""
    params = inspect.signature(model.forward).parameters
    # transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40).
    cache_key = "cache" if "cache" in params else "past_key_values"
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    logits = model(input_ids=ids, use_cache=True, **{cache_key: cache}, **keep).logits
    return logits[:, -1:].argmax(dim=-1)


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
