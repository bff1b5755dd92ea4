"""Multi-GPU LoRA/QLoRA speed: what FSDP and DDP send over which link, how much of it hides behind
compute, the per-GPU matmul ceiling and the adapters' serial memory traffic (docs/estimator.md §3)."""

from __future__ import annotations

from gpuscout.estimator.efficiency import calibrated, default_efficiency
from gpuscout.estimator.params import quantized_linear_params
from gpuscout.estimator.speed.estimate import Efficiency, SpeedEstimate, estimate_speed
from gpuscout.estimator.speed.roofline import PhaseTime, Rates, link_bytes_per_s
from gpuscout.estimator.speed.train import (
    NF4_PACKED_BYTES,
    _hidden,
    gathered_param_bytes,
    matmul_scaled,
)
from gpuscout.estimator.training import trainable_params
from gpuscout.hardware.catalog import Gpu, find_gpu
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


def test_default_compute_follows_the_measured_matmul_ceiling_of_each_gpu() -> None:
    job = qlora(1, sharding="none")

    def compute(sku: str) -> float:
        gpu: Gpu = find_gpu(sku)
        return matmul_scaled(gpu, job, default_efficiency(gpu, "training")).compute

    a100, h100, rtx = compute("a100-sxm4-80gb"), compute("h100-sxm5-80gb"), compute("rtx-4090")
    assert a100 == default_efficiency(find_gpu("a100-sxm4-80gb"), "training").compute  # the reference
    assert h100 < a100 < rtx  # H100 GEMMs reach 0.80 of peak, A100 0.86, RTX 4090 about 1.0
    # a GPU without a published matmul measurement keeps the default
    assert compute("rtx-6000-ada") == default_efficiency(find_gpu("rtx-6000-ada"), "training").compute


def test_a_calibrated_efficiency_is_not_rescaled() -> None:
    gpu = find_gpu("h100-sxm5-80gb")
    measured = Efficiency(compute=0.61, bandwidth=0.9, link=0.4, overlap=0.8, band_low=0.9, band_high=1.1,
                          source="bench")

    class Measured:
        def efficiency_for(self, gpu: Gpu, phase: str, default: Efficiency) -> Efficiency:
            return measured

    job = qlora(1, sharding="none")
    with calibrated(Measured()):
        assert matmul_scaled(gpu, job, default_efficiency(gpu, "training")).compute == 0.61


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
