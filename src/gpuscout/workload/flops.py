"""FLOP counts that follow from a model's shape alone: one home for the speed model and the bench.

Training FLOPs per micro-batch of T = b·s tokens (forward pass first, then multiples of it):

    linears    2 · T · Σ active linear params            (Kaplan et al. 2020 §2.1: 2N per token)
    attention  4 · b · s · keys · (a·d) per layer         (QKᵀ and AV; llm-analysis 4·b·s²·h);
               keys = s/2 with causal Flash/SDPA kernels that skip the masked half, s with eager
    LM head    2 · T · h · V

    full FT    3 × forward  (backward = 2 × forward: input and weight grads; Narayanan et al. 2021,
                             so ≈ 6 · P · T in all)
    LoRA/QLoRA 2 × linears + 3 × attention + 2 × LM head + 3 × adapters
               (forward 2P, input grads 2P, no weight grads for frozen weights ≈ 4P per token;
               docs/estimator.md §3.2, "my derivation")
    checkpointing  + one more forward of the decoder layers (≈ +2P, i.e. +1/3 of 6P); selective
               checkpointing saves the matmul and attention outputs, so it recomputes no FLOPs that count;
               every k-th layer checkpointed recomputes ⌊L/k⌋ of L layers; torchtitan's op-level policy
               recomputes the matmuls it does not save (k, o and up of a Llama layer: every second mm)

Tokens a micro-batch computes (docs/estimator.md §2.14): micro_batch rows of `row_tokens` each. A row
is seq_len long when packed or when every example fills seq_len (sample_tokens unset); unpacked
examples of mean length sample_tokens are padded to seq_len ("max_length"), or to the longest of the
batch ("longest": the mean itself at micro_batch 1, seq_len otherwise, as the longest is unknown).
With packing and FlashAttention's varlen kernel, attention runs per document of sample_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.lora import lora_adapter_params
from gpuscout.workload.shape import ModelShape


@dataclass(frozen=True)
class TrainFlops:
    """FLOPs of one micro-batch over the whole model (before tensor-parallel splitting)."""

    linear_fwd: float
    attention_fwd: float
    head_fwd: float
    adapter_fwd: float
    head: float  # LM-head FLOPs of the whole step (forward and backward)
    total: float  # what the device executes, recompute included (achieved TFLOP/s)
    useful: float  # without recompute: the numerator of MFU

    @property
    def layer_fraction(self) -> float:
        """Share of `total` inside the decoder layers (for depth-slicing extrapolation)."""
        return (self.total - self.head) / self.total


def training_flops(job: FinetuneJob, shape: ModelShape) -> TrainFlops:
    """FLOPs of one training micro-batch of `job` (see the module docstring for the rules)."""
    row = row_tokens(job)
    tokens = job.micro_batch * row
    linear = 2.0 * tokens * sum(g.active_count * g.params_each for g in shape.linears)
    attention = _attention_flops(job, shape, row)
    head = 2.0 * tokens * shape.hidden_size * shape.vocab_size
    if job.method == "full":
        adapter, head_step = 0.0, 3 * head
        useful = 3 * (linear + attention + head)
    else:
        adapter, head_step = 2.0 * tokens * lora_adapter_params(shape, job.lora, active=True), 2 * head
        useful = 2 * linear + 3 * attention + 2 * head + 3 * adapter
    recompute = recompute_share(job, shape) * (linear + attention + adapter)
    if job.gradient_checkpointing and job.checkpoint_policy == "selective_op":
        recompute = _op_level_recompute_share(shape) * linear
    return TrainFlops(linear, attention, head, adapter, head_step, useful + recompute, useful)


def training_flops_rule(job: FinetuneJob) -> str:
    """The multiples of the forward pass that `training_flops` adds up, in words."""
    rule = ("3 × (linears + attention + LM head)" if job.method == "full"
            else "2 × linears + 3 × attention + 2 × LM head + 3 × adapters")
    if not job.gradient_checkpointing or job.checkpoint_policy == "selective":
        return rule
    return rule + {"full": " + recompute of the layers", "selective_layers": " + recompute of every k-th layer",
                   "selective_op": " + recompute of every second matmul"}[job.checkpoint_policy]


def recompute_share(job: FinetuneJob, shape: ModelShape) -> float:
    """Share of the decoder layers' forward run again in the backward by whole-layer checkpointing."""
    if not job.gradient_checkpointing:
        return 0.0
    if job.checkpoint_policy == "full":
        return 1.0
    if job.checkpoint_policy == "selective_layers":
        layers = max(shape.num_layers, 1)
        return (layers // job.checkpoint_layer_interval) / layers
    return 0.0


def _op_level_recompute_share(shape: ModelShape) -> float:
    """Share of the linear FLOPs torchtitan's op-level policy recomputes: the 2nd, 4th, … matmul of a layer
    (k, o and up for a gated MLP, k, o for a plain one). LoRA on every linear keeps the same base matmuls
    unsaved (three matmuls per adapted linear keep the parity); MoE layers count as recomputing half."""
    if shape.num_experts:
        return 0.5
    h, q, kv = shape.hidden_size, shape.num_attention_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    f = shape.intermediate_size
    mats = [h * q, h * kv, h * kv, q * h] + ([h * f, h * f, f * h] if shape.gated_mlp else [h * f, f * h])
    return sum(mats[1::2]) / sum(mats)


def row_tokens(job: FinetuneJob) -> int:
    """Tokens one row of a micro-batch computes, padding included (see the module docstring)."""
    if job.packing or job.sample_tokens is None:
        return job.seq_len
    if job.padding == "longest" and job.micro_batch == 1:
        return job.sample_tokens
    return job.seq_len


def data_tokens_per_row(job: FinetuneJob) -> float:
    """Dataset tokens one row carries: seq_len when packed (or unset), else one example's mean length."""
    if job.packing or job.sample_tokens is None:
        return float(job.seq_len)
    return float(job.sample_tokens)


def micro_batches_per_rank(job: FinetuneJob, ranks: int) -> float:
    """Micro-batches each data-parallel rank runs over the whole job (rows of data / rows per batch)."""
    rows = job.dataset_tokens * job.epochs / data_tokens_per_row(job)
    return rows / (job.micro_batch * ranks)


def _attention_flops(job: FinetuneJob, shape: ModelShape, row: int) -> float:
    """Per packed row: each document attends only within itself under FlashAttention varlen (TRL's
    padding-free packing needs flash_attention_2); SDPA and eager see one causal row of seq_len."""
    eager = job.attention == "eager"
    if job.packing and job.sample_tokens is not None and job.attention == "flash":
        docs = job.seq_len / job.sample_tokens
        return docs * attention_forward_flops(shape, job.micro_batch, job.sample_tokens, eager=False)
    return attention_forward_flops(shape, job.micro_batch, row, eager=eager)


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
