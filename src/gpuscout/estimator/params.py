"""Parameter arithmetic on a `ModelShape`: which parameters are linear, trainable, quantizable."""

from __future__ import annotations

from collections.abc import Iterable

from gpuscout.errors import SpecError
from gpuscout.workload.job import Lora
from gpuscout.workload.shape import LinearGroup, ModelShape


def linear_params(shape: ModelShape) -> int:
    """Resident parameters inside linear layers: what weight quantization (NF4, int4, fp8) shrinks."""
    return sum(g.count * g.params_each for g in shape.linears)


def nonlinear_params(shape: ModelShape) -> int:
    """Embeddings, LM head, norms and routers: kept in 16-bit by bitsandbytes and most quantizers."""
    return shape.params_total - linear_params(shape)


def largest_linear_params(shape: ModelShape) -> int:
    return max((g.params_each for g in shape.linears), default=0)


def layer_params(shape: ModelShape) -> int:
    """Parameters of one decoder layer on average (for FSDP/ZeRO-3 all-gather buffers)."""
    return linear_params(shape) // max(shape.num_layers, 1) + shape.norm_params // max(shape.num_layers, 1)


def lora_targets(shape: ModelShape, lora: Lora) -> tuple[LinearGroup, ...]:
    """The linear groups LoRA adapts. "all-linear" follows peft: every linear except the LM head.

    Routed experts stored as fused 3-D parameters (transformers ≥ 5) are not `nn.Linear`, so
    "all-linear" skips them, as peft does; naming them explicitly adapts them.
    """
    if lora.target_modules == "all-linear":
        return tuple(g for g in shape.linears if not g.expert)
    wanted = set(lora.target_modules)
    chosen = tuple(g for g in shape.linears if _leaf(g.name) in wanted or g.name in wanted)
    if not chosen:
        raise SpecError(
            f"None of the LoRA target_modules {sorted(wanted)} exists in {shape.name}.",
            f"The model's linear layers are named: {', '.join(sorted({_leaf(g.name) for g in shape.linears}))}.",
            'Use some of those names, or target_modules = "all-linear".',
        )
    return chosen


def lora_params(shape: ModelShape, lora: Lora) -> int:
    """Adapter parameters: rank · (d_in + d_out) per adapted linear (A is r×d_in, B is d_out×r)."""
    return sum(g.count * lora.rank * (g.in_features + g.out_features) for g in lora_targets(shape, lora))


def factored_state_elements(groups: Iterable[LinearGroup]) -> int:
    """Adafactor keeps row and column statistics per matrix: d_in + d_out values, not d_in · d_out."""
    return sum(g.count * (g.in_features + g.out_features) for g in groups)


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]
