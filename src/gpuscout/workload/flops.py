"""FLOP counts that follow from a model's shape alone, shared by the speed model and the benches."""

from __future__ import annotations

from gpuscout.workload.shape import ModelShape


def attention_forward_flops(shape: ModelShape, batch: int, seq: int, *, eager: bool) -> float:
    """Σ layers 4·b·s·keys·(a·d): scores and weighted values (llm-analysis, LLM-Viewer).

    Causal Flash/SDPA kernels skip blocks above the diagonal, so a query sees s/2 keys on average;
    eager attention computes the full s × s scores and masks afterwards. A sliding window of w
    caps the keys at w (eager still computes all of them).
    """
    width = shape.num_attention_heads * shape.head_dim
    total = 0.0
    for layout in shape.attention:
        keys = float(seq)
        if not eager:
            keys = min(seq / 2, float(layout.window)) if layout.kind == "sliding" and layout.window else seq / 2
        total += layout.count * 4.0 * batch * seq * keys * width
    return total
