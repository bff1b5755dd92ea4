"""The fine-tune slice of `gpuscout bench`: planning, and the case that runs in its own process.

The case function runs inside the case's own process (`harness.run_isolated`) and returns a
`Case`; the inference slice lives in `measure.llm_inference`. What is timed:

* fine-tune — one repeat = one micro-batch: forward (loss on the batch's own tokens), backward,
  optimizer step, zero_grad. The spec's grad_accum is not looped inside a repeat: an optimizer
  step of grad_accum micro-batches takes grad_accum × (forward + backward) + one optimizer step,
  so per-token throughput from one micro-batch is slightly pessimistic for grad_accum > 1 (the
  optimizer step is counted per micro-batch). Derived per repeat: tokens/s, samples/s, achieved
  TFLOP/s (FLOPs from `workload.flops`), MFU against the catalog's dense peak (GPU only), and the
  projected time of the whole job.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from gpuscout.errors import GpuscoutError, UnsupportedHere
from gpuscout.hardware.catalog import find_gpu, peak_flops_per_s
from gpuscout.measure import depth
from gpuscout.measure.harness import (
    PlannedCase,
    derived_metric,
    time_first_then_repeats,
    timed_metric,
)
from gpuscout.measure.llm_setup import (
    LlmCaseSpec,
    build_model,
    cpu_threads_note,
    model_shape,
    ready_config,
    resolve_attention,
    token_batches,
    weights_note,
)
from gpuscout.measure.peak_memory import PeakMemoryMonitor
from gpuscout.measure.startup import StartupClock, startup_seconds
from gpuscout.results.schema import Case, Metric
from gpuscout.torchmodel.llm import (
    apply_lora,
    autocast,
    bnb_4bit_config,
    build_optimizer,
    compile_model,
    enable_checkpointing,
    import_torch_stack,
    offload_activations,
    optimizer_in_backward,
    param_dtype,
    quantize_linears_nf4,
    require_bitsandbytes,
)
from gpuscout.workload.flops import data_tokens_per_row, row_tokens, training_flops, training_flops_rule
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.jobtime import whole_job_formula, whole_job_s
from gpuscout.workload.lora import lora_target_names
from gpuscout.workload.shape import ModelShape

FINETUNE_UNIT_NOTE = (
    "one timed repeat = one micro-batch: forward + backward + optimizer step + zero_grad (grad_accum is "
    "not looped inside a repeat)"
)
# Dtype the matmuls run in, for the catalog peak. fp32 uses the CUDA-core rate: PyTorch leaves TF32
# matmuls off by default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12).
COMPUTE_DTYPE = {"bf16_mixed": "bf16", "bf16": "bf16", "fp16_mixed": "fp16", "fp32": "fp32"}
BNB_OPTIMIZERS = {"adamw_8bit": "The 8-bit AdamW optimizer", "paged_adamw_8bit": "The paged 8-bit AdamW optimizer",
                  "paged_adamw_32bit": "The paged 32-bit AdamW optimizer"}


class PerParameterOptimizers:
    """The optimizers of optimizer_in_backward, seen as one (for the checkpoint save and state sizes)."""

    def __init__(self, optimizers: dict[Any, Any]) -> None:
        self.optimizers = optimizers

    @property
    def state(self) -> dict[Any, Any]:
        return {p: opt.state.get(p, {}) for p, opt in self.optimizers.items()}

    def state_dict(self) -> dict[int, Any]:
        return {i: opt.state_dict() for i, opt in enumerate(self.optimizers.values())}


def _refuse_unsupported_settings(job: FinetuneJob, device: str) -> None:
    """Settings the bench cannot run here, said before anything is built."""
    if job.offload_params:
        raise UnsupportedHere("offload_params needs FSDP's CPU offload inside torch.distributed, which the bench "
                              "does not launch; the case is not supported here. Measure the job without it (the "
                              "estimate adds the PCIe traffic), or run FSDP yourself and compare the result.")
    if job.optimizer_in_backward and job.precision == "fp16_mixed" and device == "cuda":
        raise UnsupportedHere("optimizer_in_backward with fp16_mixed: GradScaler cannot unscale per-parameter "
                              "steps; the case is not supported here. Use bf16_mixed.")


# --- planning (parent process) -------------------------------------------------------------------


def plan_finetune_cases(spec: LlmCaseSpec) -> list[PlannedCase]:
    return [PlannedCase(name=spec.name, fn=run_finetune_case, args=(spec,), size=dict(spec.params))]


# --- fine-tune (case process) --------------------------------------------------------------------


def run_finetune_case(spec: LlmCaseSpec) -> Case:
    job = spec.job
    if not isinstance(job, FinetuneJob):
        raise TypeError("run_finetune_case needs a FinetuneJob")
    clock = StartupClock(spec.settings.created_at)
    if job.method == "qlora":
        require_bitsandbytes(spec.device, "QLoRA (NF4 4-bit base weights)")
    if job.optimizer in BNB_OPTIMIZERS:
        require_bitsandbytes(spec.device, BNB_OPTIMIZERS[job.optimizer])
    _refuse_unsupported_settings(job, spec.device)
    torch = import_torch_stack("transformers", *(["peft"] if job.method != "full" else []), purpose="gpuscout bench")
    config, built, full_layers = ready_config(spec, torch, clock)
    attention, attention_note = resolve_attention(job.attention, spec.device)
    notes = [weights_note(spec), *([attention_note] if attention_note else []), *cpu_threads_note(torch, spec.device)]
    monitor = PeakMemoryMonitor(spec.device)
    with monitor:
        model, optimizer, notes_build = _training_model(spec, job, config, attention, monitor)
        notes += notes_build
        step = _training_step(spec, job, model, optimizer, notes)
        clock.mark("model_build")
        started = time.time()
        first_s, samples = time_first_then_repeats(step, warmup=spec.settings.warmup,
                                                   repeats=spec.settings.repeats, device=spec.device)
        clock.first_step(first_s, started_at=started)
    static_layers, static_rest = depth.static_bytes(model, optimizer)
    save_s = time_checkpoint_save(model, optimizer) if job.checkpoint_every_steps else None
    cost = JobCost(startup_s=startup_seconds(clock.phases()), save_s=save_s)
    shape = model_shape(config)
    metrics = _finetune_metrics(spec, job, shape, attention, samples, notes, cost)
    memory_full = None
    if built is not None:
        metrics += _finetune_full_depth(job, shape, attention, samples, built, full_layers, notes, cost)
        memory_full = depth.memory_full_depth(monitor, static_layers, static_rest, built, full_layers, notes)
    return Case(name=spec.name, params=spec.params, layers=built, full_layers=full_layers if built else None,
                metrics=tuple(metrics), peak_memory=monitor.result(extrapolated_allocated_bytes=memory_full),
                startup=clock.phases(), notes=tuple(notes))


def _training_model(spec: LlmCaseSpec, job: FinetuneJob, config: dict[str, Any], attention: str,
                    monitor: PeakMemoryMonitor) -> tuple[Any, Any, list[str]]:
    import torch

    notes = []
    dtype = param_dtype(torch, job.precision, job.method)
    quantization = bnb_4bit_config(dtype, job.unquantized_modules) if job.method == "qlora" and spec.weights else None
    model = build_model(spec, config, attention=attention, dtype=dtype, quantization=quantization)
    if job.method == "qlora" and not spec.weights:
        quantize_linears_nf4(model, dtype, job.unquantized_modules)
        monitor.restart()
        notes.append("QLoRA with random weights: built in 16-bit, then each linear quantized to NF4; peak "
                     "memory counts from after quantization (a checkpoint load quantizes shard by shard)")
    if job.method != "full":
        model.requires_grad_(False)
    if job.gradient_checkpointing:
        enable_checkpointing(model, job.checkpoint_policy, job.checkpoint_layer_interval)
        notes.append(f"activation checkpointing: {job.checkpoint_policy}"
                     + {"selective": " (SAC: matmul and attention outputs saved)",
                        "selective_op": " (torchtitan op-level SAC: attention outputs and every other matmul saved)",
                        "selective_layers": f" (decoder layers {job.checkpoint_layer_interval}, "
                                            f"{2 * job.checkpoint_layer_interval}, … checkpointed)",
                        }.get(job.checkpoint_policy, ""))
    if job.method != "full":
        shape = model_shape(config)
        # Without a known layout, peft's own "all-linear" (or the spec's names) picks the layers.
        targets = lora_target_names(shape, job.lora) if shape else job.lora.target_modules
        model = apply_lora(model, job.lora.rank, job.lora.alpha, targets)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer: Any
    if job.optimizer_in_backward:
        optimizer = PerParameterOptimizers(optimizer_in_backward(job.optimizer, trainable, spec.device))
        notes.append("optimizer in the backward: one optimizer per parameter, stepped by its post-accumulate-grad "
                     "hook, gradient freed at once")
    else:
        optimizer = build_optimizer(job.optimizer, trainable, spec.device)
    notes.append(f"trainable parameters: {sum(p.numel() for p in trainable):,} of "
                 f"{sum(p.numel() for p in model.parameters()):,}; parameters in {str(dtype).removeprefix('torch.')}")
    return model, optimizer, notes


def _training_step(spec: LlmCaseSpec, job: FinetuneJob, model: Any, optimizer: Any, notes: list[str]) -> Any:
    import torch

    batches = itertools.cycle(token_batches(spec, vocab=int(model.config.vocab_size), batch=job.micro_batch,
                                            seq_len=row_tokens(job),
                                            count=spec.settings.warmup + spec.settings.repeats))
    forward = model
    if job.compile:
        forward, backend = compile_model(torch, model, spec.device)
        notes.append(f"torch.compile backend: {backend}"
                     + ("" if backend == "inductor" else " (no C++ compiler here for inductor's CPU kernels)"))
    offload = (lambda: offload_activations(torch, model, fake=False)) if job.activation_offload else nullcontext
    if job.activation_offload:
        notes.append("activation offload: saved tensors ≥ 1 KiB (not parameters, not the LM head's) copied to host "
                     "memory in the forward and back in the backward")
    if row_tokens(job) != job.seq_len:
        notes.append(f"rows of {row_tokens(job)} tokens: padding = 'longest' at micro_batch 1 pads each example "
                     "to its own length (sample_tokens)")
    mixed = autocast(torch, job.precision, spec.device)
    scaler = None
    if job.precision == "fp16_mixed":
        if spec.device == "cuda":
            scaler = torch.amp.GradScaler("cuda")
        else:
            notes.append("fp16 mixed precision on the CPU: no GradScaler (it is a CUDA-side recipe)")

    def step() -> None:
        ids = next(batches)
        with offload():
            with mixed:
                loss = forward(input_ids=ids, labels=ids, use_cache=False).loss
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        if job.optimizer_in_backward:
            return  # each parameter was updated, and its gradient freed, inside the backward
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _finetune_metrics(spec: LlmCaseSpec, job: FinetuneJob, shape: ModelShape | None, attention: str,
                      samples: list[float], notes: list[str], cost: JobCost) -> list[Metric]:
    tokens = job.micro_batch * data_tokens_per_row(job)
    metrics = [
        timed_metric("step_s", "s", samples, note=FINETUNE_UNIT_NOTE),
        derived_metric("tokens_per_s", "tokens/s", [tokens / s for s in samples],
                       note="micro_batch × seq_len / step_s" if job.sample_tokens is None or job.packing
                       else "micro_batch × sample_tokens (dataset tokens, padding excluded) / step_s"),
        derived_metric("samples_per_s", "samples/s", [job.micro_batch / s for s in samples],
                       note="micro_batch / step_s"),
        _job_metric("job_s", job, samples, cost),
        *_save_metric(cost),
    ]
    if shape is None:
        notes.append("FLOPs not computed: gpuscout does not know this model_type's layout")
        return metrics
    flops = training_flops(job.model_copy(update={"attention": attention}), shape)
    metrics.append(derived_metric("achieved_tflops", "TFLOP/s", [flops.total / s / 1e12 for s in samples],
                                  note=f"FLOPs per step / step_s, recompute included; {training_flops_rule(job)} "
                                       "(workload/flops.py)"))
    peak, why = _catalog_peak(spec, COMPUTE_DTYPE[job.precision])
    if peak is None:
        notes.append(why)
    else:
        metrics.append(derived_metric("mfu", "fraction", [flops.useful / (s * peak) for s in samples],
                                      note=f"useful FLOPs / (step_s × {spec.gpu_sku} dense "
                                           f"{COMPUTE_DTYPE[job.precision]} peak {peak / 1e12:,.0f} TFLOP/s)"))
    return metrics


@dataclass(frozen=True)
class JobCost:
    """What the whole job pays besides its repeats: the case's start-up, and one checkpoint save."""

    startup_s: float
    save_s: float | None


def _job_metric(name: str, job: FinetuneJob, step_samples: list[float], cost: JobCost, *,
                extrapolated: bool = False) -> Metric:
    """The whole-job time at each repeat's step time (workload/jobtime.py, the one definition)."""
    return derived_metric(name, "s", [whole_job_s(job, s, startup_s=cost.startup_s, save_s=cost.save_s or 0.0)
                                      for s in step_samples], higher_is_better=False, extrapolated=extrapolated,
                          note="projected: " + whole_job_formula(job, startup_s=cost.startup_s, save_s=cost.save_s)
                               + "; linear scaling over data-parallel ranks, no communication")


def _save_metric(cost: JobCost) -> list[Metric]:
    if cost.save_s is None:
        return []
    return [Metric(name="checkpoint_save_s", unit="s", value=cost.save_s,
                   note="one save of the trainable weights (safetensors) and the optimizer state, fsync'd")]


def time_checkpoint_save(model: Any, optimizer: Any) -> float:
    """Seconds to save what a resumable checkpoint holds: trainable weights and the optimizer state."""
    import torch
    from safetensors.torch import save_file

    weights = {n: p.detach().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    with tempfile.TemporaryDirectory(prefix="gpuscout-ckpt-") as folder:
        start = time.perf_counter()
        save_file(weights, os.path.join(folder, "adapter.safetensors"))
        torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        return time.perf_counter() - start


def _finetune_full_depth(job: FinetuneJob, shape: ModelShape | None, attention: str, samples: list[float],
                         built: int, full: int, notes: list[str], cost: JobCost) -> list[Metric]:
    if shape is None:
        notes.append("no full-depth extrapolation: gpuscout does not know this model_type's layout")
        return []
    fraction = training_flops(job.model_copy(update={"attention": attention}), shape).layer_fraction
    scaled = [depth.scale_time(s, fraction, built, full) for s in samples]
    tokens = job.micro_batch * job.seq_len
    how = f"t_full = t_{built} · ((1 − f) + f · {full}/{built}), f = {fraction:.3f} (layers' FLOPs share)"
    return [
        timed_metric("step_s_full_depth", "s", scaled, note=how, extrapolated=True),
        derived_metric("tokens_per_s_full_depth", "tokens/s", [tokens / s for s in scaled], note=how,
                       extrapolated=True),
        derived_metric("samples_per_s_full_depth", "samples/s", [job.micro_batch / s for s in scaled], note=how,
                       extrapolated=True),
        # A checkpoint of the full model holds full/built times the layers' parameters (an upper bound).
        _job_metric("job_s_full_depth", job, scaled,
                    JobCost(cost.startup_s, cost.save_s and cost.save_s * full / built), extrapolated=True),
    ]


def _catalog_peak(spec: LlmCaseSpec, dtype: str) -> tuple[float | None, str]:
    if spec.device != "cuda":
        return None, "MFU not computed on the CPU: the catalog holds GPU peaks only"
    if spec.gpu_sku is None:
        return None, "MFU not computed: this GPU's name matched no catalog SKU"
    try:
        return peak_flops_per_s(find_gpu(spec.gpu_sku), dtype), ""
    except GpuscoutError as exc:
        return None, f"MFU not computed: {exc.what}"
