"""The shape of a model: every number the estimators need, and nothing that needs torch.

A `ModelShape` is built from a Hugging Face `config.json` (`workload.hf_config`), a preset
(`workload.presets`) or a safetensors checkpoint (`workload.checkpoint` adds exact weight bytes).
Parameters are listed as groups of linear layers plus the non-linear rest, so that LoRA targets,
4-bit quantization (linears only) and MoE active counts can all be derived from the same data.
"""

from __future__ import annotations

from typing import Literal

from gpuscout.frozen import Frozen

# Bytes per element of the storage dtypes gpuscout names. Sub-byte formats are fractional.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nf4": 0.5,
}


class LinearGroup(Frozen):
    """Identical linear layers: `count` instances in the model, `active_count` used per token.

    `name` is the module's leaf name in the `transformers` implementation (q_proj, gate_proj,
    c_attn, experts.down_proj …) so that LoRA `target_modules` can match it.
    """

    name: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    active_count: int
    expert: bool = False  # a routed MoE expert (resident for memory, top-k for compute)

    @property
    def params_each(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


class AttentionLayout(Frozen):
    """`count` decoder layers whose KV cache has the same layout.

    kind:
      full    — K and V for every token: 2 · n_kv · head_dim values per token.
      sliding — as full, but only the last `window` tokens are kept.
      mla     — DeepSeek multi-head latent attention: one latent of kv_lora_rank + rope dims.
    """

    kind: Literal["full", "sliding", "mla"]
    count: int
    kv_values_per_token: int
    window: int | None = None


class CheckpointTensorGroup(Frozen):
    """Tensors of one dtype in a checkpoint, read from the safetensors headers."""

    dtype: str  # safetensors dtype string: BF16, F16, F32, F8_E4M3, U8, I32 …
    tensors: int
    elements: int
    bytes: int


class CheckpointWeights(Frozen):
    """Exact weight bytes of a checkpoint directory, from the file headers (no tensor data read)."""

    path: str
    files: int
    total_bytes: int
    by_dtype: tuple[CheckpointTensorGroup, ...]
    quantization: str | None = None  # e.g. "bitsandbytes-4bit", "gptq", "fp8" from config / tensor names


class ModelShape(Frozen):
    """A decoder-only language model, as the estimators see it."""

    name: str
    family: str  # the config's model_type: llama, qwen3_moe, deepseek_v3 …
    source: str  # preset id, config path, or checkpoint directory
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    gated_mlp: bool  # SwiGLU/GeGLU (3 matrices) vs plain 2-matrix MLP
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    linears: tuple[LinearGroup, ...]
    embedding_params: int  # token (and position) embeddings
    lm_head_params: int  # 0 when tied to the embeddings
    norm_params: int
    other_params: int = 0  # routers and anything that is neither linear, norm nor embedding
    attention: tuple[AttentionLayout, ...]
    params_total: int
    params_active: int
    checkpoint: CheckpointWeights | None = None
    # Training-time traits that change activation memory (not parameter counts).
    hidden_act: str = "silu"
    dropout: float = 0.0  # largest residual/attention dropout probability active in training
    norms_per_layer: int = 2  # Gemma 2/3 add post-attention and post-feedforward norms: 4
    attn_logit_softcapping: bool = False  # Gemma 2: tanh on attention scores (eager only)
