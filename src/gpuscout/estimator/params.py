"""Parameter arithmetic on a `ModelShape`: which parameters are linear, trainable, quantizable."""

from __future__ import annotations

from collections.abc import Iterable

from gpuscout.errors import SpecError
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


# Modules no weight quantizer converts: bitsandbytes (transformers' `get_keys_to_not_convert`) keeps
# the output head out, and embeddings are nn.Embedding, never a quantized linear. Naming them in
# `unquantized_modules` is allowed and changes nothing: `nonlinear_params` already counts them 16-bit.
ALWAYS_UNQUANTIZED = frozenset({"lm_head", "embed_tokens", "wte", "embed_out", "output", "score"})


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _instances_named(group: LinearGroup, wanted: str) -> int:
    """How many of `group`'s linears the skip entry `wanted` names.

    transformers matches `llm_int8_skip_modules` / `modules_to_not_convert` against each module's
    full name (`should_convert_module` in integrations/bitsandbytes.py): a leaf name ("down_proj")
    names every instance; a dotted path with a layer index ("model.layers.0.mlp.down_proj") names one.
    """
    if wanted in (group.name, _leaf(group.name)):
        return group.count
    parts = wanted.split(".")
    if parts[-1] == _leaf(group.name) and any(p.isdigit() for p in parts):
        return 1
    return 0


def quantized_counts(shape: ModelShape, unquantized: Iterable[str]) -> tuple[tuple[LinearGroup, int], ...]:
    """Each linear group with how many of its instances a weight quantizer converts: the one home of
    "which linears are quantized", used by QLoRA training and quantized serving alike."""
    wanted = set(unquantized)
    return tuple((g, g.count - min(sum(_instances_named(g, w) for w in wanted), g.count)) for g in shape.linears)


def quantized_linear_params(shape: ModelShape, unquantized: Iterable[str] = ()) -> int:
    """Linear parameters a weight quantizer converts: every linear but the ones kept 16-bit."""
    return sum(n * g.params_each for g, n in quantized_counts(shape, unquantized))


def unquantized_linear_params(shape: ModelShape, unquantized: Iterable[str]) -> int:
    """Parameters of the linears `unquantized` keeps 16-bit."""
    return linear_params(shape) - quantized_linear_params(shape, unquantized)


def quantized_output_channels(shape: ModelShape, unquantized: Iterable[str] = ()) -> int:
    """Output channels of the quantized linears (per-channel scales)."""
    return sum(n * g.out_features for g, n in quantized_counts(shape, unquantized))


def unknown_skip_modules(shape: ModelShape, unquantized: Iterable[str]) -> tuple[str, ...]:
    """Skip names that match no linear of the model and are not always-16-bit modules (typos)."""
    return tuple(w for w in unquantized if _leaf(w) not in ALWAYS_UNQUANTIZED
                 and not any(_instances_named(g, w) for g in shape.linears))


def require_known_skip_modules(shape: ModelShape, unquantized: Iterable[str]) -> None:
    """A skip name that matches nothing is almost always a typo: say so rather than quantize it anyway."""
    unknown = unknown_skip_modules(shape, unquantized)
    if unknown:
        names = ", ".join(sorted({_leaf(g.name) for g in shape.linears}))
        raise SpecError(f"unquantized_modules names {', '.join(unknown)}, which {shape.name} does not have.",
                        f"The model's linear layers are named: {names} (and lm_head, always 16-bit).",
                        "Use some of those names (a leaf name keeps every layer's copy 16-bit), or drop the entry.")
