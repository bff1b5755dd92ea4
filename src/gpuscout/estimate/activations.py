"""Activation bytes saved for backward, per token, from the model's shape.

Korthikanti et al. 2022 (arXiv 2205.05198, §4) count the tensors each op keeps for its backward:
34·s·b·h + 5·a·s²·b bytes per layer for GPT-3 (f = 4h, GELU, dropout). gpuscout keeps their
per-tensor decomposition but generalizes it to the models people fine-tune today:

* no dropout (Llama-style fine-tunes disable it), so no mask bytes;
* GQA: K and V are n_kv·d wide, not h;
* gated MLPs (SwiGLU/GeGLU): gate, activation, up and product outputs are all kept (4f), and
  MoE layers keep them for each of the top-k experts a token visits;
* FlashAttention / SDPA keep the output and the per-head log-sum-exp instead of the a·s² scores;
* Hugging Face RMSNorm upcasts to fp32 and keeps that copy (transformers' LlamaRMSNorm).

The result is per layer and per token; callers multiply by tokens and layers.
"""

from __future__ import annotations

from gpuscout.workload.shape import ModelShape

FP32 = 4


def norm_bytes(shape: ModelShape, act_bytes: int) -> int:
    """A norm keeps its input; HF RMSNorm also keeps the fp32 upcast when activations are 16-bit."""
    upcast = FP32 if act_bytes < FP32 and shape.family != "gpt2" else 0
    return (act_bytes + upcast) * shape.hidden_size


def attention_bytes(shape: ModelShape, act_bytes: int, seq_len: int, eager: bool, tp: int) -> float:
    """Attention block per token: norm, QKV input, Q, K, V, core, output-projection input."""
    q_dim = shape.num_attention_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    heads = shape.num_attention_heads
    replicated = norm_bytes(shape, act_bytes) + act_bytes * shape.hidden_size
    if eager:
        # Eager repeats K/V to all heads, keeps the fp32 softmax output and its 16-bit cast.
        split = act_bytes * 3 * q_dim + (FP32 + act_bytes) * heads * seq_len
    else:
        # Flash/SDPA keep Q, K, V, the output and an fp32 log-sum-exp per head.
        split = act_bytes * (q_dim + 2 * kv_dim + q_dim) + FP32 * heads
    return replicated + (split + act_bytes * q_dim) / tp


def mlp_bytes(shape: ModelShape, act_bytes: int, width: int, tp: int) -> float:
    """MLP per token: gated keeps gate, act, up and product (4f); plain keeps fc out and act (2f)."""
    kept = 4 * width if shape.gated_mlp else 2 * width
    return norm_bytes(shape, act_bytes) + act_bytes * shape.hidden_size + act_bytes * kept / tp


def moe_layer_count(shape: ModelShape) -> int:
    """Layers with routed experts, from the resident expert parameters (names differ by family)."""
    if not shape.num_experts or not shape.moe_intermediate_size:
        return 0
    expert_params = sum(g.count * g.params_each for g in shape.linears if g.expert)
    per_expert = (3 if shape.gated_mlp else 2) * shape.hidden_size * shape.moe_intermediate_size
    return round(expert_params / (shape.num_experts * per_expert))


def shared_expert_width(shape: ModelShape, moe_layers: int) -> int:
    """Width of always-on shared experts per MoE layer (DeepSeek, Qwen-MoE), 0 if none."""
    shared = sum(g.count * g.params_each for g in shape.linears if "shared" in g.name)
    if not moe_layers or not shared:
        return 0
    return round(shared / (moe_layers * (3 if shape.gated_mlp else 2) * shape.hidden_size))


def moe_mlp_bytes(shape: ModelShape, act_bytes: int, tp: int, moe_layers: int) -> float:
    """An MoE layer: fp32 router logits, then each of the top-k experts' MLP activations."""
    router = FP32 * shape.num_experts
    experts = shape.experts_per_token * mlp_bytes(shape, act_bytes, shape.moe_intermediate_size, tp)
    shared_width = shared_expert_width(shape, moe_layers)
    shared = act_bytes * 4 * shared_width / tp if shared_width else 0.0
    return router + experts + shared


def layer_activation_bytes_per_token(
    shape: ModelShape, act_bytes: int, seq_len: int, eager: bool, tp: int
) -> float:
    """Average bytes per token per decoder layer, dense and MoE layers weighted by their counts."""
    attention = attention_bytes(shape, act_bytes, seq_len, eager, tp)
    moe_layers = moe_layer_count(shape)
    dense_layers = shape.num_layers - moe_layers
    dense = mlp_bytes(shape, act_bytes, shape.intermediate_size, tp)
    moe = moe_mlp_bytes(shape, act_bytes, tp, moe_layers) if moe_layers else 0.0
    return attention + (dense_layers * dense + moe_layers * moe) / shape.num_layers


def logits_bytes_per_token(shape: ModelShape, act_bytes: int, tp: int) -> float:
    """LM head output, its fp32 upcast for the loss, and the fp32 log-softmax kept for backward.

    transformers' ForCausalLMLoss upcasts logits to fp32 before cross-entropy; at V = 128k and
    s = 8k these alone are many GB (torchtune PR #1046 measured logits at 6% of peak at V = 32k).
    """
    return (act_bytes + FP32 + FP32) * shape.vocab_size / tp

