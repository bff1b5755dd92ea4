"""Which linear layers LoRA adapts: one definition for the estimator, the trace and the bench."""

from __future__ import annotations

from gpuscout.errors import SpecError
from gpuscout.workload.job import Lora
from gpuscout.workload.shape import LinearGroup, ModelShape


def lora_targets(shape: ModelShape, lora: Lora) -> tuple[LinearGroup, ...]:
    """The linear groups LoRA adapts. "all-linear" follows peft: every linear except the LM head.

    Routed experts stored as fused 3-D parameters (transformers ≥ 5) are not `nn.Linear`, so
    "all-linear" skips them, as peft does; naming them explicitly adapts them.
    """
    if lora.target_modules == "all-linear":
        return tuple(g for g in shape.linears if not g.expert)
    wanted = set(lora.target_modules)
    chosen = tuple(g for g in shape.linears if leaf_name(g.name) in wanted or g.name in wanted)
    if not chosen:
        raise SpecError(
            f"None of the LoRA target_modules {sorted(wanted)} exists in {shape.name}.",
            f"The model's linear layers are named: {', '.join(sorted({leaf_name(g.name) for g in shape.linears}))}.",
            'Use some of those names, or target_modules = "all-linear".',
        )
    return chosen


def lora_target_names(shape: ModelShape, lora: Lora) -> tuple[str, ...]:
    """The leaf module names of `lora_targets`, as peft's `target_modules` takes them ("lm_head" added
    with `lora.output_head`: peft adapts a module named in target_modules even when it is the head)."""
    names = {leaf_name(g.name) for g in lora_targets(shape, lora)} | ({"lm_head"} if lora.output_head else set())
    return tuple(sorted(names))


def lora_adapter_params(shape: ModelShape, lora: Lora, *, active: bool = False) -> int:
    """Adapter parameters: rank · (d_in + d_out) per adapted linear (A is r×d_in, B is d_out×r).

    `active=True` counts what one token passes through: routed-expert adapters only for its top-k.
    With `lora.output_head`, the LM head's adapter (h → V) is counted too.
    """
    return sum((g.active_count if active else g.count) * lora.rank * (g.in_features + g.out_features)
               for g in lora_targets(shape, lora)) + head_adapter_params(shape, lora)


def head_adapter_params(shape: ModelShape, lora: Lora) -> int:
    """The output head's adapter with `lora.output_head`: A is r×h, B is V×r (peft on lm_head, torchtune
    apply_lora_to_output, litgpt lora_head). Tied embeddings share the weight, not the adapter."""
    return lora.rank * (shape.hidden_size + shape.vocab_size) if lora.output_head else 0


def leaf_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]
