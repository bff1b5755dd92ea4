"""FLOPs of a measured step, and depth-slicing extrapolation from K built layers to all L.

FLOPs per micro-batch of T = b·s tokens — the same formulas as gpuscout's speed model
(`estimate/speed_train.py`; restated here because `measure` may not import `estimate`):

    linears    2 · T · Σ active linear params of the decoder layers   (Kaplan et al. 2020 §2.1)
    attention  Σ layers 4 · b · s · keys · (heads · head_dim); keys = s/2 for causal SDPA/Flash
               kernels that skip the masked half (sliding window: min(s/2, w)), s for eager
    LM head    2 · T · hidden · vocab
    full FT    3 × forward (backward = 2 × forward; ≈ 6·P·T, Narayanan et al. 2021)
    LoRA/QLoRA 2 × linears + 3 × attention + 2 × head + 3 × adapters (frozen weights get no weight
               gradient; adapters 2 · T · Σ r·(d_in + d_out))
    checkpointing  + one more forward of the layers (recompute; counted in hardware FLOPs, not in MFU)

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
from dataclasses import dataclass
from typing import Any

from gpuscout.workload.flops import attention_forward_flops
from gpuscout.workload.job import FinetuneJob, Lora
from gpuscout.workload.shape import ModelShape

# Parameter names inside decoder layer N: model.layers.N. (Llama, Qwen, Mistral …), transformer.h.N. (GPT-2, Falcon).
LAYER_PARAM = re.compile(r"(^|\.)(layers|h|blocks)\.\d+\.")


@dataclass(frozen=True)
class StepFlops:
    total: float  # what the device executes, recompute included (achieved TFLOP/s)
    useful: float  # without recompute (the numerator of MFU)
    layer_fraction: float  # share of `total` inside the decoder layers (for depth extrapolation)
    formula: str


def lora_target_names(shape: ModelShape, lora: Lora) -> tuple[str, ...]:
    """Leaf module names LoRA adapts; "all-linear" = every non-expert linear (peft's shorthand)."""
    if lora.target_modules == "all-linear":
        return tuple(sorted({_leaf(g.name) for g in shape.linears if not g.expert}))
    return tuple(lora.target_modules)


def training_step_flops(job: FinetuneJob, shape: ModelShape, *, eager: bool) -> StepFlops:
    tokens = job.micro_batch * job.seq_len
    linear = 2.0 * tokens * sum(g.active_count * g.params_each for g in shape.linears)
    attention = attention_forward_flops(shape, job.micro_batch, job.seq_len, eager=eager)
    head = 2.0 * tokens * shape.hidden_size * shape.vocab_size
    if job.method == "full":
        adapter, head_part = 0.0, 3 * head
        useful = 3 * (linear + attention + head)
        rule = "3 × (linears + attention + LM head)"
    else:
        wanted = set(lora_target_names(shape, job.lora))
        adapted = sum(g.active_count * job.lora.rank * (g.in_features + g.out_features)
                      for g in shape.linears if _leaf(g.name) in wanted or g.name in wanted)
        adapter, head_part = 2.0 * tokens * adapted, 2 * head
        useful = 2 * linear + 3 * attention + 2 * head + 3 * adapter
        rule = "2 × linears + 3 × attention + 2 × LM head + 3 × adapters"
    recompute = linear + attention + adapter if job.gradient_checkpointing else 0.0
    total = useful + recompute
    formula = (f"{rule}{' + recompute' if recompute else ''}; forward: linears 2·T·ΣP, attention "
               f"4·b·s·keys·a·d ({'s' if eager else 's/2'} keys), LM head 2·T·h·V (estimate/speed_train.py)")
    return StepFlops(total=total, useful=useful, layer_fraction=(total - head_part) / total, formula=formula)


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


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]
