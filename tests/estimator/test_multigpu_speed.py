"""Multi-GPU LoRA/QLoRA speed: what FSDP and DDP send over which link, how much of it hides behind
compute, the per-GPU matmul ceiling and the adapters' serial memory traffic (docs/estimator.md §3)."""

from __future__ import annotations

import pytest

from gpuscout.estimator.efficiency import default_efficiency
from gpuscout.estimator.params import quantized_linear_params
from gpuscout.estimator.speed.estimate import Efficiency, SpeedEstimate, estimate_speed
from gpuscout.estimator.speed.roofline import PhaseTime, Rates, link_bytes_per_s
from gpuscout.estimator.speed.train import (
    NF4_PACKED_BYTES,
    _hidden,
    gathered_param_bytes,
    matmul_ceiling_scale,
)
from gpuscout.estimator.training import trainable_params
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.job import FinetuneJob
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape

GATHER = "parameter all-gather + gradient reduce-scatter"


def qlora(gpus: int, sharding: str = "fsdp", method: str = "qlora", **extra: object) -> FinetuneJob:
    spec: dict[str, object] = {
        "kind": "finetune", "model": "llama-3.1-8b", "method": method, "precision": "bf16_mixed",
        "optimizer": "adamw", "micro_batch": 2, "seq_len": 2048, "grad_accum": 1, "gradient_checkpointing": True,
        "attention": "flash", "dataset_tokens": 10_000_000, "gpus": gpus, "sharding": sharding, **extra,
    }
    return FinetuneJob.model_validate(spec)


def speed(job: FinetuneJob, shape: ModelShape, gpu: str) -> SpeedEstimate:
    return estimate_speed(job, shape, find_gpu(gpu))


def named(est: SpeedEstimate, name: str) -> PhaseTime:
    return next(p for p in est.phases if p.name == name)


def test_consumer_cards_without_p2p_are_slower_per_gpu_than_nvlink_a100s() -> None:
    shape = load_llm_preset("llama-3.1-8b")
    job = qlora(2)
    rtx, a100 = speed(job, shape, "rtx-4090"), speed(job, shape, "a100-sxm4-80gb")
    assert rtx.metrics["tokens_per_s"] / 2 < a100.metrics["tokens_per_s"] / 2
    # the same bytes take longer over host-staged PCIe than over NVLink
    assert named(rtx, GATHER).comm_bytes == named(a100, GATHER).comm_bytes
    assert named(rtx, GATHER).comm_s > 10 * named(a100, GATHER).comm_s
    # and the 4090's link is its PCIe figure cut to the host-staged fraction, below a P2P PCIe card's
    assert link_bytes_per_s(find_gpu("rtx-4090"), 2) < link_bytes_per_s(find_gpu("l40s"), 2)


def test_fsdp_qlora_gathers_the_packed_4bit_weights_not_a_16bit_copy() -> None:
    shape = load_llm_preset("llama-3.1-8b")
    packed = quantized_linear_params(shape)
    q_bytes, _ = gathered_param_bytes(qlora(2), shape)
    l_bytes, _ = gathered_param_bytes(qlora(2, method="lora"), shape)
    assert q_bytes == packed * NF4_PACKED_BYTES + (shape.params_total - packed) * 2
    assert l_bytes == shape.params_total * 2
    assert l_bytes - q_bytes == packed * (2 - NF4_PACKED_BYTES)


def test_communication_grows_with_the_models_packed_size() -> None:
    small, big = load_llm_preset("llama-3.1-8b"), load_llm_preset("llama-3.1-70b")
    job = qlora(4)
    comm_small = named(speed(job, small, "rtx-6000-ada"), GATHER)
    comm_big = named(speed(job.model_copy(update={"model": "llama-3.1-70b"}), big, "rtx-6000-ada"), GATHER)
    assert comm_big.comm_bytes > 5 * comm_small.comm_bytes
    assert comm_big.comm_s > 5 * comm_small.comm_s


def test_fsdp_reduces_only_the_adapter_gradients() -> None:
    shape = load_llm_preset("llama-3.1-8b")
    job, n = qlora(2), 2
    gathered, _ = gathered_param_bytes(job, shape)
    grads = trainable_params(job, shape) * 4  # fp32 adapters under bf16_mixed
    expected = 2 * (n - 1) / n * gathered + (n - 1) / n * grads
    assert abs(named(speed(job, shape, "a100-sxm4-80gb"), GATHER).comm_bytes - expected) < 1.0


def test_ddp_all_reduce_is_the_adapter_gradients_and_hides_behind_the_backward() -> None:
    shape = load_llm_preset("llama-3.1-8b")
    job = qlora(4, sharding="none")
    reduce = named(speed(job, shape, "a100-sxm4-80gb"), "gradient all-reduce")
    assert abs(reduce.comm_bytes - 2 * 3 / 4 * trainable_params(job, shape) * 4) < 1.0
    # a few hundred MB of adapter gradients hide behind a 4,096-token backward but for the last bucket
    assert reduce.seconds < reduce.comm_s


def test_exposed_communication_is_what_the_compute_window_cannot_cover() -> None:
    eff = Efficiency(compute=1, bandwidth=1, link=1, overlap=0.8, band_low=0.5, band_high=2, source="test")
    rates = Rates(flops_per_s=1e12, memory_bytes_per_s=1e12, link_bytes_per_s=1e9)
    # 10 s of communication in 10 chunks
    hidden_long, _ = _hidden(10e9, rates, eff, window_s=100.0, chunks=10, structural=True, why="test")
    hidden_short, _ = _hidden(10e9, rates, eff, window_s=4.0, chunks=10, structural=True, why="test")
    hidden_none, _ = _hidden(10e9, rates, eff, window_s=0.0, chunks=10, structural=True, why="test")
    assert abs(hidden_long - 0.9) < 1e-9  # all but the first chunk
    assert abs(hidden_short - (1 - (6 + 1) / 10)) < 1e-9  # 6 s past the window + the first chunk
    assert hidden_none == 0.0
    fixed, _ = _hidden(10e9, rates, eff, window_s=0.0, chunks=10, structural=False, why="test")
    assert fixed == 0.8  # no window known: the efficiency's overlap


def test_the_16bit_peak_follows_the_measured_matmul_ceiling_of_each_gpu() -> None:
    scale = {sku: matmul_ceiling_scale(find_gpu(sku), "bf16") for sku in ("a100-sxm4-80gb", "h100-sxm5-80gb",
                                                                          "rtx-4090", "rtx-6000-ada")}
    assert scale["a100-sxm4-80gb"] == 1.0  # the reference: the default was observed on A100s
    assert scale["h100-sxm5-80gb"] < 1.0 < scale["rtx-4090"]  # GEMMs reach 0.80 of peak on H100, 1.0 on a 4090
    assert scale["rtx-6000-ada"] == 1.0  # no published measurement: the datasheet figure
    assert matmul_ceiling_scale(find_gpu("h100-sxm5-80gb"), "fp32") == 1.0  # CUDA-core math is not a bf16 GEMM
    # the training step runs against the scaled peak; MFU stays against the datasheet one
    shape, gpu = load_llm_preset("llama-3.1-8b"), find_gpu("h100-sxm5-80gb")
    est = speed(qlora(1, sharding="none"), shape, "h100-sxm5-80gb")
    step = named(est, "training step")
    eff = default_efficiency(gpu, "training").compute
    assert step.compute_s == pytest.approx(step.flops / (gpu.bf16_flops_per_s * scale["h100-sxm5-80gb"] * eff))
    assert est.metrics["mfu"] < est.metrics["achieved_tflops"] * 1e12 / gpu.bf16_flops_per_s


def test_lora_adapter_kernels_add_memory_bound_time_that_grows_with_tokens() -> None:
    shape = load_llm_preset("llama-3.1-8b")
    short, long = qlora(1, sharding="none"), qlora(1, sharding="none", seq_len=4096)
    a = named(speed(short, shape, "h100-sxm5-80gb"), "LoRA adapter kernels")
    b = named(speed(long, shape, "h100-sxm5-80gb"), "LoRA adapter kernels")
    assert a.bound == "memory" and a.flops == 0.0
    assert abs(b.bytes / a.bytes - 2.0) < 1e-9
    full = speed(qlora(1, sharding="none", method="full", optimizer="adamw"), shape, "h100-sxm5-80gb")
    assert all(p.name != "LoRA adapter kernels" for p in full.phases)
    compiled = named(speed(qlora(1, sharding="none", compile=True), shape, "h100-sxm5-80gb"), "LoRA adapter kernels")
    assert compiled.bytes < a.bytes  # Inductor fuses the scaling into the add
