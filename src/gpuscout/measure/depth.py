"""Depth slicing: extrapolating a step measured on K built decoder layers to all L layers.

Training FLOPs per micro-batch come from `workload.flops.training_flops`, the function gpuscout's
speed model uses too.

Depth slicing builds K of the model's L decoder layers. Everything per layer scales by L/K, the
rest (embeddings, final norm, LM head) does not:

    time    t_full = t_K · ((1 − f) + f · L/K), f = the per-layer share of the step's work:
            training and prefill — the FLOPs share of the layers; decode — the share of weight bytes
            read per token in the layers (decode is memory-bound: Σ linears / (Σ linears + h·V))
    memory  M_full = S_rest + (S_layers + D) · L/K, with S the exact bytes of parameters, gradients
            and optimizer states (counted on the built model, split by parameter name) and
            D = max(M_K − S_layers − S_rest, 0) the dynamic part (activations, KV cache, buffers).
            D is scaled whole, so logits and loss buffers, which do not grow with depth, are
            over-counted: the extrapolated peak is an upper bound.
"""

from __future__ import annotations

import re
from typing import Any

from gpuscout.measure.peak_memory import PeakMemoryMonitor
from gpuscout.workload.flops import attention_forward_flops
from gpuscout.workload.shape import ModelShape

# Parameter names inside decoder layer N: model.layers.N. (Llama, Qwen, Mistral …), transformer.h.N. (GPT-2, Falcon).
LAYER_PARAM = re.compile(r"(^|\.)(layers|h|blocks)\.\d+\.")


def prefill_layer_fraction(shape: ModelShape, batch: int, prompt_tokens: int, *, eager: bool) -> float:
    """FLOPs share of the layers in a prefill that computes logits for the last position only."""
    layers = 2.0 * batch * prompt_tokens * sum(g.active_count * g.params_each for g in shape.linears)
    layers += attention_forward_flops(shape, batch, prompt_tokens, eager=eager)
    head = 2.0 * batch * shape.hidden_size * shape.vocab_size
    return layers / (layers + head)


def decode_layer_fraction(shape: ModelShape) -> float:
    """Weight-byte share of the layers in one decode step (active linears vs the LM head)."""
    layers = float(sum(g.active_count * g.params_each for g in shape.linears))
    return layers / (layers + shape.hidden_size * shape.vocab_size)


def scale_time(seconds: float, layer_fraction: float, built: int, full: int) -> float:
    """t_full = t_K · ((1 − f) + f · L/K)."""
    return seconds * ((1 - layer_fraction) + layer_fraction * full / built)


def scale_memory(measured: int, static_layers: int, static_rest: int, built: int, full: int) -> int:
    """M_full = S_rest + (S_layers + D) · L/K, D = max(M_K − S_layers − S_rest, 0)."""
    dynamic = max(measured - static_layers - static_rest, 0)
    return int(static_rest + (static_layers + dynamic) * full / built)


def static_bytes(model: Any, optimizer: Any | None) -> tuple[int, int]:
    """(bytes in decoder layers, bytes elsewhere) of parameters, their gradients (trainable ones,
    same dtype) and optimizer states, counted tensor by tensor on the built model."""
    layers = rest = 0
    states = getattr(optimizer, "state", {}) if optimizer is not None else {}
    for name, param in model.named_parameters():
        size = param.numel() * param.element_size()
        if param.requires_grad:
            size *= 2
            for value in states.get(param, {}).values():
                if hasattr(value, "element_size"):
                    size += value.numel() * value.element_size()
        if LAYER_PARAM.search(name):
            layers += size
        else:
            rest += size
    return layers, rest


def memory_full_depth(monitor: PeakMemoryMonitor, static_layers: int, static_rest: int, built: int, full: int,
                 notes: list[str]) -> int | None:
    peak = monitor.result()
    if peak.torch_allocated_bytes is not None:
        measured, view = peak.torch_allocated_bytes, "torch peak allocated"
    elif peak.process_rss_bytes is not None and monitor.baseline_rss_bytes is not None:
        measured, view = peak.process_rss_bytes - monitor.baseline_rss_bytes, "peak RSS growth after imports"
    else:
        return None
    full_bytes = scale_memory(measured, static_layers, static_rest, built, full)
    notes.append(f"extrapolated memory from {view}: M_full = S_rest + (S_layers + D) · {full}/{built} with "
                 f"S_layers = {static_layers:,} B, S_rest = {static_rest:,} B (parameters, gradients, optimizer "
                 "states), D = the rest of the measured peak; an upper bound (logits are scaled too)")
    return full_bytes
