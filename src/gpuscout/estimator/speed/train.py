"""Time of a fine-tuning job: full, LoRA or QLoRA, data- and tensor-parallel.

FLOPs per micro-batch come from `workload.flops.training_flops` (the rules are written there;
the bench uses the same function for achieved TFLOP/s and MFU).

The optimizer step is memory-bound over parameter, gradient and state bytes. QLoRA adds a
memory-bound NF4 dequantization before every use of a frozen weight. Data parallelism adds a
gradient all-reduce (ZeRO-3/FSDP: parameter all-gathers and gradient reduce-scatters instead);
tensor parallelism adds activation all-reduces inside every layer (Megatron: 2 forward, 2 backward).
"""

from __future__ import annotations

import math

from gpuscout.errors import SpecError
from gpuscout.estimator.activations import layer_activation_bytes_per_token
from gpuscout.estimator.efficiency import Efficiency, default_efficiency
from gpuscout.estimator.params import quantized_linear_params
from gpuscout.estimator.speed.roofline import (
    Bound,
    PhaseTime,
    Rates,
    SpeedEstimate,
    banded,
    dominant,
    gib,
    link_bytes_per_s,
    phase,
    ring_all_reduce_bytes,
    ring_gather_bytes,
    tflop,
)
from gpuscout.estimator.training import (
    PAGED_OPTIMIZERS,
    PARAM_BYTES,
    Layout,
    estimate_finetune_memory,
    optimizer_state_bytes,
    optimizer_term,
    trainable_param_bytes,
    trainable_params,
)
from gpuscout.hardware.bands import band_for
from gpuscout.hardware.catalog import Gpu, find_gpu, peak_flops_per_s
from gpuscout.workload.flops import TrainFlops, data_tokens_per_row, micro_batches_per_rank, row_tokens, training_flops
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.lora import lora_targets
from gpuscout.workload.shape import ModelShape

# Dtype the matmuls run in. Plain fp32 uses the CUDA-core rate: PyTorch leaves TF32 matmuls off by
# default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12).
COMPUTE_DTYPE = {"bf16_mixed": "bf16", "bf16": "bf16", "fp16_mixed": "fp16", "fp32": "fp32"}
# NF4 dequantization traffic per frozen linear weight per use: read 0.5 B of NF4, write and re-read
# a 2 B bf16 copy for the matmul = 4.5 B. ASSUMPTION (bitsandbytes dequantizes to a 16-bit buffer
# before the GEMM); gpu_poor's measured bnb slowdowns of 1.75–4.5× (docs/estimator.md §3) say the
# real overhead can be larger.
NF4_DEQUANT_BYTES = 0.5 + 2 + 2
# Megatron tensor parallelism: 2 all-reduces of the b·s·h activations in the forward of every
# layer (after attention and after the MLP) and 2 in the backward (Shoeybi et al. 2019, §3).
TP_ALL_REDUCES_PER_LAYER = 4
# torch.compile: torchtitan's Llama 3.1 8B on 8 H100s, FSDP, selective AC, local batch 2 (its performance page,
# Table 1) ran 5,762 tokens/s/GPU eager and 6,667 compiled: × 1.157 on the compute rate. Applied to the
# default compute efficiency only: a bench of the compiled job measures it directly (docs/estimator.md §2.14).
COMPILE_COMPUTE_GAIN = 6667 / 5762


def estimate_finetune_speed(
    job: FinetuneJob, shape: ModelShape, gpu: Gpu, *, gpus: int | None, efficiency: Efficiency | None
) -> SpeedEstimate:
    n = gpus or job.gpus
    if n % job.tensor_parallel:
        raise SpecError(
            f"{n} GPUs cannot be split into tensor-parallel groups of {job.tensor_parallel}.",
            "Data-parallel ranks = GPUs / tensor_parallel must be a whole number.",
            "Choose a GPU count that is a multiple of tensor_parallel.",
        )
    tp, dp = job.tensor_parallel, n // job.tensor_parallel
    eff = efficiency or compiled(job, default_efficiency(gpu, "training"))
    dtype = COMPUTE_DTYPE[job.precision]
    rates = Rates(flops_per_s=peak_flops_per_s(gpu, dtype) * matmul_ceiling_scale(gpu, dtype),
                  memory_bytes_per_s=gpu.memory_bandwidth_bytes_per_s, link_bytes_per_s=link_bytes_per_s(gpu, n))
    flops = training_flops(job, shape)
    step = training_step_phase(job, shape, flops, tp, rates, eff)
    phases = [(step, 1.0)]
    if job.method == "qlora":
        phases.append((dequant_phase(job, shape, tp, rates, eff), 1.0))
    if job.method in ("lora", "qlora"):
        phases.append((adapter_path_phase(job, shape, tp, rates, eff), 1.0))
    host = rates.model_copy(update={"link_bytes_per_s": gpu.pcie_bytes_per_s or rates.link_bytes_per_s})
    offloaded = job.optimizer_offload or job.offload_params
    phases.append((optimizer_phase(job, shape, tp, dp, host if offloaded else rates, eff), 1.0))
    phases += [(p, 1.0) for p in communication_phases(job, shape, tp, dp, rates, eff, step, flops)]
    phases += [(p, 1.0) for p in offload_phases(job, shape, gpu, n, host, eff)]
    return _summarise(job, gpu, n, dp, flops, [p for p, _ in phases], eff, rates, dominant(phases))


def training_step_phase(
    job: FinetuneJob, shape: ModelShape, flops: TrainFlops, tp: int, rates: Rates, eff: Efficiency
) -> PhaseTime:
    """Forward + backward (+ recompute) over grad_accum micro-batches on one GPU."""
    passes = 3 + (1 if _full_recompute(job) else 0)  # weight reads: forward, backward, recompute
    weight_b = 2 if job.precision != "fp32" else 4
    act_b = 4 if job.precision == "fp32" else 2
    row = row_tokens(job)
    tokens = job.micro_batch * row
    per_token = layer_activation_bytes_per_token(shape, act_b, row, job.attention == "eager", tp)
    activations = 2.0 * per_token * tokens * shape.num_layers  # written in the forward, read in the backward
    weights = passes * shape.params_total * weight_b / tp
    accum = job.grad_accum
    return phase(
        "training step", flops=flops.total * accum / tp, bytes_moved=(weights + activations) * accum, rates=rates,
        efficiency=eff,
        formula=(
            f"{accum} micro-batch(es) × ({_flops_formula(job, flops)}) / TP {tp} = {tflop(flops.total * accum / tp)}; "
            f"bytes = {accum} × ({passes} weight reads × {gib(shape.params_total * weight_b / tp)} "
            f"+ 2 × saved activations {gib(activations / 2)}); once per optimizer step"
        ),
    )


def _flops_formula(job: FinetuneJob, flops: TrainFlops) -> str:
    parts = (f"linears {tflop(flops.linear_fwd)}, attention {tflop(flops.attention_fwd)}, "
             f"LM head {tflop(flops.head_fwd)}")
    if job.method == "full":
        rule = "3 × forward (6·P·T; Kaplan 2020, Narayanan 2021)"
    else:
        rule = (f"2 × linears + 3 × attention + 2 × head + 3 × adapters {tflop(flops.adapter_fwd)} "
                "(≈ 4·P·T, docs/estimator.md §3.2 derivation)")
    recompute = " + 1 forward of the layers (gradient checkpointing)" if _full_recompute(job) else ""
    return f"forward: {parts}; {rule}{recompute}"


def _full_recompute(job: FinetuneJob) -> bool:
    """Full checkpointing re-runs each layer's forward; selective saves the matmuls and recomputes only
    pointwise ops (no FLOPs that count, and no second read of the weights)."""
    return job.gradient_checkpointing and job.checkpoint_policy == "full"


# The default training compute fraction (0.5) was observed on A100s (efficiency.toml, training row: LLaMA-65B
# at 47.6% MFU). What a dense GEMM can reach of the datasheet peak differs by GPU: the best square bf16
# matmul measured 0.86 of the peak on an A100 SXM, 0.80 on an H100 SXM and 1.01 on an RTX 4090 (the
# `matmul_bf16` bands of hardware/expected_bands.toml: Bekman's MAMF table and torch-performance-test-data).
# The 16-bit peak a training step runs against is therefore the datasheet figure × (this GPU's measured
# fraction / the A100's), so the efficiency stays a share of what the GPU can reach and a calibration, which
# rescales the efficiency, is not disturbed. GPUs without a measurement, and fp32 (CUDA-core) math, keep the
# datasheet figure; MFU stays against the datasheet peak.
MATMUL_REFERENCE_SKU = "a100-sxm4-80gb"


def matmul_fraction(gpu: Gpu) -> float | None:
    """Mean measured best bf16 matmul over the datasheet bf16 peak, or None where none was published."""
    band = band_for("matmul_bf16", gpu.sku)
    if band is None or not gpu.bf16_flops_per_s:
        return None
    return sum(band.measurements) / len(band.measurements) / gpu.bf16_flops_per_s


def matmul_ceiling_scale(gpu: Gpu, dtype: str) -> float:
    """This GPU's measured 16-bit matmul fraction over the A100's (1 where either is unknown, or for fp32)."""
    fraction, reference = matmul_fraction(gpu), matmul_fraction(find_gpu(MATMUL_REFERENCE_SKU))
    if dtype not in ("bf16", "fp16") or fraction is None or reference is None:
        return 1.0
    return fraction / reference


def compiled(job: FinetuneJob, eff: Efficiency) -> Efficiency:
    """The default efficiency, raised by `COMPILE_COMPUTE_GAIN` for a torch.compile'd job (capped at 1)."""
    if not job.compile:
        return eff
    return eff.model_copy(update={"compute": min(eff.compute * COMPILE_COMPUTE_GAIN, 1.0)})


def offload_phases(
    job: FinetuneJob, shape: ModelShape, gpu: Gpu, n: int, host: Rates, eff: Efficiency
) -> list[PhaseTime]:
    """PCIe traffic of the offloads (docs/estimator.md §2.14), overlapped like gradient communication:
    torchtune's activation offloading and FSDP's prefetch run the copies on a side stream."""
    out: list[PhaseTime] = []
    tp = job.tensor_parallel
    accum = job.grad_accum
    if job.activation_offload:
        act_b = 4 if job.precision == "fp32" else 2
        row = row_tokens(job)
        per_token = layer_activation_bytes_per_token(shape, act_b, row, job.attention == "eager", tp)
        saved = per_token * job.micro_batch * row * max(shape.num_layers - 1, 0)
        if job.gradient_checkpointing:
            saved = job.micro_batch * row * shape.hidden_size * 4 * max(shape.num_layers - 1, 0)
        out.append(phase(
            "activation offload transfer", flops=0.0, bytes_moved=0.0, comm_bytes=2 * saved * accum, rates=host,
            efficiency=eff, hidden=eff.overlap,
            formula=(f"{accum} × 2 (to host in the forward, back in the backward) × {gib(saved)} offloaded "
                     f"activations over PCIe; {eff.overlap:.0%} overlapped (side stream)")))
    if job.offload_params:
        wb = 4 if job.precision == "fp32" else 2
        params = shape.params_total * wb / tp
        grads = trainable_params(job, shape) * trainable_param_bytes(job) / tp
        volume = accum * (2 * params + grads)
        out.append(phase(
            "parameter offload transfer", flops=0.0, bytes_moved=0.0, comm_bytes=volume, rates=host,
            efficiency=eff, hidden=eff.overlap,
            formula=(f"{accum} × (2 × {gib(params)} parameters to the GPU [forward + backward] + {gib(grads)} "
                     f"gradients to the host) over PCIe; {eff.overlap:.0%} overlapped (FSDP prefetch)")))
    if job.optimizer in PAGED_OPTIMIZERS and _paged_states_spill(job, shape, gpu, n):
        layout = Layout(gpus=n, tp=tp, sharding=job.sharding)
        states = optimizer_term(job, shape, layout).bytes
        out.append(phase(
            "paged optimizer states in and out", flops=0.0, bytes_moved=0.0, comm_bytes=2 * states, rates=host,
            efficiency=eff,
            formula=(f"2 × {gib(states)} optimizer states over PCIe per step: they do not fit beside the "
                     "backward's activations, so unified memory evicts them and pages them back for the step")))
    return out


def _paged_states_spill(job: FinetuneJob, shape: ModelShape, gpu: Gpu, n: int) -> bool:
    """Paged states fit beside the backward's peak, or they leave the GPU and come back every step."""
    memory = estimate_finetune_memory(job, shape, gpu, gpus=n)
    layout = Layout(gpus=n, tp=job.tensor_parallel, sharding=job.sharding)
    return memory.peak_bytes + optimizer_term(job, shape, layout).bytes > memory.usable_bytes


def dequant_phase(job: FinetuneJob, shape: ModelShape, tp: int, rates: Rates, eff: Efficiency) -> PhaseTime:
    uses = (3 if _full_recompute(job) else 2) * job.grad_accum  # forward, backward, recompute
    lin = quantized_linear_params(shape, job.unquantized_modules)
    moved = lin * NF4_DEQUANT_BYTES * uses / tp
    return phase(
        "NF4 dequantization", flops=0.0, bytes_moved=moved, rates=rates, efficiency=eff,
        formula=(f"{lin:,} frozen linear params × {NF4_DEQUANT_BYTES} B (read NF4, write + read bf16; ASSUMPTION) "
                 f"× {uses} uses / TP {tp}; once per optimizer step"),
    )


# peft's LoRA Linear.forward runs `result + lora_B(lora_A(dropout(x))) * scaling` beside the frozen base
# layer, each op its own kernel in eager PyTorch, one after another on the stream: memory-bound work that
# adds to the GEMMs rather than hiding under them. Bytes per token of one adapted linear (in → out
# features, 2 B activations), counted from those ops and their autograd backward:
#   forward:  lora_A reads x (2·in); lora_B writes its output (2·out); `* scaling` reads and writes it
#             (4·out); `result +` reads both and writes the sum (6·out)          = 2·in + 12·out
#   backward: the scaling's backward reads and writes the gradient (4·out); lora_B's input and weight
#             gradients read it twice (4·out); lora_A writes the input gradient (2·in) and reads x for
#             its weight gradient (2·in); autograd adds that input gradient to the base layer's
#             (reads 2, writes 1: 6·in)                                          = 10·in + 8·out
# torch.compile: Inductor fuses pointwise chains but not into the cuBLAS GEMMs, so a GEMM's inputs and
# outputs stay in memory while the scaling, the add and the gradient accumulation fold into one epilogue
# kernel with their neighbours: forward 2·in (lora_A reads x) + 2·out (lora_B writes) + 4·out (one fused
# kernel reads it and the base result; its sum is the next op's input) = 2·in + 6·out; backward 4·out
# (the scaled gradient, materialized as a GEMM input) + 4·out (lora_B's two GEMMs read it) + 2·in + 2·in
# (lora_A's GEMMs) + 2·in (the accumulation, read once by a fused kernel) = 6·in + 8·out. Dropout is taken as
# off (peft's default lora_dropout = 0.0, where it is nn.Identity); the job spec does not carry it, and a
# dropout would add a read, a write and a mask of x per adapted linear.
ADAPTER_FWD_BYTES = (2, 12)  # (× in, × out) per token, eager
ADAPTER_BWD_BYTES = (10, 8)
ADAPTER_FWD_BYTES_COMPILED = (2, 6)
ADAPTER_BWD_BYTES_COMPILED = (6, 8)


def adapter_path_phase(job: FinetuneJob, shape: ModelShape, tp: int, rates: Rates, eff: Efficiency) -> PhaseTime:
    """The LoRA adapters' memory-bound kernels of one optimizer step, serial with the GEMMs."""
    lora = job.lora
    fwd_in, fwd_out = ADAPTER_FWD_BYTES_COMPILED if job.compile else ADAPTER_FWD_BYTES
    bwd_in, bwd_out = ADAPTER_BWD_BYTES_COMPILED if job.compile else ADAPTER_BWD_BYTES
    forwards = 2 if _full_recompute(job) else 1
    per_token = 0.0
    for g in lora_targets(shape, lora):
        fwd = fwd_in * g.in_features + fwd_out * g.out_features
        bwd = bwd_in * g.in_features + bwd_out * g.out_features
        per_token += g.active_count * (forwards * fwd + bwd)
    act_scale = 2 if job.precision == "fp32" else 1  # 4 B activations in fp32 training
    tokens = job.micro_batch * row_tokens(job) * job.grad_accum
    moved = per_token * act_scale * tokens / tp
    return phase(
        "LoRA adapter kernels", flops=0.0, bytes_moved=moved, rates=rates, efficiency=eff,
        formula=(f"{tokens:,} tokens × {per_token * act_scale / 2**20:,.1f} MiB per token: every adapted linear "
                 f"in → out moves {forwards} × ({fwd_in}·in + {fwd_out}·out) + {bwd_in}·in + {bwd_out}·out B of "
                 f"activations (peft's A, B, × scaling, + result, and their backward"
                 f"{'; compiled: fused' if job.compile else ''}) / TP {tp}; memory-bound, "
                 "serial with the GEMMs"),
    )


def optimizer_phase(
    job: FinetuneJob, shape: ModelShape, tp: int, dp: int, rates: Rates, eff: Efficiency
) -> PhaseTime:
    """Memory-bound update: read and write parameters and states, read gradients."""
    n = trainable_params(job, shape)
    shard = dp if job.sharding != "none" else 1  # ZeRO ≥ 1 / FSDP: each rank updates its shard
    pb = trainable_param_bytes(job)
    states, state_formula = optimizer_state_bytes(job, shape, n)
    moved = (n * (2 * pb + pb) + 2 * states) / (tp * shard)
    if job.optimizer_offload or job.offload_params:
        return phase(
            "optimizer offload transfer", flops=0.0, bytes_moved=0.0, comm_bytes=n * (pb + 2) / (tp * shard),
            rates=rates, efficiency=eff,
            formula=f"{n:,} × ({pb} B gradients to CPU + 2 B parameters back) over PCIe; "
                    "CPU Adam time not modelled",
        )
    return phase(
        "optimizer step", flops=0.0, bytes_moved=moved, rates=rates, efficiency=eff,
        formula=(f"{n:,} trainable × (read+write {pb} B params + read {pb} B grads) + read+write states "
                 f"[{state_formula}], / (TP {tp} × shard {shard}); memory-bound, once per step"),
    )


def communication_phases(
    job: FinetuneJob, shape: ModelShape, tp: int, dp: int, rates: Rates, eff: Efficiency,
    compute: PhaseTime | None = None, flops: TrainFlops | None = None,
) -> list[PhaseTime]:
    """Collectives of one optimizer step. `compute` (the training step) and `flops` give the compute the
    data-parallel collectives can hide behind (`_hidden`); without them the efficiency's fixed overlap applies."""
    out: list[PhaseTime] = []
    if tp > 1:
        out.append(_tensor_parallel_phase(job, shape, tp, rates, eff))
    if dp <= 1:
        return out
    n = trainable_params(job, shape)
    gb = PARAM_BYTES[job.precision] if job.method == "full" else (2 if job.precision == "bf16" else 4)
    grads = n * gb / tp
    if job.sharding in ("zero3", "fsdp"):
        params, how = gathered_param_bytes(job, shape)
        params /= tp
        volume = job.grad_accum * (2 * ring_gather_bytes(params, dp) + ring_gather_bytes(grads, dp))
        window = compute.seconds if compute is not None else 0.0
        hidden, overlap = _hidden(volume, rates, eff, window, shape.num_layers, compute is not None,
                                  "FSDP prefetches the next unit's gather during this unit's compute")
        out.append(phase(
            "parameter all-gather + gradient reduce-scatter", flops=0.0, bytes_moved=0.0, comm_bytes=volume,
            rates=rates, efficiency=eff, hidden=hidden,
            formula=(f"{job.grad_accum} micro-batch(es) × (2 × (n−1)/n × {gib(params)} params [{how}; forward + "
                     f"backward gathers] + (n−1)/n × {gib(grads)} {_grads_what(job)}), n = {dp}; {overlap}"),
        ))
        return out
    volume = ring_all_reduce_bytes(grads, dp)
    # The all-reduce runs once per optimizer step (no_sync during accumulation), in the last micro-batch's backward.
    window = (compute.seconds / job.grad_accum * backward_share(flops)
              if compute is not None and flops is not None else 0.0)
    hidden, overlap = _hidden(volume, rates, eff, window, max(math.ceil(grads / DDP_BUCKET_BYTES), 1),
                              compute is not None and flops is not None,
                              "DDP reduces each 25 MiB gradient bucket as the backward fills it")
    out.append(phase(
        "gradient all-reduce", flops=0.0, bytes_moved=0.0, comm_bytes=volume, rates=rates,
        efficiency=eff, hidden=hidden,
        formula=(f"2(n−1)/n × {n:,} trainable × {gb} B / TP {tp} = {gib(volume)}, "
                 f"n = {dp} ranks; {overlap}; once per optimizer step"),
    ))
    return out


# DDP's default gradient bucket: bucket_cap_mb = 25 (torch.nn.parallel.DistributedDataParallel docs).
DDP_BUCKET_BYTES = 25 * 2**20


def gathered_param_bytes(job: FinetuneJob, shape: ModelShape) -> tuple[float, str]:
    """Bytes of the whole model one FSDP/ZeRO-3 all-gather moves, and how they were counted.

    QLoRA under FSDP keeps each quantized linear's packed 4-bit data in a float storage dtype
    (bnb_4bit_quant_storage) precisely so that FSDP can shard and gather it (bitsandbytes docs,
    "FSDP-QLoRA"): the gather moves 0.5 B per quantized parameter, not a 16-bit copy. The blockwise
    absmax scales stay on every rank as module attributes (QuantState, bitsandbytes PR #970), so they
    do not travel. Everything else (embeddings, norms, unquantized linears) travels in the 16-bit
    parameter dtype of FSDP's MixedPrecision (4 B in fp32 training).
    """
    wb = 4 if job.precision == "fp32" else 2
    if job.method != "qlora":
        return shape.params_total * wb, f"{wb} B each"
    packed = quantized_linear_params(shape, job.unquantized_modules)
    rest = shape.params_total - packed
    return packed * NF4_PACKED_BYTES + rest * wb, f"{NF4_PACKED_BYTES} B per packed 4-bit param, {wb} B the rest"


# NF4 storage: two 4-bit codes per byte (bitsandbytes quantize_4bit packs (n + 1) // 2 bytes).
NF4_PACKED_BYTES = 0.5


def backward_share(flops: TrainFlops) -> float:
    """Share of the step's FLOPs after the forward: the backward (and its recompute), which the gradient
    all-reduce can overlap. The forward is every *_fwd term once."""
    forward = flops.linear_fwd + flops.attention_fwd + flops.head_fwd + flops.adapter_fwd
    return max(flops.total - forward, 0.0) / flops.total if flops.total else 0.0


def _grads_what(job: FinetuneJob) -> str:
    if job.method == "full":
        return "grads"
    # PEFT's fsdp_auto_wrap_policy puts each trainable LoRA module in its own FSDP unit, so the units of
    # frozen weights hold no gradient and reduce nothing (the PyTorch FSDP docs warn that mixing frozen
    # and trainable parameters in one unit costs gradient memory as if none were frozen).
    return "adapter grads only (PEFT wraps LoRA modules in their own units)"


def _hidden(volume: float, rates: Rates, eff: Efficiency, window_s: float, chunks: int, structural: bool,
            why: str) -> tuple[float, str]:
    """Fraction of a collective hidden behind compute, and the words that say how.

    The collective is cut into `chunks` (FSDP units, DDP buckets) issued on their own stream while
    compute runs: everything but one chunk can hide, and only as much as the compute window lasts, so
    exposed = max(comm − window, 0) + comm / chunks (the first gather, or the last bucket, waits).
    Without a window (a caller that has none) the efficiency's fixed overlap applies."""
    comm_s = volume / (rates.link_bytes_per_s * eff.link) if volume else 0.0
    if not structural or comm_s <= 0:
        return eff.overlap, f"{eff.overlap:.0%} overlapped"
    exposed = min(max(comm_s - window_s, 0.0) + comm_s / chunks, comm_s)
    hidden = 1.0 - exposed / comm_s
    return hidden, (f"{hidden:.0%} hidden: {why}; exposed = max(comm − {window_s:.3g} s of compute, 0) "
                    f"+ comm / {chunks}")


def _tensor_parallel_phase(job: FinetuneJob, shape: ModelShape, tp: int, rates: Rates, eff: Efficiency) -> PhaseTime:
    act_b = 4 if job.precision == "fp32" else 2
    count = TP_ALL_REDUCES_PER_LAYER + (2 if job.gradient_checkpointing else 0)
    payload = job.micro_batch * job.seq_len * shape.hidden_size * act_b
    volume = job.grad_accum * shape.num_layers * count * ring_all_reduce_bytes(payload, tp)
    return phase(
        "tensor-parallel all-reduce", flops=0.0, bytes_moved=0.0, comm_bytes=volume, rates=rates, efficiency=eff,
        formula=(f"{job.grad_accum} × {shape.num_layers} layers × {count} all-reduces × 2(t−1)/t × b·s·h·{act_b} B "
                 f"({gib(payload)}), t = {tp}; on the critical path (Megatron §3)"),
    )


def _summarise(
    job: FinetuneJob, gpu: Gpu, n: int, dp: int, flops: TrainFlops, phases: list[PhaseTime], eff: Efficiency,
    rates: Rates, bound: Bound,
) -> SpeedEstimate:
    step_s = sum(p.seconds for p in phases)
    datasheet_peak = peak_flops_per_s(gpu, COMPUTE_DTYPE[job.precision])  # MFU's denominator, unscaled
    # Dataset tokens per step: padding is computed (row_tokens) but carries no data.
    tokens_per_step = job.micro_batch * data_tokens_per_row(job) * job.grad_accum * dp
    tokens = job.dataset_tokens * job.epochs
    steps = math.ceil(micro_batches_per_rank(job, dp) / job.grad_accum)
    job_s, low, high = banded(steps * step_s, eff)
    per_gpu_flops = flops.total * job.grad_accum * dp / n
    notes = [
        "MFU = FLOPs the method needs (no recompute) / (step time × dense peak × GPUs); "
        "achieved_tflops counts recompute too (hardware FLOPs per GPU).",
        f"link: {rates.link_bytes_per_s / 1e9:,.0f} GB/s catalog figure" if n > 1 else "single GPU: no communication",
    ]
    scale = matmul_ceiling_scale(gpu, COMPUTE_DTYPE[job.precision])
    if scale != 1.0:
        notes.append(f"matmul ceiling: the 16-bit peak × {scale:.3f}, this GPU's best measured bf16 matmul against "
                     "the A100's (hardware/expected_bands.toml, matmul_bf16; docs/estimator.md §3.4).")
    if job.compile:
        notes.append(f"torch.compile: the default compute efficiency × {COMPILE_COMPUTE_GAIN:.3f} (torchtitan; "
                     "docs/estimator.md §2.14); a measured efficiency replaces it.")
    if row_tokens(job) > data_tokens_per_row(job):
        notes.append(f"padding: each row computes {row_tokens(job):,} tokens for {data_tokens_per_row(job):,.0f} of "
                     "data (sample_tokens); packing = true fills every row.")
    if _full_recompute(job):
        notes.append("checkpointing: +1 forward (+33% of 6P in theory); gpu_poor uses ×1.65 time (transformers#25572).")
    if job.method == "qlora":
        notes.append("QLoRA dequantization is an ASSUMED memory-bound cost; bnb slowdowns of 1.75–4.5× are reported "
                     "(gpu_poor, docs/estimator.md §3).")
    return SpeedEstimate(
        job_kind="finetune", gpu_sku=gpu.sku, gpus=n, job_s=job_s, job_low_s=low, job_high_s=high,
        bound=bound,
        metrics={
            "step_s": step_s,
            "tokens_per_s": tokens_per_step / step_s,
            "samples_per_s": job.micro_batch * job.grad_accum * dp / step_s,
            "mfu": flops.useful * job.grad_accum * dp / (step_s * datasheet_peak * n),
            "achieved_tflops": per_gpu_flops / step_s / 1e12,
        },
        units={"tokens": tokens, "epochs": job.epochs, "steps": float(steps)},
        phases=tuple(phases), efficiency=eff, notes=tuple(notes),
    )

