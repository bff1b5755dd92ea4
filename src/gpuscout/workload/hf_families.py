"""One builder per model family: a Hugging Face `config.json` dict → the parts of a `ModelShape`.

Each builder mirrors the module structure of the `transformers` (v5) implementation of that family,
so that the linear groups carry the real module names (LoRA `target_modules` match them) and the
parameter count equals `sum(p.numel() for p in model.parameters())` of the real model — the tests
check this against models built on the meta device. Defaults for missing fields are the defaults of
the family's `transformers` config class (e.g. Gemma's head_dim 256, Mistral's window 4096).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscout.errors import SpecError
from gpuscout.userfile import shown
from gpuscout.workload.shape import AttentionLayout, LinearGroup

_MISSING: Any = object()

# Sane bounds for the numbers of a config.json (docs/design.md §4.10): far past any real model (the
# largest have ~160 layers, hidden 25,600, a 262,144-token vocabulary, 256 experts), yet small enough
# that no shape, estimate or layer list built from them can overflow or take long.
MAX_LAYERS = 10_000
MAX_WIDTH = 1_000_000  # hidden size, heads, intermediate sizes, head_dim, latent ranks
MAX_VOCAB = 10_000_000
MAX_POSITIONS = 1_000_000_000  # max_position_embeddings, sliding_window
MAX_EXPERTS = 100_000
_LIMITS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer"), (1, MAX_LAYERS)),
    **dict.fromkeys(("hidden_size", "n_embd", "num_attention_heads", "n_head", "num_key_value_heads",
                     "num_kv_heads"), (1, MAX_WIDTH)),
    "vocab_size": (1, MAX_VOCAB),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "sliding_window"), (0, MAX_POSITIONS)),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "n_shared_experts",
                     "num_experts_per_tok"), (0, MAX_EXPERTS)),
    **dict.fromkeys(("max_window_layers", "first_k_dense_replace", "decoder_sparse_step"), (0, MAX_LAYERS)),
    "sliding_window_pattern": (1, MAX_LAYERS),  # a divisor: `(i + 1) % pattern`
    "num_ln_in_parallel_attn": (0, 16),
}
_DEFAULT_LIMITS = (0, MAX_WIDTH)


@dataclass
class ShapeParts:
    """Everything a family builder knows; `hf_config.assemble_shape` adds the totals."""

    num_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    gated_mlp: bool
    linears: list[LinearGroup]
    embedding_params: int
    norm_params: int
    attention: list[AttentionLayout]
    other_params: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0


@dataclass(frozen=True)
class ConfigFields:
    """Typed, explained access to the fields of one config dict."""

    config: dict[str, Any]
    family: str

    def _bad(self, key: str, want: str) -> SpecError:
        got = shown(self.config[key]) if key in self.config else "<missing>"
        return SpecError(
            f"config.json field '{key}' is missing or invalid (got {got}).",
            f"The {self.family} shape builder needs '{key}' as {want}.",
            "Copy the field from the model's config.json on the Hugging Face Hub.",
        )

    def num(self, key: str, default: Any = _MISSING) -> int:
        """An integer field within its documented bounds (`_LIMITS`); JSON true/false is not an integer."""
        value = self.config.get(key)
        if value is None and default is not _MISSING:
            return int(default)
        low, high = _LIMITS.get(key, _DEFAULT_LIMITS)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self._bad(key, f"an integer from {low:,} to {high:,}")
        return value

    def opt_int(self, key: str) -> int | None:
        """An integer that may be absent or null (e.g. `q_lora_rank`, `sliding_window`)."""
        return None if self.config.get(key) is None else self.num(key)

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def layer_types(self, num_layers: int) -> list[str] | None:
        value = self.config.get("layer_types")
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != num_layers:
            raise self._bad("layer_types", f"a list of {num_layers} strings (one per layer)")
        if any(t not in ("full_attention", "sliding_attention") for t in value):
            raise self._bad("layer_types", "'full_attention' or 'sliding_attention' entries")
        return [str(t) for t in value]

    def int_list(self, key: str) -> list[int]:
        """A list of layer indices (e.g. `mlp_only_layers`)."""
        value = self.config.get(key) or []
        if (not isinstance(value, list) or len(value) > MAX_LAYERS
                or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_LAYERS for v in value)):
            raise self._bad(key, f"a list of at most {MAX_LAYERS:,} layer indices (integers from 0)")
        return [int(v) for v in value]


# --- shared pieces -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Dims:
    """The numbers every decoder-only family has."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    max_positions: int


def read_dims(f: ConfigFields, *, head_dim_default: int | None = None, max_pos_default: int = 0) -> Dims:
    """Explicit `head_dim` wins (Qwen3, Gemma, Llama 3.2); else the family default; else h / heads."""
    hidden, heads = f.num("hidden_size"), f.num("num_attention_heads")
    head_dim = f.opt_int("head_dim") or head_dim_default or hidden // heads
    kv_heads = f.num("num_key_value_heads", heads)  # no GQA field means plain multi-head attention
    check_heads(f, hidden, heads, kv_heads, head_dim, kv_key="num_key_value_heads")
    return Dims(
        hidden=hidden,
        layers=f.num("num_hidden_layers"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=f.num("vocab_size"),
        intermediate=f.num("intermediate_size", 0),
        max_positions=f.num("max_position_embeddings", max_pos_default),
    )


def check_heads(f: ConfigFields, hidden: int, heads: int, kv_heads: int, head_dim: int, *, kv_key: str) -> None:
    """Key/value heads are shared by groups of query heads, and every head needs at least one dimension."""
    if kv_heads < 1 or kv_heads > heads:
        raise f._bad(kv_key, f"an integer from 1 to the number of attention heads ({heads})")
    if head_dim < 1:
        raise SpecError(
            f"config.json gives {heads} attention heads for a hidden size of {hidden}: less than one dimension "
            "per head.",
            "Each head works on hidden_size / num_attention_heads dimensions (or head_dim when given).",
            "Check hidden_size and num_attention_heads against the model's config.json on the Hugging Face Hub.",
        )


def check_experts(f: ConfigFields, experts: int, top_k: int, *, experts_key: str) -> None:
    """A token is routed to top-k of the experts: 1 <= k <= experts (k = 0 only with no experts)."""
    if top_k > experts or (experts > 0 and top_k < 1):
        raise SpecError(
            f"config.json routes each token to num_experts_per_tok = {top_k} of {experts} experts "
            f"('{experts_key}').",
            "A mixture-of-experts layer picks at least one and at most all of its experts per token.",
            "Check num_experts_per_tok and the expert count against the model's config.json.",
        )


def linear(name: str, n_in: int, n_out: int, count: int, *, bias: bool = False) -> LinearGroup:
    return LinearGroup(name=name, in_features=n_in, out_features=n_out, bias=bias, count=count, active_count=count)


def qkvo(d: Dims, count: int, *, qkv_bias: bool, o_bias: bool) -> list[LinearGroup]:
    """Separate q/k/v/o projections, GQA-aware (k and v have n_kv heads)."""
    q_out, kv_out = d.heads * d.head_dim, d.kv_heads * d.head_dim
    return [
        linear("q_proj", d.hidden, q_out, count, bias=qkv_bias),
        linear("k_proj", d.hidden, kv_out, count, bias=qkv_bias),
        linear("v_proj", d.hidden, kv_out, count, bias=qkv_bias),
        linear("o_proj", q_out, d.hidden, count, bias=o_bias),
    ]


def gated_mlp(hidden: int, inter: int, count: int, *, bias: bool = False, prefix: str = "") -> list[LinearGroup]:
    """SwiGLU / GeGLU: gate and up (h → f), down (f → h)."""
    return [
        linear(f"{prefix}gate_proj", hidden, inter, count, bias=bias),
        linear(f"{prefix}up_proj", hidden, inter, count, bias=bias),
        linear(f"{prefix}down_proj", inter, hidden, count, bias=bias),
    ]


def routed_experts(hidden: int, inter: int, moe_layers: int, experts: int, top_k: int) -> list[LinearGroup]:
    """Routed MoE experts, one group per expert matrix.

    transformers 5 stores all experts of a layer as fused 3-D parameters `mlp.experts.gate_up_proj`
    (E, 2f, h) and `mlp.experts.down_proj` (E, h, f) instead of nn.Linear modules; PEFT targets them
    by these names (`target_parameters`). So the groups use those names, one instance per expert:
    `count` = resident experts, `active_count` = the top-k experts each token runs through.
    """
    resident, active = moe_layers * experts, moe_layers * top_k
    return [
        LinearGroup(
            name="experts.gate_up_proj", in_features=hidden, out_features=2 * inter, bias=False,
            count=resident, active_count=active, expert=True,
        ),
        LinearGroup(
            name="experts.down_proj", in_features=inter, out_features=hidden, bias=False,
            count=resident, active_count=active, expert=True,
        ),
    ]  # fmt: skip


def layouts(types: Sequence[str], kv_values: int, window: int | None) -> list[AttentionLayout]:
    """Group layers by KV layout; a 'sliding' layer without a window keeps every token."""
    sliding = sum(1 for t in types if t == "sliding_attention") if window else 0
    groups = [AttentionLayout(kind="full", count=len(types) - sliding, kv_values_per_token=kv_values)]
    if sliding:
        groups.append(AttentionLayout(kind="sliding", count=sliding, kv_values_per_token=kv_values, window=window))
    return [g for g in groups if g.count > 0]


def uniform_layouts(d: Dims, window: int | None) -> list[AttentionLayout]:
    """Every layer alike: sliding when a window is set (Mistral, Mixtral, Phi-3, Qwen3-MoE)."""
    kind = "sliding_attention" if window else "full_attention"
    return layouts([kind] * d.layers, 2 * d.kv_heads * d.head_dim, window)


@dataclass
class _LlamaLike:
    """Knobs that distinguish the llama-like families; the defaults are Llama's."""

    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norms_per_layer: int = 2  # input_layernorm, post_attention_layernorm
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    tie_default: bool = False
    attention: list[AttentionLayout] = field(default_factory=list)


def llama_like(d: Dims, f: ConfigFields, knobs: _LlamaLike) -> ShapeParts:
    """Embedding → L × (attention + gated MLP + RMSNorms) → final RMSNorm → lm_head."""
    per_layer_norm = knobs.norms_per_layer * d.hidden + (2 * d.head_dim if knobs.qk_norm else 0)
    return ShapeParts(
        num_layers=d.layers,
        hidden_size=d.hidden,
        vocab_size=d.vocab,
        num_attention_heads=d.heads,
        num_kv_heads=d.kv_heads,
        head_dim=d.head_dim,
        intermediate_size=d.intermediate,
        max_position_embeddings=d.max_positions,
        tie_word_embeddings=f.flag("tie_word_embeddings", knobs.tie_default),
        gated_mlp=True,
        linears=qkvo(d, d.layers, qkv_bias=knobs.qkv_bias, o_bias=knobs.o_bias)
        + gated_mlp(d.hidden, d.intermediate, d.layers, bias=knobs.mlp_bias),
        embedding_params=d.vocab * d.hidden,
        norm_params=d.layers * per_layer_norm + d.hidden,
        attention=knobs.attention or uniform_layouts(d, None),
    )


# --- families ----------------------------------------------------------------------------------


def build_llama(f: ConfigFields) -> ShapeParts:
    # Llama 1/2/3/3.1/3.2: rope_scaling changes positions, not parameters.
    bias = f.flag("attention_bias", False)
    knobs = _LlamaLike(qkv_bias=bias, o_bias=bias, mlp_bias=f.flag("mlp_bias", False))
    return llama_like(read_dims(f), f, knobs)


def build_mistral(f: ConfigFields) -> ShapeParts:
    d = read_dims(f)
    # MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it.
    window = f.opt_int("sliding_window") if "sliding_window" in f.config else 4096
    return llama_like(d, f, _LlamaLike(attention=uniform_layouts(d, window)))


def build_phi3(f: ConfigFields) -> ShapeParts:
    """Phi-3: fused `qkv_proj` and `gate_up_proj`; every layer uses `sliding_window` when set."""
    d = read_dims(f)
    parts = llama_like(d, f, _LlamaLike(attention=uniform_layouts(d, f.opt_int("sliding_window"))))
    qkv_out = (d.heads + 2 * d.kv_heads) * d.head_dim
    parts.linears = [
        linear("qkv_proj", d.hidden, qkv_out, d.layers),
        linear("o_proj", d.heads * d.head_dim, d.hidden, d.layers),
        linear("gate_up_proj", d.hidden, 2 * d.intermediate, d.layers),
        linear("down_proj", d.intermediate, d.hidden, d.layers),
    ]
    return parts


def _qwen_layer_types(f: ConfigFields, d: Dims) -> tuple[list[str], int | None]:
    """Qwen2/Qwen3: the window only applies when use_sliding_window, to layers ≥ max_window_layers."""
    window = f.num("sliding_window", 4096) if f.flag("use_sliding_window", False) else None
    types = f.layer_types(d.layers)
    if types is None:
        first = f.num("max_window_layers", 28)
        types = [
            "sliding_attention" if window is not None and i >= first else "full_attention" for i in range(d.layers)
        ]
    return types, window


def build_qwen2(f: ConfigFields) -> ShapeParts:
    d = read_dims(f)
    types, window = _qwen_layer_types(f, d)
    knobs = _LlamaLike(qkv_bias=True, attention=layouts(types, 2 * d.kv_heads * d.head_dim, window))
    return llama_like(d, f, knobs)


def build_qwen3(f: ConfigFields) -> ShapeParts:
    d = read_dims(f, head_dim_default=128)  # Qwen3Config.head_dim defaults to 128, not h / heads
    types, window = _qwen_layer_types(f, d)
    bias = f.flag("attention_bias", False)
    attention = layouts(types, 2 * d.kv_heads * d.head_dim, window)
    return llama_like(d, f, _LlamaLike(qkv_bias=bias, o_bias=bias, qk_norm=True, attention=attention))


def _gemma_layer_types(f: ConfigFields, d: Dims, pattern: int) -> list[str]:
    """Gemma 2 alternates sliding/full (pattern 2); Gemma 3 has 5 sliding then 1 full (pattern 6)."""
    types = f.layer_types(d.layers)
    if types is None:
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(d.layers)]
    return types


def build_gemma(f: ConfigFields, *, gemma3: bool) -> ShapeParts:
    """Gemma 2 / Gemma 3 text: 4 RMSNorms per layer (pre/post attention and feed-forward), tied."""
    d = read_dims(f, head_dim_default=256)
    pattern = f.num("sliding_window_pattern", 6) if gemma3 else 2
    window = f.opt_int("sliding_window") if "sliding_window" in f.config else 4096
    attention = layouts(_gemma_layer_types(f, d, pattern), 2 * d.kv_heads * d.head_dim, window)
    bias = f.flag("attention_bias", False)
    knobs = _LlamaLike(
        qkv_bias=bias, o_bias=bias, norms_per_layer=4, qk_norm=gemma3, tie_default=True, attention=attention
    )
    return llama_like(d, f, knobs)


def _moe_parts(f: ConfigFields, d: Dims, dense_layers: int, moe_width: int, knobs: _LlamaLike,
               experts_key: str = "num_experts") -> ShapeParts:
    """A llama-like decoder whose MLP is a routed MoE on all but `dense_layers` layers."""
    experts, top_k = f.num("num_experts"), f.num("num_experts_per_tok")
    check_experts(f, experts, top_k, experts_key=experts_key)
    moe_layers = d.layers - dense_layers
    parts = llama_like(d, f, knobs)
    parts.linears = (
        qkvo(d, d.layers, qkv_bias=knobs.qkv_bias, o_bias=knobs.o_bias)
        + gated_mlp(d.hidden, d.intermediate, dense_layers)
        + routed_experts(d.hidden, moe_width, moe_layers, experts, top_k)
    )
    parts.other_params = moe_layers * experts * d.hidden  # router `mlp.gate.weight` (E, h), no bias
    parts.num_experts, parts.experts_per_token, parts.moe_intermediate_size = experts, top_k, moe_width
    return parts


def build_mixtral(f: ConfigFields) -> ShapeParts:
    """Mixtral: every layer is MoE; `intermediate_size` is the expert width (there is no dense MLP)."""
    d = read_dims(f)
    fields = ConfigFields({**f.config, "num_experts": f.num("num_local_experts", 8)}, f.family)
    knobs = _LlamaLike(attention=uniform_layouts(d, f.opt_int("sliding_window")))
    return _moe_parts(fields, d, 0, d.intermediate, knobs, "num_local_experts")


def build_qwen3_moe(f: ConfigFields) -> ShapeParts:
    """Qwen3-MoE: layer i is MoE unless in mlp_only_layers or (i + 1) % decoder_sparse_step != 0."""
    d = read_dims(f)  # Qwen3MoeAttention: getattr(config, "head_dim", h / heads)
    mlp_only, step = set(f.int_list("mlp_only_layers")), f.num("decoder_sparse_step", 1)
    experts = f.num("num_experts")
    is_moe = [i not in mlp_only and experts > 0 and step > 0 and (i + 1) % step == 0 for i in range(d.layers)]
    window = f.num("sliding_window", 4096) if f.flag("use_sliding_window", False) else None
    bias = f.flag("attention_bias", False)
    knobs = _LlamaLike(qkv_bias=bias, o_bias=bias, qk_norm=True, attention=uniform_layouts(d, window))
    return _moe_parts(f, d, is_moe.count(False), f.num("moe_intermediate_size"), knobs)


def _mla_linears(f: ConfigFields, d: Dims, q_rank: int | None, kv_rank: int) -> list[LinearGroup]:
    """DeepSeek multi-head latent attention (DeepSeek-V2 paper §2.1): low-rank q and joint kv."""
    rope, nope = f.num("qk_rope_head_dim", 64), f.num("qk_nope_head_dim", 128)
    v_dim = f.num("v_head_dim", 128)
    bias, n, q_out = f.flag("attention_bias", False), d.layers, d.heads * (nope + rope)
    q_groups = (
        [linear("q_proj", d.hidden, q_out, n)]
        if q_rank is None
        else [linear("q_a_proj", d.hidden, q_rank, n, bias=bias), linear("q_b_proj", q_rank, q_out, n)]
    )
    return [
        *q_groups,
        linear("kv_a_proj_with_mqa", d.hidden, kv_rank + rope, n, bias=bias),
        linear("kv_b_proj", kv_rank, d.heads * (nope + v_dim), n),
        linear("o_proj", d.heads * v_dim, d.hidden, n, bias=bias),
    ]


def build_deepseek_v3(f: ConfigFields) -> ShapeParts:
    """DeepSeek-V3: MLA attention, `first_k_dense_replace` dense layers, then routed + shared experts.

    transformers builds no multi-token-prediction layers (`num_nextn_predict_layers`), so they are
    not counted; it also ignores `moe_layer_freq`. The router's `e_score_correction_bias` is a buffer,
    not a parameter, so it is not counted either.
    """
    d = read_dims(f)
    q_rank, kv_rank, rope = f.opt_int("q_lora_rank"), f.num("kv_lora_rank"), f.num("qk_rope_head_dim", 64)
    dense = min(f.num("first_k_dense_replace", 0), d.layers)
    fields = ConfigFields({**f.config, "num_experts": f.num("n_routed_experts")}, f.family)
    moe_width = f.num("moe_intermediate_size")
    parts = _moe_parts(fields, d, dense, moe_width, _LlamaLike(), "n_routed_experts")
    shared = moe_width * f.num("n_shared_experts", 0)
    parts.linears = [
        *_mla_linears(f, d, q_rank, kv_rank),
        *parts.linears[4:],  # dense MLP and routed experts, after the four llama q/k/v/o groups
        *(gated_mlp(d.hidden, shared, d.layers - dense, prefix="shared_experts.") if shared else []),
    ]
    # q_a_layernorm (q_lora_rank) and kv_a_layernorm (kv_lora_rank) in every layer.
    parts.norm_params += d.layers * ((q_rank or 0) + kv_rank)
    # vLLM caches one latent per token and layer: the compressed kv plus the shared rope key.
    parts.attention = [AttentionLayout(kind="mla", count=d.layers, kv_values_per_token=kv_rank + rope)]
    parts.head_dim = f.num("qk_nope_head_dim", 128) + rope  # the q·k head dim; v uses v_head_dim
    return parts


def build_gpt2(f: ConfigFields) -> ShapeParts:
    """GPT-2: Conv1D c_attn/c_proj/c_fc with biases, LayerNorm (weight + bias), learned positions."""
    h, n, heads = f.num("n_embd", 768), f.num("n_layer", 12), f.num("n_head", 12)
    vocab, positions = f.num("vocab_size", 50257), f.num("n_positions", 1024)
    inner = f.opt_int("n_inner") or 4 * h
    check_heads(f, h, heads, heads, h // heads, kv_key="n_head")
    d = Dims(h, n, heads, heads, h // heads, vocab, inner, positions)
    return ShapeParts(
        num_layers=n, hidden_size=h, vocab_size=vocab, num_attention_heads=heads, num_kv_heads=heads,
        head_dim=d.head_dim, intermediate_size=inner, max_position_embeddings=positions,
        tie_word_embeddings=f.flag("tie_word_embeddings", True), gated_mlp=False,
        linears=[
            linear("c_attn", h, 3 * h, n, bias=True),
            linear("attn.c_proj", h, h, n, bias=True),  # both projections are called c_proj
            linear("c_fc", h, inner, n, bias=True),
            linear("mlp.c_proj", inner, h, n, bias=True),
        ],
        embedding_params=(vocab + positions) * h,  # wte + wpe
        norm_params=(2 * n + 1) * 2 * h,  # ln_1, ln_2 per layer, ln_f
        attention=uniform_layouts(d, None),
    )  # fmt: skip


def build_falcon(f: ConfigFields) -> ShapeParts:
    """Falcon: fused query_key_value; multi-query (7B) or grouped kv (new_decoder_architecture)."""
    h, n, heads = f.num("hidden_size", 4544), f.num("num_hidden_layers", 32), f.num("num_attention_heads", 71)
    new_arch, hd = f.flag("new_decoder_architecture", False), h // heads
    kv = f.num("num_kv_heads", heads) if new_arch else (1 if f.flag("multi_query", True) else heads)
    check_heads(f, h, heads, kv, hd, kv_key="num_kv_heads")
    inner, bias = f.opt_int("ffn_hidden_size") or 4 * h, f.flag("bias", False)
    d = Dims(h, n, heads, kv, hd, f.num("vocab_size", 65024), inner, f.num("max_position_embeddings", 2048))
    # FalconDecoderLayer: 2 LayerNorms unless parallel_attn with a single input_layernorm.
    ln_in_parallel = f.opt_int("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    norms = 2 if not f.flag("parallel_attn", True) else ln_in_parallel
    return ShapeParts(
        num_layers=n, hidden_size=h, vocab_size=d.vocab, num_attention_heads=heads, num_kv_heads=kv,
        head_dim=hd, intermediate_size=inner, max_position_embeddings=d.max_positions,
        tie_word_embeddings=f.flag("tie_word_embeddings", True), gated_mlp=False,
        linears=[
            linear("query_key_value", h, (heads + 2 * kv) * hd, n, bias=bias),
            linear("dense", h, h, n, bias=bias),
            linear("dense_h_to_4h", h, inner, n, bias=bias),
            linear("dense_4h_to_h", inner, h, n, bias=bias),
        ],
        embedding_params=d.vocab * h,  # rotary or ALiBi positions have no parameters
        norm_params=(norms * n + 1) * 2 * h,
        # transformers broadcasts k/v to all heads in its cache; vLLM keeps n_kv heads, as here.
        attention=uniform_layouts(d, None),
    )  # fmt: skip
