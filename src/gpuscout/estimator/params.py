"""Parameter arithmetic on a `ModelShape`: which parameters are linear, trainable, quantizable."""

from __future__ import annotations

from collections.abc import Iterable

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


def factored_state_elements(groups: Iterable[LinearGroup]) -> int:
    """Adafactor keeps row and column statistics per matrix: d_in + d_out values, not d_in · d_out."""
    return sum(g.count * (g.in_features + g.out_features) for g in groups)
