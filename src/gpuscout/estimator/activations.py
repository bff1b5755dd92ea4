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
# Families whose attention applies an RMSNorm to Q and K per head (Qwen3, Gemma 3).
QK_NORM_FAMILIES = frozenset({"qwen3", "qwen3_moe", "gemma3_text"})
# Activations transformers writes as several Python ops rather than one kernel.
COMPOSED_ACTIVATIONS = frozenset({"gelu_new", "gelu_fast"})


def norm_bytes(shape: ModelShape, act_bytes: int) -> int:
    """Bytes a norm keeps per token, beyond its output (which the next linear keeps).

    LayerNorm (GPT-2) keeps its input. transformers' RMSNorm upcasts to fp32 and keeps that copy
    (4 B) and the normalized tensor its weight multiplies (fp32 under AMP, where the residual
    stream is fp32; 16-bit otherwise, plus the 16-bit input). FakeTensor traces of Llama steps
    measure 8 B per hidden unit in every recipe (fp32, bf16 and bf16 mixed).
    """
    if shape.family == "gpt2":
        return act_bytes * shape.hidden_size
    return 2 * FP32 * shape.hidden_size


def attention_bytes(shape: ModelShape, act_bytes: int, seq_len: int, eager: bool, tp: int) -> float:
    """Attention block per token: norm, QKV input, Q, K, V, core, output-projection input."""
    q_dim = shape.num_attention_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    heads = shape.num_attention_heads
    replicated: float = norm_bytes(shape, act_bytes) + act_bytes * shape.hidden_size
    if shape.family in QK_NORM_FAMILIES:
        # Per-head RMSNorm on Q and K keeps the same 8 B per unit as any RMSNorm.
        replicated += 2 * FP32 * (q_dim + kv_dim) / tp
    if eager:
        # Eager repeats K/V to all heads, keeps the fp32 softmax output and its 16-bit cast,
        # plus Gemma 2's tanh soft-capped scores and a dropout mask and output when dropout is on.
        per_score = FP32 + act_bytes
        per_score += act_bytes if shape.attn_logit_softcapping else 0
        per_score += 1 + act_bytes if shape.dropout > 0 else 0
        split = act_bytes * 3 * q_dim + per_score * heads * seq_len
    else:
        # Flash/SDPA keep Q, K, V, the output and an fp32 log-sum-exp per head.
        split = act_bytes * (q_dim + 2 * kv_dim + q_dim) + FP32 * heads
    return replicated + (split + act_bytes * q_dim) / tp


def mlp_bytes(shape: ModelShape, act_bytes: int, width: int, tp: int) -> float:
    """MLP per token: gated keeps gate, act, up and product (4f); plain keeps fc out and act (2f).

    GELU written out in Python ops (transformers' gelu_new / gelu_fast: 0.5·x·(1 + tanh(…)))
    keeps about three more f-wide tensors than a fused activation (measured with traces).
    """
    kept = 4 * width if shape.gated_mlp else 2 * width
    if shape.hidden_act in COMPOSED_ACTIVATIONS:
        kept += 3 * width
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
    extra_norms = (shape.norms_per_layer - 2) * norm_bytes(shape, act_bytes)
    # Korthikanti's 1-byte dropout masks after attention and after the MLP (when dropout is on).
    masks = 2 * shape.hidden_size if shape.dropout > 0 else 0
    return attention + extra_norms + masks + (dense_layers * dense + moe_layers * moe) / shape.num_layers


def selective_saved_bytes(shape: ModelShape, act_bytes: int, tp: int) -> float:
    """Per token per layer, what selective activation checkpointing saves beyond the layer's input.

    PyTorch's SAC policy (torch.utils.checkpoint.create_selective_checkpoint_contexts; torchtitan's
    op-level policy) saves the outputs of matmuls and the attention kernel and recomputes the pointwise
    ops around them: the Q, K, V and output projections' outputs, the attention output and its fp32
    log-sum-exp, and the MLP's gate and up (or fc) and down outputs, each visited expert's for MoE
    (docs/estimator.md §2.14; FakeTensor traces agree within 1.2%).
    """
    q_dim = shape.num_attention_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    attention = (act_bytes * (q_dim + 2 * kv_dim + q_dim) + FP32 * shape.num_attention_heads) / tp \
        + act_bytes * shape.hidden_size
    up = 2 if shape.gated_mlp else 1
    dense = act_bytes * (up * shape.intermediate_size / tp + shape.hidden_size)
    moe_layers = moe_layer_count(shape)
    moe = (shape.experts_per_token * act_bytes * (up * shape.moe_intermediate_size / tp + shape.hidden_size)
           + FP32 * shape.num_experts) if moe_layers else 0.0
    mlp = ((shape.num_layers - moe_layers) * dense + moe_layers * moe) / max(shape.num_layers, 1)
    return attention + mlp


def amp_extra_bytes(shape: ModelShape) -> float:
    """Extra bytes per token per layer when fp32 parameters run under autocast (full-FT AMP).

    The residual stream stays fp32 (embedding and norm weights are fp32), so norms, residual
    adds and several casts keep fp32 tensors where a pure-16-bit run keeps 16-bit ones. Fitted,
    not derived: FakeTensor traces of Llama layers (torch 2.13, transformers 5) measure 11 B per
    hidden unit + 1.5 B per FFN unit + 1 B per KV unit above the pure-bf16 run.
    """
    kv_dim = shape.num_kv_heads * shape.head_dim
    return 11 * shape.hidden_size + 1.5 * shape.intermediate_size + kv_dim


def logits_bytes_per_token(shape: ModelShape, tp: int) -> float:
    """Logits memory at the start of the loss backward, per token: 12 B per vocabulary entry.

    transformers' ForCausalLMLoss upcasts logits to fp32 and cross-entropy keeps its fp32
    log-softmax output (4 B); the loss backward then materializes two fp32 gradients of the same
    size (8 B) while every other activation is still alive. Measured with FakeTensor traces of
    real steps (tests/measure/test_oracle.py): 4.1 B/element in activations plus 8.0 B in
    temporaries at the peak. At V = 128k and s = 8k this alone is many GB (torchtune PR #1046
    measured logits at 6% of peak at V = 32k).
    """
    return 12 * shape.vocab_size / tp


def layer_matmul_widths(shape: ModelShape, adapted: dict[str, int] | None = None) -> list[tuple[float, bool]]:
    """The matmuls of one dense decoder layer in the order its forward runs them: (output width per token,
    split by tensor parallelism). Attention's q, k, v, o, then the MLP's gate, up, down (fc1, fc2 for a
    plain MLP): transformers' and torchtitan's Llama-style forwards call them in this order.

    `adapted` maps a linear's leaf name to the LoRA rank on it: peft's LoRA layer runs the base matmul,
    then x·A (rank wide), then (x·A)·B (as wide as the base output), so each adds two matmuls after it.
    """
    q_dim = shape.num_attention_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    f, h = shape.intermediate_size, shape.hidden_size
    mlp = [("gate_proj", f, True), ("up_proj", f, True), ("down_proj", h, False)] if shape.gated_mlp \
        else [("fc1", f, True), ("fc2", h, False)]
    base = [("q_proj", q_dim, True), ("k_proj", kv_dim, True), ("v_proj", kv_dim, True), ("o_proj", h, False), *mlp]
    widths: list[tuple[float, bool]] = []
    for name, width, split in base:
        widths.append((width, split))
        rank = (adapted or {}).get(name)
        if rank:
            widths += [(rank, False), (width, split)]
    return widths


def op_level_saved_bytes(shape: ModelShape, act_bytes: int, tp: int, adapted: dict[str, int] | None = None) -> float:
    """Per token per layer, what torchtitan's op-level selective checkpointing saves beyond the layer input.

    torchtitan (models/llama3/infra/parallelize.py, `_apply_ac_to_transformer_block` with
    selective_ac_option = "op"; torchtune copies it in training/_activation_checkpointing.py) saves the
    outputs of the ops in `_save_list` (aten.mm, the flash and memory-efficient SDPA kernels, max, and
    reduce_scatter under TP) "except every second mm": a counter, new for every checkpointed call of a
    block (`selective_checkpointing_context_fn` builds `meta = defaultdict(int)` each time), counts the
    block's mm calls and saves the 1st, 3rd, 5th, …. For a Llama layer without LoRA that is q, v, gate
    and down; k, o and up are recomputed. MoE layers (router and per-expert matmuls, grouped kernels not
    in the list) are counted as saving every matmul, as `selective_saved_bytes` does: an upper bound.
    """
    if moe_layer_count(shape):
        return selective_saved_bytes(shape, act_bytes, tp)
    heads = shape.num_attention_heads
    q_dim = heads * shape.head_dim
    attention = (act_bytes * q_dim + FP32 * heads) / tp  # SDPA output and its fp32 log-sum-exp
    saved = sum(width / (tp if split else 1)
                for i, (width, split) in enumerate(layer_matmul_widths(shape, adapted), start=1) if i % 2 == 1)
    return attention + act_bytes * saved
