"""Peak memory per GPU of a fine-tuning step: full, LoRA or QLoRA, any recipe, optimizer, sharding.

Memory in a step moves through phases; the peak is the resident state plus the largest phase:

    resident        weights (or NF4 + constants), adapters, optimizer states, DDP/ZeRO buffers
    loss backward   saved activations + logits/loss buffers (+ gradients held from earlier
                    micro-batches when grad_accum > 1)
    layer recompute with checkpointing: saved layer inputs + one recomputed layer + gradients
    optimizer step  gradients + the optimizer's temporaries

plus overheads (CUDA context, NCCL, allocator reserve). The phase rule was checked against
FakeTensor traces of real transformers steps (tests/measure/test_oracle.py): the peak is at the
start of the loss backward, when every activation is alive and no gradient exists yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscout.estimator import activations as act
from gpuscout.estimator import overhead
from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, term, total_bytes
from gpuscout.estimator.params import (
    factored_state_elements,
    largest_linear_params,
    layer_params,
    linear_params,
    nonlinear_params,
    quantized_linear_params,
    require_known_skip_modules,
    unquantized_linear_params,
)
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.lora import lora_adapter_params, lora_targets
from gpuscout.workload.shape import LinearGroup, ModelShape

# Bytes of a parameter (and of its gradient) under each precision recipe. Mixed recipes keep
# fp32 parameters and let autocast run matmuls in 16-bit (PyTorch AMP; ZeRO paper §3.1 counts the
# same 16 B/param of model state for mixed-precision Adam: 2 + 2 + 12, arranged differently).
PARAM_BYTES = {"fp32": 4, "bf16_mixed": 4, "fp16_mixed": 4, "bf16": 2}
# 16-bit activations unless the whole recipe is fp32.
ACT_BYTES = {"fp32": 4, "bf16_mixed": 2, "fp16_mixed": 2, "bf16": 2}
# bitsandbytes NF4 with double quantization: 4 bits + 8-bit absmax per 64 + fp32 per 256 absmaxes
# = 4.127 bits (QLoRA, arXiv 2305.14314 §3; docs/estimator.md §2.3).
NF4_BYTES = 0.5
NF4_CONSTANT_BYTES = (8 / 64 + 32 / (64 * 256)) / 8
# 8-bit Adam: two 1-byte states plus one fp32 absmax per 2048-value block each
# (Dettmers et al. 2021, arXiv 2110.02861 §2: block-wise quantization, B = 2048).
ADAM8_BYTES = 2 * (1 + 4 / 2048)
FP32_BYTES = 4
# Chunked / fused cross-entropy keeps logits for one chunk of tokens at a time.
CE_CHUNK_TOKENS = 1024
# loss "chunked_output": torchtune's CEWithChunkedOutputLoss splits the output into num_output_chunks = 8
# (torchtune/modules/loss/ce_chunked_output_loss.py); litgpt's 128-token chunks are smaller, so 8 is the
# larger (safe) backward chunk for both.
OUTPUT_CHUNKS = 8
# Activation offloading (docs/estimator.md §2.14): torchtune's OffloadActivations keeps at most
# max_fwd_stash_size = 5 saved tensors on the GPU while their copies to pinned host memory finish,
# and in the backward only the tensors of the autograd node being run (training/_activation_offloading.py).
# A decoder layer saves ~15 tensors, so one layer's activations bound what stays: counted as 1 layer.
OFFLOAD_LAYERS_ON_GPU = 1
# FSDP gathers one unit (decoder layer) and prefetches the next: current + prefetched unit on the GPU
# (torch FSDP forward_prefetch / backward_prefetch=BACKWARD_PRE; FSDP1's limit_all_gathers lets at most
# two all-gathers run ahead of the compute; DeepSpeed ZeRO-3 prefetches the next submodules likewise).
FSDP_UNITS_ON_GPU = 2
# DeepSpeed's reduce_bucket_size default, 5e8 elements (DeepSpeed config docs, zero_optimization). ZeRO-1/2
# allocate a contiguous-gradient bucket of that many elements in the model's 16-bit dtype at every
# backward (stage_1_and_2.py `backward`: `torch.empty(int(self.reduce_bucket_size), ...)`, two with
# overlap_comm, off by default for stage 1/2); ZeRO-3 allocates one at start-up (stage3.py
# `__ipg_bucket_flat_buffer`). Whole, whatever the trainable count: a LoRA job pays it too. transformers'
# "auto" DeepSpeed config sets h² instead; the default is the larger, so it is the safe side.
ZERO_REDUCE_BUCKET_ELEMENTS = 500_000_000
# bitsandbytes' paged optimizers (PagedAdamW8bit / PagedAdamW32bit) allocate their states in CUDA
# unified memory, which "transfers memory from the GPU to the CPU when GPU memory is exhausted"
# (bitsandbytes optimizer docs). They must be on the GPU only while the optimizer step runs.
PAGED_OPTIMIZERS = frozenset({"paged_adamw_8bit", "paged_adamw_32bit"})


@dataclass(frozen=True)
class Layout:
    """How the job is spread: data-parallel ranks, tensor-parallel ranks, sharding of states."""

    gpus: int
    tp: int
    sharding: str

    @property
    def dp(self) -> int:
        return self.gpus // self.tp


def estimate_finetune_memory(
    job: FinetuneJob, shape: ModelShape, gpu: Gpu, *, gpus: int | None = None
) -> MemoryBreakdown:
    """Per-GPU peak of one training step of `job` on `gpu` (spread over `gpus`, default job.gpus)."""
    layout = Layout(gpus=gpus or job.gpus, tp=job.tensor_parallel, sharding=job.sharding)
    resident = model_state_terms(job, shape, layout)
    grads = gradient_term(job, shape, layout)
    saved = saved_activation_terms(job, shape, layout)
    loss = logits_term(job, shape, layout)
    recompute = recompute_terms(job, shape, layout)
    step = step_temporary_terms(job, shape, layout)
    held = grads.bytes if job.grad_accum > 1 else 0
    # Paged states can leave the GPU while activations peak; they come back for the step.
    paged, paged_in_step = paged_state_bytes(job, shape, layout)
    phases = {
        "loss backward": total_bytes(saved) + loss.bytes + held,
        "optimizer step": grads.bytes + total_bytes(step) + paged_in_step,
    }
    if recompute:
        phases["layer recompute"] = total_bytes(saved) + total_bytes(recompute) + grads.bytes
    root_rs = root_reduce_scatter_bytes(job, shape, layout)
    if root_rs:  # FSDP full fine-tune: the trainable root's gradients, whole, at the end of the backward
        phases["root reduce-scatter"] = grads.bytes + root_rs
    # The freed 16-bit logits block is reserved, not allocated: it adds to the loss backward's peak but not
    # to the allocator's reserve, which scales with what is allocated. So the peak phase is the one whose
    # whole peak (allocated + reserve + hole) is largest: choosing by allocated + hole alone let a larger
    # batch pick a phase with less allocated, and the estimate shrank as the batch grew.
    hole = logits_hole_term(job, shape, layout)

    def at_peak(name: str) -> tuple[int, list[MemoryTerm]]:
        allocated = round(total_bytes(resident) - paged + phases[name])
        return allocated, overhead_terms(layout, allocated) + ([hole] if name == "loss backward" and hole.bytes else [])

    peaks = {name: at_peak(name) for name in phases}
    phase = max(peaks, key=lambda name: peaks[name][0] + total_bytes(peaks[name][1]))
    allocated, fixed = peaks[phase]
    return MemoryBreakdown(
        job_kind="finetune",
        gpu_sku=gpu.sku,
        gpus=layout.gpus,
        usable_bytes=usable_memory_bytes(gpu),
        terms=(*resident, grads, *saved, loss, *recompute, *step, *fixed),
        peak_bytes=allocated + total_bytes(fixed),
        notes=(
            "peak = resident states + the largest phase (" + ", ".join(
                f"{name} {nbytes / 2**30:.2f} GiB" for name, nbytes in phases.items()) + f") + overheads; "
            f"{phase} is the largest here",
        ),
    )


def paged_state_bytes(job: FinetuneJob, shape: ModelShape, layout: Layout) -> tuple[float, float]:
    """(paged optimizer-state bytes, the part of them on the GPU during the optimizer step).

    Unified memory pages the states in when the step touches them. A whole-model step touches all of
    them; with optimizer_in_backward each parameter's step runs alone, so only the largest tensor's
    states need to be resident at once (docs/estimator.md §2.14).
    """
    if job.optimizer not in PAGED_OPTIMIZERS:
        return 0.0, 0.0
    states = optimizer_term(job, shape, layout).bytes
    if not job.optimizer_in_backward:
        return states, states
    share = largest_trainable_param(job, shape) / max(trainable_params(job, shape), 1)
    return states, states * share


def trainable_params(job: FinetuneJob, shape: ModelShape) -> int:
    return shape.params_total if job.method == "full" else lora_adapter_params(shape, job.lora)


def model_state_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """What stays on the GPU through the whole step."""
    terms = [*weight_terms(job, shape, layout), optimizer_term(job, shape, layout)]
    terms += data_parallel_terms(job, shape, layout)
    if job.method == "qlora" and quantized_linear_params(shape, job.unquantized_modules):
        big = largest_linear_params(shape) * 2
        terms.append(term("NF4 dequantization buffer", "temporaries", big, "largest linear × 2 B"))
    return terms


def data_parallel_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """What data parallelism holds beyond each rank's share of the model states (docs/estimator.md §2.2).

    ZeRO-3 / FSDP: the gathered decoder layers (current + prefetched unit), the gathered 16-bit root
    unit (FSDP) or LM head (ZeRO-3), the unsharded gradients of the unit being reduce-scattered (FSDP).
    ZeRO-1/2/3: DeepSpeed's contiguous gradient bucket. DDP: its gradient buckets. With parameter offload
    the gathered units are counted with the weights (`offloaded_weight_terms`)."""
    if layout.dp <= 1:
        return []
    terms: list[MemoryTerm] = []
    if layout.sharding in ("zero3", "fsdp") and not job.offload_params:
        units = min(FSDP_UNITS_ON_GPU, max(shape.num_layers, 1))
        unit, what = gathered_unit_bytes(job, shape, layout)
        terms.append(term("gathered layer units (all-gather)", "temporaries", units * unit,
                          f"{units} units (current + prefetched) × {unit:,.0f} B per decoder layer: {what}"))
        terms.append(root_gather_term(job, shape, layout))
        if layout.sharding == "fsdp" and not job.optimizer_in_backward:
            terms.append(unsharded_unit_gradient_term(job, shape, layout))
            if job.method == "full":
                terms.append(root_gradient_term(job, shape, layout))
    if layout.sharding in ("zero1", "zero2", "zero3"):
        eb = FP32_BYTES if job.precision == "fp32" else 2
        terms.append(term("ZeRO gradient bucket", "temporaries", ZERO_REDUCE_BUCKET_ELEMENTS * eb,
                          f"reduce_bucket_size {ZERO_REDUCE_BUCKET_ELEMENTS:,} elements × {eb} B (DeepSpeed's "
                          "default, allocated whole whatever the trainable count)"))
    if layout.sharding == "none":
        grads = gradient_term(job, shape, layout).bytes
        terms.append(term("DDP gradient buckets", "gradients", grads,
                          "= gradient bytes (DDP copies grads into buckets unless gradient_as_bucket_view)"))
    return terms


def gathered_unit_bytes(job: FinetuneJob, shape: ModelShape, layout: Layout) -> tuple[float, str]:
    """Bytes of one decoder layer as FSDP / ZeRO-3 all-gathers it, and what they are.

    Full and LoRA: the layer's weights in the compute dtype (FSDP MixedPrecision(param_dtype) gathers
    16-bit copies; fp32 for an fp32 recipe). QLoRA: the packed 4-bit weights, 0.5 B per weight: with
    bnb_4bit_quant_storage = bf16 the Params4bit is a 16-bit tensor holding two 4-bit codes per byte,
    which is what lets FSDP flatten and shard it (transformers' bitsandbytes docs, "FSDP-QLoRA"; Answer.AI
    fsdp_qlora). Its dequantized 16-bit copy exists one linear at a time (the dequantization buffer).
    LoRA adapters come along at their own bytes (peft's fsdp_auto_wrap_policy wraps them separately;
    they are gathered with their layer)."""
    layers = max(shape.num_layers, 1)
    wb = FP32_BYTES if job.precision == "fp32" else 2
    if job.method == "full":
        per = layer_params(shape)
        return per * wb / layout.tp, f"{per:,} params × {wb} B / TP {layout.tp}"
    adapters = lora_adapter_params(shape, job.lora) / layers
    ab = adapter_bytes(job)
    if job.method == "lora":
        per = layer_params(shape)
        return ((per * wb + adapters * ab) / layout.tp,
                f"{per:,} frozen params × {wb} B + {adapters:,.0f} adapter params × {ab} B / TP {layout.tp}")
    packed = quantized_linear_params(shape, job.unquantized_modules) / layers
    kept = unquantized_linear_params(shape, job.unquantized_modules) / layers if job.unquantized_modules else 0
    kb = FP32_BYTES if upcasts_unquantized(job) else 2
    norms = shape.norm_params / layers
    nbytes = packed * NF4_BYTES + kept * kb + norms * kb + adapters * ab
    return (nbytes / layout.tp,
            f"{packed:,.0f} packed NF4 weights × 0.5 B (bf16 quant storage) + {kept + norms:,.0f} "
            f"unquantized × {kb} B + {adapters:,.0f} adapter params × {ab} B / TP {layout.tp}")


def _root_bytes(job: FinetuneJob) -> int:
    """Bytes per parameter of the non-decoder-layer weights as gathered: the compute dtype for full
    fine-tunes (16-bit copies of fp32 masters), as the model holds them otherwise (fp32 after peft's
    upcast: FSDP gathers in the storage dtype unless a MixedPrecision policy says otherwise, the larger)."""
    wb = FP32_BYTES if job.precision == "fp32" else 2
    if job.method == "full":
        return wb
    return FP32_BYTES if upcasts_unquantized(job) else wb


def root_gather_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    """The weights outside the decoder layers, never quantized (bitsandbytes skips the LM head; embeddings
    are not linears), gathered whole on every rank.

    FSDP wraps each decoder layer; the embeddings, final norm and LM head stay in the root unit, gathered
    at the start of the forward and not resharded after it ("Do not free the root's parameters in the
    post-forward for FULL_SHARD", torch/distributed/fsdp/_runtime_utils.py `_post_forward_reshard`; FSDP2's
    fully_shard leaves the root unsharded after forward too), so they stay whole through the backward.
    ZeRO-3 gathers each submodule around its use and frees it after; the LM head is gathered again for
    its backward, right at the loss backward's peak, so it alone is counted."""
    rb = _root_bytes(job)
    if layout.sharding == "fsdp":
        rest = nonlinear_params(shape)
        return term("root unit gathered (embeddings, norm, LM head)", "temporaries", rest * rb / layout.tp,
                    f"{rest:,} non-layer params × {rb} B / TP {layout.tp} (FSDP keeps the root unsharded from "
                    "forward to backward)")
    head = shape.vocab_size * shape.hidden_size
    return term("LM head gathered (ZeRO-3)", "temporaries", head * rb / layout.tp,
                f"V·h = {head:,} × {rb} B / TP {layout.tp} (gathered again for its backward at the loss)")


def unsharded_unit_gradient_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    """FSDP computes a unit's gradients whole (the unsharded flat parameter's .grad) before reduce-scattering
    them into the rank's shard: one unit's trainable parameters at gradient bytes (torch FSDP
    `_post_backward_hook` / FSDP2 `foreach_reduce`)."""
    layers = max(shape.num_layers, 1)
    per = layer_params(shape) if job.method == "full" else lora_adapter_params(shape, job.lora) / layers
    gb = trainable_param_bytes(job)
    return term("unsharded gradients of one unit (reduce-scatter)", "temporaries", per * gb / layout.tp,
                f"{per:,.0f} trainable params per decoder layer × {gb} B / TP {layout.tp}")


def _unsharded_grad_bytes(job: FinetuneJob) -> tuple[int, int]:
    """(bytes of a gradient as the backward computes it under FSDP, bytes of its reduce-scatter copy).

    FSDP computes gradients in the gathered parameters' dtype (MixedPrecision param_dtype: 16-bit under
    mixed recipes) and copies them into a flat reduce-scatter input in reduce_dtype (fp32 under mixed
    recipes as accelerate and torchtitan set it; FSDP2 `foreach_reduce`)."""
    compute = FP32_BYTES if job.precision == "fp32" else 2
    reduce = 2 if job.precision == "bf16" else FP32_BYTES
    return compute, reduce


def root_gradient_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    """A full fine-tune's root unit is trainable, and FSDP reduce-scatters a unit only once all its gradients
    exist: the LM head's unsharded gradient, made at the start of the backward, is held until the
    embeddings' arrives at its very end (the FSDP2 trace of a Llama shows it)."""
    head = shape.vocab_size * shape.hidden_size
    cb, _ = _unsharded_grad_bytes(job)
    return term("unsharded LM-head gradient (root unit)", "temporaries", head * cb / layout.tp,
                f"V·h = {head:,} × {cb} B / TP {layout.tp} (held through the backward until the root's "
                "reduce-scatter)")


def root_reduce_scatter_bytes(job: FinetuneJob, shape: ModelShape, layout: Layout) -> float:
    """The end of an FSDP full fine-tune's backward: the root unit's gradients whole (embeddings, norm, LM
    head) plus their reduce-scatter copy, beside the sharded gradients, with the activations freed. The
    FSDP2 trace of a Llama peaks here: 16-bit root gradients + their fp32 copy (docs/estimator.md §2.2)."""
    if not (layout.sharding == "fsdp" and layout.dp > 1 and job.method == "full" and not job.offload_params
            and not job.optimizer_in_backward):
        return 0.0
    cb, rb = _unsharded_grad_bytes(job)
    return nonlinear_params(shape) * (cb + rb) / layout.tp


def _shard(layout: Layout, what: str) -> int:
    """Divisor for a model-state term under ZeRO stage / FSDP (ZeRO paper §5, Table 1)."""
    stage = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}[layout.sharding]
    needed = {"optimizer": 1, "gradients": 2, "weights": 3}[what]
    return layout.dp if stage >= needed else 1


def weight_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    if job.offload_params:
        return offloaded_weight_terms(job, shape, layout)
    return resident_weight_terms(job, shape, layout)


def resident_weight_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    div = layout.tp * _shard(layout, "weights")
    p = shape.params_total
    if job.method == "full":
        b = PARAM_BYTES[job.precision]
        return [term("weights", "weights", p * b / div, f"{p:,} params × {b} B / {div}")]
    base = _base_weight_terms(job, shape, div, layout.tp, layout.dp)
    if job.method == "qlora" and job.unquantized_modules:
        base.append(_kept_linears_term(job, shape, div))
    adapters = lora_adapter_params(shape, job.lora)
    ab = adapter_bytes(job)
    base.append(term("LoRA adapters", "weights", adapters * ab / layout.tp,
                     f"{adapters:,} adapter params (rank {job.lora.rank} × (d_in + d_out)) × {ab} B"))
    return base


def _kept_linears_term(job: FinetuneJob, shape: ModelShape, div: int) -> MemoryTerm:
    """QLoRA linears named in `unquantized_modules`: 16-bit as loaded, fp32 after peft's upcast (it casts
    every parameter that is not a bitsandbytes Params4bit, docs/estimator.md §2.14)."""
    require_known_skip_modules(shape, job.unquantized_modules)
    kept = unquantized_linear_params(shape, job.unquantized_modules)
    b = FP32_BYTES if upcasts_unquantized(job) else 2
    why = "upcast to fp32 by prepare_model_for_kbit_training" if b == FP32_BYTES else "kept 16-bit"
    return term("unquantized linears (unquantized_modules)", "weights", kept * b / div,
                f"{kept:,} params of {', '.join(job.unquantized_modules)} × {b} B ({why})")


def offloaded_weight_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """FSDP CPUOffload(offload_params=True) / ZeRO-3 offload_param: the parameters live in host RAM. On the
    GPU stay the root unit (embeddings, final norm, LM head: FSDP wraps each decoder layer, the rest is the
    root, gathered for the whole step), `FSDP_UNITS_ON_GPU` gathered decoder layers with the 1/N shards
    copied in from pinned host memory to feed their all-gathers, and, for QLoRA, the NF4 constants (not
    parameters, so no offload moves them; docs/estimator.md §2.2, §2.14)."""
    rb = _root_bytes(job)
    rest = nonlinear_params(shape)
    root = rest * rb / layout.tp
    units = min(FSDP_UNITS_ON_GPU, max(shape.num_layers, 1))
    unit, what = gathered_unit_bytes(job, shape, layout)
    staged = unit / layout.dp if layout.dp > 1 else 0.0  # one rank: its shard is the whole unit
    terms = [term("root unit (embeddings, norm, LM head), gathered", "weights", root,
                  f"{rest:,} non-layer params × {rb} B / TP {layout.tp} (held for the whole step)"),
             term("gathered layer units (params offloaded to CPU)", "weights", units * (unit + staged),
                  f"{units} units (current + prefetched) × ({unit:,.0f} B per decoder layer + its "
                  f"1/{layout.dp} shard copied in from host): {what}; the rest in host RAM")]
    if job.method == "qlora":
        terms.append(quant_constants_term(quantized_linear_params(shape, job.unquantized_modules), layout.tp,
                                          layout.dp))
    return terms


def _base_weight_terms(job: FinetuneJob, shape: ModelShape, div: int, tp: int, dp: int) -> list[MemoryTerm]:
    """Frozen base weights: 16-bit (fp32 for an fp32 recipe), or NF4 linears for QLoRA."""
    if job.method == "lora":
        b = 4 if job.precision == "fp32" else 2
        p = shape.params_total
        return [term("frozen base weights", "weights", p * b / div, f"{p:,} params × {b} B / {div}")]
    # Linears named in unquantized_modules stay out of NF4 (their own term, `_kept_linears_term`).
    lin, rest = quantized_linear_params(shape, job.unquantized_modules), nonlinear_params(shape)
    return [
        term("frozen base weights (NF4 linears)", "weights", lin * NF4_BYTES / div,
             f"{lin:,} linear params × 0.5 B (bitsandbytes NF4)"),
        quant_constants_term(lin, tp, dp),
        _leftover_term(job, rest, div),
    ]


def quant_constants_term(lin: int, tp: int, dp: int) -> MemoryTerm:
    """NF4 absmax constants, whole on every data-parallel rank.

    They live in each Params4bit's QuantState, not in a parameter, so neither FSDP (it flattens and
    shards nn.Parameters only), ZeRO-3 (it partitions parameters) nor their CPU offload touches them, and
    every rank dequantizes whole gathered layers, so it needs every block's absmax. Tensor parallelism
    splits the weights, and their blocks with them."""
    split = f" / TP {tp}" if tp > 1 else ""
    whole = "; in QuantState, not a parameter: whole on each of the N_d ranks" if dp > 1 else ""
    return term("quantization constants", "weights", lin * NF4_CONSTANT_BYTES / tp,
                f"{lin:,} × 0.127 bits/8{split} (double-quantized absmax, QLoRA §3{whole})")


def _leftover_term(job: FinetuneJob, rest: int, div: int) -> MemoryTerm:
    """Embeddings, norms and lm_head of a QLoRA model: 16-bit as loaded, fp32 after peft's upcast."""
    if upcasts_unquantized(job):
        return term("fp32 leftovers (embeddings, norms, lm_head)", "weights", rest * FP32_BYTES / div,
                    f"{rest:,} non-linear params × 4 B (peft prepare_model_for_kbit_training upcasts them)")
    return term("16-bit leftovers (embeddings, norms, lm_head)", "weights", rest * 2 / div,
                f"{rest:,} non-linear params × 2 B (bnb keeps them 16-bit)")


def trainable_param_bytes(job: FinetuneJob) -> int:
    """Bytes of each trainable parameter (and of its gradient)."""
    return PARAM_BYTES[job.precision] if job.method == "full" else adapter_bytes(job)


def adapter_bytes(job: FinetuneJob) -> int:
    """peft upcasts adapters to fp32 under mixed recipes (autocast_adapter_dtype=True)."""
    return 2 if job.precision == "bf16" else 4


def gradient_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    n = trainable_params(job, shape)
    gb = trainable_param_bytes(job)
    if job.optimizer_in_backward:
        big = largest_trainable_param(job, shape)
        return term("gradients (one at a time)", "gradients", big * gb / layout.tp,
                    f"largest trainable tensor {big:,} × {gb} B: optimizer_in_backward updates each parameter "
                    "when its gradient is ready and frees the gradient")
    div = layout.tp * _shard(layout, "gradients")
    if job.offload_params:
        units = min(FSDP_UNITS_ON_GPU, max(shape.num_layers, 1))
        per_unit = n / max(shape.num_layers, 1)
        return term("gradients (offloaded to CPU)", "gradients", units * per_unit * gb / div,
                    f"{units} units × {per_unit:,.0f} trainable params × {gb} B / {div}: each unit's gradients "
                    "move to host RAM after its reduce-scatter")
    return term("gradients", "gradients", n * gb / div, f"{n:,} trainable params × {gb} B / {div}")


def largest_trainable_param(job: FinetuneJob, shape: ModelShape) -> int:
    """Elements of the largest single trainable tensor (what optimizer_in_backward holds at once)."""
    if job.method == "full":
        return max(largest_linear_params(shape), shape.vocab_size * shape.hidden_size)
    r = job.lora.rank
    return max((r * max(g.in_features, g.out_features) for g in lora_targets(shape, job.lora)), default=0)


def optimizer_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    if job.optimizer_offload or job.offload_params:
        return term("optimizer states", "optimizer_states", 0, "offloaded to CPU memory")
    div = layout.tp * _shard(layout, "optimizer")
    state_bytes, formula = optimizer_state_bytes(job, shape, trainable_params(job, shape))
    return term("optimizer states", "optimizer_states", state_bytes / div, f"{formula} / {div}")


def optimizer_state_bytes(job: FinetuneJob, shape: ModelShape, n: int) -> tuple[float, str]:
    """State bytes for `n` trainable params: Adam m, v; SGD momentum; Adafactor factored rows/cols."""
    sb = 2 if job.precision == "bf16" else 4
    match job.optimizer:
        case "adamw":
            return n * 2 * sb, f"{n:,} × 2 states × {sb} B (AdamW m, v)"
        case "adamw_8bit" | "paged_adamw_8bit":
            return n * ADAM8_BYTES, f"{n:,} × 2.002 B (8-bit AdamW, block-wise absmax)"
        case "paged_adamw_32bit":
            # bitsandbytes' 32-bit states are fp32 whatever the parameters' dtype.
            return n * 2 * FP32_BYTES, f"{n:,} × 2 states × 4 B (paged 32-bit AdamW m, v)"
        case "sgd":
            return n * sb, f"{n:,} × {sb} B (SGD momentum)"
        case "adafactor":
            groups = shape.linears if job.method == "full" else lora_targets(shape, job.lora)
            factored = factored_state_elements(groups) if job.method == "full" else _lora_factored(job, groups)
            rest = nonlinear_params(shape) if job.method == "full" else 0
            return (factored + rest) * 4, f"({factored:,} row+col stats + {rest:,} vector params) × 4 B"
    raise AssertionError(job.optimizer)


def _lora_factored(job: FinetuneJob, groups: tuple[LinearGroup, ...]) -> int:
    """Adafactor on adapters: A (r × d_in) and B (d_out × r) each keep rows + cols statistics."""
    r = job.lora.rank
    return sum(g.count * (r + g.in_features + g.out_features + r) for g in groups)


def saved_activation_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """Tensors kept from the forward for the backward, for one micro-batch."""
    ab = ACT_BYTES[job.precision]
    tokens = job.micro_batch * job.seq_len
    layers, where = _layers_on_gpu(job, shape)
    if job.gradient_checkpointing:
        terms = [_checkpointed_term(job, shape, layout, layers, where)]
    else:
        per_token = _layer_bytes_per_token(job, shape, layout)
        terms = [term("layer activations", "activations", per_token * tokens * layers,
                      f"{layers} layers{where} × {tokens:,} tokens × {per_token:,.0f} B: {_formula(job)}")]
    terms.append(term("final norm", "activations", act.norm_bytes(shape, ab) * tokens, "b·s·h·(act + fp32 upcast) B"))
    if job.method == "full" and ab < PARAM_BYTES[job.precision] and not job.activation_offload \
            and not job.offload_params:
        copies = linear_params(shape) + shape.vocab_size * shape.hidden_size
        div = layout.tp * _shard(layout, "weights")
        terms.append(term("16-bit weight copies (autocast cache)", "activations", copies * 2 / div,
                          f"{copies:,} matmul params × 2 B (autocast casts, kept for backward)"))
    if upcasts_unquantized(job) and ab < FP32_BYTES:
        head = shape.vocab_size * shape.hidden_size
        terms.append(term("16-bit copy of the fp32 lm_head", "activations", head * 2 / layout.tp,
                          f"V·h = {head:,} × 2 B (autocast casts the upcast head per step; matmul keeps it "
                          "for backward)"))
    if upcasts_unquantized(job) and ab < FP32_BYTES and job.unquantized_modules and not job.activation_offload:
        kept = unquantized_linear_params(shape, job.unquantized_modules)
        terms.append(term("16-bit copies of the fp32 unquantized linears", "activations", kept * 2 / layout.tp,
                          f"{kept:,} × 2 B (autocast casts each upcast linear; the matmul keeps it for backward)"))
    return terms


def _checkpointed_term(job: FinetuneJob, shape: ModelShape, layout: Layout, layers: int, where: str) -> MemoryTerm:
    """Each checkpointed layer's input (residual stream), plus what the checkpointing policy saves inside
    it: every matmul and attention output ("selective"), every other matmul and the attention outputs
    ("selective_op", torchtitan's op-level policy), or, with only every k-th layer checkpointed
    ("selective_layers"), all the activations of the layers left unwrapped."""
    ab = ACT_BYTES[job.precision]
    rb = residual_bytes(job)
    tokens = job.micro_batch * job.seq_len
    h = shape.hidden_size
    stream = " (fp32 residual stream)" if rb > ab else ""
    if job.checkpoint_policy == "selective":
        extra = _selective_bytes_per_token(job, shape, layout)
        return term("checkpointed layer inputs and matmul outputs", "activations", layers * (rb * h + extra) * tokens,
                    f"{layers} layers{where} × {tokens:,} tokens × (h·{rb} B input{stream} + {extra:,.0f} B "
                    "matmul/attention outputs saved by selective checkpointing)")
    if job.checkpoint_policy == "selective_op":
        extra = act.op_level_saved_bytes(shape, ab, layout.tp, _adapted_ranks(job, shape))
        return term("checkpointed layer inputs and op-level saves", "activations", layers * (rb * h + extra) * tokens,
                    f"{layers} layers{where} × {tokens:,} tokens × (h·{rb} B input{stream} + {extra:,.0f} B: "
                    "attention outputs and every other matmul, torchtitan's op-level policy)")
    if job.checkpoint_policy == "selective_layers":
        return _every_kth_layer_term(job, shape, layout, layers, where)
    return term("checkpointed layer inputs", "activations", layers * rb * h * tokens,
                f"L·b·s·h·{rb} B = {layers}×{tokens:,}×{h}×{rb}{stream}{where}")


def _every_kth_layer_term(job: FinetuneJob, shape: ModelShape, layout: Layout, layers: int, where: str) -> MemoryTerm:
    """torchtitan / torchtune per-layer selective checkpointing: a counter over the blocks wraps block k,
    2k, … (`ptd_checkpoint_wrapper._count % ac_freq == 0`), so ⌊L/k⌋ layers keep only their input and the
    other L − ⌊L/k⌋ keep every activation, as without checkpointing."""
    k = job.checkpoint_layer_interval
    rb = residual_bytes(job)
    tokens = job.micro_batch * job.seq_len
    wrapped = layers // k
    kept = (layers - wrapped) * _layer_bytes_per_token(job, shape, layout)
    nbytes = (wrapped * rb * shape.hidden_size + kept) * tokens
    return term("layer activations (every k-th layer checkpointed)", "activations", nbytes,
                f"{wrapped} of {layers} layers{where} checkpointed (k = {k}): h·{rb} B each; the other "
                f"{layers - wrapped} keep all activations ({_formula(job)}) × {tokens:,} tokens")


def _adapted_ranks(job: FinetuneJob, shape: ModelShape) -> dict[str, int]:
    """Leaf name → LoRA rank of the decoder-layer linears LoRA adapts (none for a full fine-tune)."""
    if job.method == "full":
        return {}
    return {g.name.rsplit(".", 1)[-1]: job.lora.rank for g in lora_targets(shape, job.lora)}


def _layers_on_gpu(job: FinetuneJob, shape: ModelShape) -> tuple[int, str]:
    """Decoder layers whose saved activations sit on the GPU at the peak: all, or with activation
    offloading the ones still being copied to host RAM (`OFFLOAD_LAYERS_ON_GPU`)."""
    if job.activation_offload:
        kept = min(OFFLOAD_LAYERS_ON_GPU, shape.num_layers)
        return kept, f" (of {shape.num_layers}; the rest offloaded to pinned host RAM)"
    return shape.num_layers, ""


def _selective_bytes_per_token(job: FinetuneJob, shape: ModelShape, layout: Layout) -> float:
    """Selective activation checkpointing: what a checkpointed layer saves beyond its input (the matmul
    and attention outputs, `activations.selective_saved_bytes`, plus LoRA's own matmuls)."""
    if job.checkpoint_policy != "selective":
        return 0.0
    ab = ACT_BYTES[job.precision]
    return act.selective_saved_bytes(shape, ab, layout.tp) + _selective_adapter_bytes(job, shape, ab) / layout.tp


def _selective_adapter_bytes(job: FinetuneJob, shape: ModelShape, ab: int) -> float:
    """LoRA's own matmuls are saved too: x·A (rank wide) and (x·A)·B (as wide as the adapted linear's
    output) for every adapted linear, per token, averaged over the layers (FakeTensor traces of peft
    LoRA under SAC keep both; docs/estimator.md §2.14)."""
    if job.method == "full":
        return 0.0
    r = job.lora.rank
    per_model = sum(g.count * (g.out_features + r) for g in lora_targets(shape, job.lora))
    return ab * per_model / max(shape.num_layers, 1)


def upcasts_unquantized(job: FinetuneJob) -> bool:
    """QLoRA through peft's prepare_model_for_kbit_training: every parameter that is not 4-bit becomes fp32.

    peft (utils/other.py, `prepare_model_for_kbit_training`) casts each fp16/bf16 parameter that is not a
    bitsandbytes Params4bit to fp32: the embeddings, the norms and the lm_head. TRL's SFTTrainer, axolotl
    and the QLoRA recipe call it; unsloth does not (docs/estimator.md §2.3).
    """
    return job.method == "qlora" and job.upcast_unquantized


def residual_bytes(job: FinetuneJob) -> int:
    """Bytes per hidden unit of the residual stream between decoder layers (what checkpointing saves).

    fp32 whenever the embedding weights are fp32: the fp32 recipe, AMP full fine-tunes (fp32 parameters)
    and upcast QLoRA. The embedding lookup is not autocast, and the residual adds keep fp32 from there.
    FakeTensor traces of Llama-3-8B layers with checkpointing measure 4.0 B per hidden unit per layer in
    those cases against 2.0 B for a 16-bit base (docs/estimator.md §2.4).
    """
    if job.precision == "fp32" or upcasts_unquantized(job):
        return FP32_BYTES
    if job.method == "full" and ACT_BYTES[job.precision] < PARAM_BYTES[job.precision]:
        return FP32_BYTES
    return ACT_BYTES[job.precision]


def recompute_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """With checkpointing, each layer's activations come back, one layer at a time, in backward."""
    if not job.gradient_checkpointing:
        return []
    per_token = _layer_bytes_per_token(job, shape, layout)
    tokens = job.micro_batch * job.seq_len
    return [term("one layer recomputed", "activations", per_token * tokens,
                 f"1 layer × {tokens:,} tokens × {per_token:,.0f} B: {_formula(job)}")]


def _layer_bytes_per_token(job: FinetuneJob, shape: ModelShape, layout: Layout) -> float:
    eager = job.attention == "eager"
    ab = ACT_BYTES[job.precision]
    per_token = act.layer_activation_bytes_per_token(shape, ab, job.seq_len, eager, layout.tp)
    if residual_bytes(job) > ab:
        per_token += act.amp_extra_bytes(shape)  # fp32 residual stream (fp32 embeddings) under autocast
    return per_token


def _formula(job: FinetuneJob) -> str:
    core = "eager s² scores" if job.attention == "eager" else "flash/SDPA"
    return f"Korthikanti-style per-tensor sum (GQA, gated MLP, {core})"


def logits_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    per_token = act.logits_bytes_per_token(shape, layout.tp)
    tokens = job.micro_batch * job.seq_len
    loss = job.loss_impl
    if loss == "fused":
        kept = min(tokens, CE_CHUNK_TOKENS)
        return term("logits and loss (chunked)", "activations", per_token * kept,
                    f"{kept} tokens per chunk × V={shape.vocab_size:,} × 12 B")
    # "full_output_held": transformers < 4.45 upcast the logits inside the model's forward
    # (LlamaForCausalLM: `logits = logits.float()`, then the loss on a shifted contiguous copy) and returned
    # the fp32 logits in CausalLMOutputWithPast. transformers' Trainer drops the output before the backward
    # (compute_loss returns only the loss); a loop that keeps it, as Answer.AI's fsdp_qlora train.py does
    # (`output = model(...)`; `loss = output.loss`; `loss.backward()`; `output = None` only afterwards),
    # holds 4 B per logit more through the loss backward.
    if loss == "chunked_output":
        # Each chunk's F.cross_entropy(logits.float()) keeps its fp32 log-softmax until the backward (4 B
        # for every token); the backward then runs one chunk at a time (8 B of fp32 gradients per element).
        chunk = -(-tokens // OUTPUT_CHUNKS)
        nbytes = (4 * tokens + 8 * chunk) * shape.vocab_size / layout.tp
        return term("logits and loss (chunked output)", "activations", nbytes,
                    f"V={shape.vocab_size:,} × (4 B fp32 log-softmax × {tokens:,} tokens + 8 B fp32 gradients × "
                    f"{chunk:,} tokens of one of {OUTPUT_CHUNKS} chunks)")
    if loss == "full_output_held":
        held = FP32_BYTES * shape.vocab_size / layout.tp
        return term("logits and loss (fp32 logits held by the output)", "activations", (per_token + held) * tokens,
                    f"b·s·V·(4 B fp32 logits the caller's output keeps + 4 B fp32 log-softmax kept + 8 B fp32 "
                    f"loss gradients), V={shape.vocab_size:,}")
    return term("logits and loss", "activations", per_token * tokens,
                f"b·s·V·(4 B fp32 log-softmax kept + 8 B fp32 loss gradients), V={shape.vocab_size:,}")


def logits_hole_term(job: FinetuneJob, shape: ModelShape, layout: Layout) -> MemoryTerm:
    """The 16-bit logits' block, freed before the loss backward and too small to reuse there.

    The LM head writes 16-bit logits (2 B per element); the loss upcasts them and every tensor of
    the loss backward is fp32 (4 B per element). Once the 16-bit block is freed, PyTorch's caching
    allocator keeps it reserved, and no fp32 gradient of the loss fits in it, so at the peak it is
    reserved memory nobody can use. Fitting the HF + FA2 column of unsloth's QLoRA context-length
    table (Llama 3.1 8B, 12 to 80 GB cards, docs/estimator.md §2.5) gives 2.65 MB per token; the
    traced allocation is 2.35 MB per token plus the 10% reserve: the 2 B per logit closes the gap.
    A chunked output frees its chunks' blocks side by side; whether the allocator merges them for the
    twice-as-large fp32 chunk gradients is not known here, so they count as stranded in full (the safe side).
    """
    if ACT_BYTES[job.precision] >= FP32_BYTES:  # fp32 logits: no 16-bit block to strand
        return term("freed 16-bit logits (reserved)", "overhead", 0, "fp32 recipe: none")
    tokens = job.micro_batch * job.seq_len
    kept = min(tokens, CE_CHUNK_TOKENS) if job.loss_impl == "fused" else tokens
    return term("freed 16-bit logits (reserved)", "overhead", kept * shape.vocab_size * 2 / layout.tp,
                f"{kept:,} tokens × V={shape.vocab_size:,} × 2 B: freed before the fp32 loss backward, "
                "too small for its tensors, still held by the caching allocator")


def step_temporary_terms(job: FinetuneJob, shape: ModelShape, layout: Layout) -> list[MemoryTerm]:
    """torch.optim's foreach kernels allocate intermediates the size of the parameters they update."""
    if job.optimizer_offload or job.offload_params:
        return []
    sb = 2 if job.precision == "bf16" else 4
    if job.optimizer_in_backward:
        big = largest_trainable_param(job, shape) / layout.tp
        return [term("optimizer step temporaries", "temporaries", big * sb,
                     "largest trainable tensor × state bytes (one parameter's update at a time)")]
    n = trainable_params(job, shape) / (layout.tp * _shard(layout, "optimizer"))
    return [term("optimizer step temporaries", "temporaries", n * sb,
                 "trainable params × state bytes (foreach AdamW/SGD intermediates, one list at a time)")]


def overhead_terms(layout: Layout, allocated: int) -> list[MemoryTerm]:
    terms = [term("CUDA context and libraries", "overhead", overhead.CUDA_CONTEXT_BYTES,
                  overhead.CUDA_CONTEXT_SOURCE)]
    if layout.gpus > 1:
        terms.append(term("NCCL buffers", "overhead", overhead.NCCL_TRAINING_BYTES, overhead.NCCL_TRAINING_SOURCE))
    terms.append(term("allocator reserve", "overhead", allocated * overhead.ALLOCATOR_FRACTION,
                      overhead.ALLOCATOR_SOURCE))
    return terms
