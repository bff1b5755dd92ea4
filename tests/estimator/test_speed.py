"""The speed model: hand-computed rooflines, monotonicity, bound switching, and the issue's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.errors import SpecError
from gpuscout.estimator.efficiency import EFFICIENCY_KINDS
from gpuscout.estimator.inference import weight_terms
from gpuscout.estimator.speed.estimate import Efficiency, SpeedEstimate, default_efficiency, estimate_speed
from gpuscout.estimator.speed.roofline import Rates, phase
from gpuscout.estimator.speed.serve import VLLM_REQUEST_OVERHEAD_S
from gpuscout.estimator.speed.train import training_flops
from gpuscout.hardware.catalog import Gpu, find_gpu, load_catalog
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape

IDEAL = Efficiency(compute=1.0, bandwidth=1.0, link=1.0, overlap=0.0, band_low=0.5, band_high=2.0, source="test")

# A made-up GPU whose rates make hand arithmetic easy: 1 GFLOP/s bf16, 1 GB/s memory, 1 GB/s links.
TOY_GPU = Gpu(
    sku="toy", name="Toy", vendor="nvidia", architecture="hopper", memory_bytes=10**10, memory_type="HBM",
    memory_bandwidth_bytes_per_s=1e9, bf16_flops_per_s=1e9, fp16_flops_per_s=1e9, fp32_flops_per_s=1e8,
    datasheet_is_sparse=False, interconnect="NVLink", nvlink_bytes_per_s=1e9, pcie_bytes_per_s=1e8,
    sources=("S1",),
)

# A 2-layer Llama: h = 64, f = 128, 4 heads of 16, no GQA, V = 100.
#   linears per layer: q,k,v,o 4·64·64 = 16,384 + gate,up,down 3·64·128 = 24,576 → 40,960; × 2 = 81,920
#   embeddings 6,400 + untied LM head 6,400 + norms (2 per layer + final) 5·64 = 320 → 95,040 params
TOY_CONFIG = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 512,
    "tie_word_embeddings": False, "hidden_act": "silu",
}


@pytest.fixture(scope="module")
def toy() -> ModelShape:
    return shape_from_hf_config(TOY_CONFIG, name="toy", source="test")


def _serve(**kw: object) -> InferenceJob:
    return InferenceJob.model_validate({"kind": "inference", "model": "m", **kw})


def _tune(**kw: object) -> FinetuneJob:
    return FinetuneJob.model_validate({"kind": "finetune", "model": "m", **kw})


def _image(**kw: object) -> ImageJob:
    return ImageJob.model_validate({"kind": "image", "model": "m", **kw})


# --- hand-computed cases -------------------------------------------------------------------------


def test_roofline_phase_by_hand() -> None:
    rates = Rates(flops_per_s=1e12, memory_bytes_per_s=1e9, link_bytes_per_s=1e9)
    p = phase("x", flops=2e12, bytes_moved=1e9, comm_bytes=3e9, hidden=0.5, rates=rates, efficiency=IDEAL, formula="")
    assert (p.compute_s, p.memory_s, p.comm_s) == (2.0, 1.0, 3.0)
    assert p.seconds == 2.0 + 1.5 and p.bound == "compute"
    q = phase("y", flops=1e12, bytes_moved=1e9, comm_bytes=4e9, rates=rates, efficiency=IDEAL, formula="")
    assert q.seconds == 1.0 + 4.0 and q.bound == "communication"


def test_toy_shape_matches_hand_count(toy: ModelShape) -> None:
    assert toy.params_total == 95_040
    assert sum(g.count * g.params_each for g in toy.linears) == 81_920


def test_serving_toy_model_by_hand(toy: ModelShape) -> None:
    est = estimate_speed(_serve(prompt_tokens=8, output_tokens=2, requests=1), toy, TOY_GPU, efficiency=IDEAL)
    prefill, decode = est.phases
    # Prefill of 8 tokens: 2·81,920·8 + attention 2 layers × 4·8·(8/2)·64 + LM head 2·64·100 (last token only).
    assert prefill.flops == 1_310_720 + 16_384 + 12_800
    # Bytes: bf16 weights 95,040 × 2 + KV written 2 layers × 2·4·16 values × 8 tokens × 2 B.
    assert prefill.bytes == 190_080 + 4_096
    assert prefill.seconds == pytest.approx(1_339_904 / 1e9) and prefill.bound == "compute"
    # Decode at mean context 8 + 2/2 = 9: FLOPs 2·81,920 + 2 × 4·9·64 + 12,800; bytes weights + KV of 9 tokens.
    assert decode.flops == 163_840 + 4_608 + 12_800
    assert decode.bytes == 190_080 + 4_608
    assert decode.seconds == pytest.approx(194_688 / 1e9) and decode.bound == "memory"
    # TTFT adds vLLM's fixed per-request server overhead, which job time does not pay (it overlaps).
    assert est.metrics["ttft_s"] == pytest.approx(1_339_904e-9 + VLLM_REQUEST_OVERHEAD_S)
    assert est.metrics["tpot_s"] == pytest.approx(194_688e-9)
    assert est.job_s == pytest.approx((1_339_904 + 194_688) / 1e9)
    assert (est.job_low_s, est.job_high_s) == pytest.approx((est.job_s * 0.5, est.job_s * 2.0))


def test_training_flops_toy_by_hand(toy: ModelShape) -> None:
    flops = training_flops(_tune(method="full", micro_batch=1, seq_len=8), toy)
    # Forward: linears 2·8·81,920 + attention 2 × 4·1·8·4·64 (causal SDPA) + LM head 2·8·64·100.
    assert (flops.linear_fwd, flops.attention_fwd, flops.head_fwd) == (1_310_720, 16_384, 102_400)
    assert flops.total == 3 * (1_310_720 + 16_384 + 102_400)


def test_optimizer_step_is_memory_bound_over_state_bytes(toy: ModelShape) -> None:
    est = estimate_speed(_tune(method="full", precision="bf16_mixed", optimizer="adamw"), toy, TOY_GPU,
                         efficiency=IDEAL)
    opt = next(p for p in est.phases if p.name == "optimizer step")
    # fp32 params read + written (8 B), fp32 grads read (4 B), Adam m and v read + written (16 B).
    assert opt.bytes == 95_040 * 28 and opt.bound == "memory"


# --- monotonicity ----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(10**5, 10**9), extra=st.integers(1, 10**9))
def test_more_tokens_never_faster(tokens: int, extra: int) -> None:
    shape, gpu = load_llm_preset("llama-3.2-1b"), find_gpu("a100")
    a = estimate_speed(_tune(dataset_tokens=tokens), shape, gpu)
    b = estimate_speed(_tune(dataset_tokens=tokens + extra), shape, gpu)
    assert b.job_s >= a.job_s


@settings(max_examples=25, deadline=None)
@given(requests=st.integers(1, 10**5), extra=st.integers(1, 10**5), concurrency=st.integers(1, 256))
def test_more_requests_never_faster(requests: int, extra: int, concurrency: int) -> None:
    shape, gpu = load_llm_preset("llama-3.2-1b"), find_gpu("l40s")
    a = estimate_speed(_serve(requests=requests, concurrency=concurrency), shape, gpu)
    b = estimate_speed(_serve(requests=requests + extra, concurrency=concurrency), shape, gpu)
    assert b.job_s >= a.job_s


@settings(max_examples=15, deadline=None)
@given(images=st.integers(1, 10**4), extra=st.integers(1, 10**4), batch=st.integers(1, 8))
def test_more_images_never_faster(images: int, extra: int, batch: int) -> None:
    model, gpu = load_image_preset("sd15"), find_gpu("rtx-4090")
    a = estimate_speed(_image(images=images, batch=batch, width=512, height=512), model, gpu)
    b = estimate_speed(_image(images=images + extra, batch=batch, width=512, height=512), model, gpu)
    assert b.job_s >= a.job_s


@settings(max_examples=25, deadline=None)
@given(factor=st.floats(1.0, 10.0), concurrency=st.integers(1, 512))
def test_more_bandwidth_never_slower_decode(factor: float, concurrency: int) -> None:
    shape, gpu = load_llm_preset("llama-3-8b"), find_gpu("h100")
    faster = gpu.model_copy(update={"memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s * factor})
    job = _serve(concurrency=concurrency)
    assert estimate_speed(job, shape, faster).metrics["decode_step_s"] <= estimate_speed(job, shape, gpu).metrics[
        "decode_step_s"]


def test_more_gpus_never_slower_compute_phase(llama8b: ModelShape, h100: Gpu) -> None:
    prefill = [estimate_speed(_serve(prompt_tokens=4096), llama8b, h100, gpus=t).phases[0].compute_s
               for t in (1, 2, 4, 8)]
    assert prefill == sorted(prefill, reverse=True)
    steps = [estimate_speed(_tune(method="full", sharding="fsdp"), llama8b, h100, gpus=n).phases[0].compute_s
             for n in (1, 2, 4, 8)]
    assert max(steps) <= steps[0]
    jobs = [estimate_speed(_tune(), llama8b, h100, gpus=n).job_s for n in (1, 2, 4, 8)]
    assert jobs == sorted(jobs, reverse=True)


# --- bound switching and the rules --------------------------------------------------------


def test_decode_batch_one_memory_bound_prefill_4k_compute_bound(llama8b: ModelShape, h100: Gpu) -> None:
    est = estimate_speed(_serve(prompt_tokens=4096, output_tokens=128, concurrency=1), llama8b, h100)
    prefill, decode = est.phases
    assert prefill.bound == "compute" and decode.bound == "memory"


def test_large_decode_batch_becomes_compute_bound(llama8b: ModelShape, h100: Gpu) -> None:
    est = estimate_speed(_serve(prompt_tokens=16, output_tokens=16, concurrency=4096), llama8b, h100)
    assert est.phases[1].bound == "compute"


def test_lora_step_faster_than_full(llama8b: ModelShape, h100: Gpu) -> None:
    full = estimate_speed(_tune(method="full"), llama8b, h100)
    lora = estimate_speed(_tune(method="lora"), llama8b, h100)
    assert lora.metrics["step_s"] < full.metrics["step_s"]
    assert lora.phases[0].flops / full.phases[0].flops == pytest.approx(2 / 3, abs=0.03)


def test_checkpointing_adds_a_third_of_6p(llama8b: ModelShape) -> None:
    plain = training_flops(_tune(method="full"), llama8b)
    ckpt = training_flops(_tune(method="full", gradient_checkpointing=True), llama8b)
    assert ckpt.total / plain.total == pytest.approx(4 / 3, abs=0.03)
    assert ckpt.useful == plain.useful  # MFU's numerator excludes recompute


def test_qlora_adds_dequantization(llama8b: ModelShape, h100: Gpu) -> None:
    lora = estimate_speed(_tune(method="lora"), llama8b, h100)
    qlora = estimate_speed(_tune(method="qlora"), llama8b, h100)
    assert any(p.name == "NF4 dequantization" and p.bound == "memory" for p in qlora.phases)
    assert qlora.metrics["step_s"] > lora.metrics["step_s"]


def test_tensor_parallel_communication_only_when_split(llama8b: ModelShape) -> None:
    h100, l40s = find_gpu("h100"), find_gpu("l40s")
    single = estimate_speed(_serve(), llama8b, h100)
    assert all(p.comm_s == 0 for p in single.phases)
    nvlink = estimate_speed(_serve(tensor_parallel=2), llama8b, h100)
    pcie = estimate_speed(_serve(tensor_parallel=2), llama8b, l40s)
    assert nvlink.phases[1].comm_s > 0
    assert nvlink.phases[1].comm_bytes == pcie.phases[1].comm_bytes
    assert nvlink.phases[1].comm_s < pcie.phases[1].comm_s


def test_data_parallel_all_reduce_and_fsdp_gathers(llama8b: ModelShape, h100: Gpu) -> None:
    ddp = estimate_speed(_tune(method="full"), llama8b, h100, gpus=8)
    fsdp = estimate_speed(_tune(method="full", sharding="fsdp"), llama8b, h100, gpus=8)
    assert any(p.name == "gradient all-reduce" for p in ddp.phases)
    gather = next(p for p in fsdp.phases if p.name.startswith("parameter all-gather"))
    # 2 × (n−1)/n × 16-bit params + (n−1)/n × fp32 grads (8.03 B params, bf16 mixed).
    assert gather.comm_bytes == pytest.approx(7 / 8 * llama8b.params_total * (2 * 2 + 4))
    assert not any(p.comm_s for p in estimate_speed(_tune(), llama8b, h100).phases)


def test_band_brackets_job_time(llama8b: ModelShape, h100: Gpu) -> None:
    for est in (estimate_speed(_tune(), llama8b, h100), estimate_speed(_serve(), llama8b, h100),
                estimate_speed(_image(), load_image_preset("sdxl"), h100)):
        e = est.efficiency
        assert e.band_low < 1 < e.band_high
        assert est.job_low_s == pytest.approx(est.job_s * e.band_low)
        assert est.job_high_s == pytest.approx(est.job_s * e.band_high)


def test_flux_not_doubled_by_guidance_sdxl_is(h100: Gpu) -> None:
    flux, sdxl = load_image_preset("flux-dev"), load_image_preset("sdxl")
    assert _denoiser_flops(_image(guidance=True), flux, h100) == _denoiser_flops(_image(guidance=False), flux, h100)
    assert _denoiser_flops(_image(guidance=True), sdxl, h100) == 2 * _denoiser_flops(_image(guidance=False), sdxl, h100)


def _denoiser_flops(job: ImageJob, model: object, gpu: Gpu) -> float:
    est = estimate_speed(job, model, gpu)  # type: ignore[arg-type]
    return next(p.flops for p in est.phases if p.name == "denoiser step")


def test_flux_transformer_flops_scale_with_tokens(h100: Gpu) -> None:
    flux = load_image_preset("flux-dev")
    small = _denoiser_flops(_image(width=512, height=512), flux, h100)
    large = _denoiser_flops(_image(width=1024, height=1024), flux, h100)
    assert 3 < large / small < 5  # linear part ×3.8 in tokens, attention quadratic


def test_moe_decode_reads_routed_experts_at_small_batch(h100: Gpu) -> None:
    mixtral = load_llm_preset("mixtral-8x7b")
    job = _serve(tensor_parallel=2, prompt_tokens=16, output_tokens=2, kv_cache_dtype="fp8")
    resident = sum(t.bytes for t in weight_terms(job, mixtral))
    one = estimate_speed(job.model_copy(update={"concurrency": 1}), mixtral, h100).phases[1]
    many = estimate_speed(job.model_copy(update={"concurrency": 512}), mixtral, h100).phases[1]
    assert one.bytes < 0.4 * resident  # top-2 of 8 experts (llmfit#474)
    assert many.bytes == pytest.approx(resident, rel=0.02)  # every expert touched, capped at resident


def test_fp8_uses_fp8_peak_where_supported(llama8b: ModelShape) -> None:
    h100, a100 = find_gpu("h100"), find_gpu("a100")
    assert "compute dtype fp8" in estimate_speed(_serve(weights="fp8"), llama8b, h100).notes[0]
    assert "compute dtype bf16" in estimate_speed(_serve(weights="fp8"), llama8b, a100).notes[0]


def test_job_units_and_metrics(llama8b: ModelShape, h100: Gpu) -> None:
    tune = estimate_speed(_tune(dataset_tokens=1_000_000, epochs=2, micro_batch=2, seq_len=1024, grad_accum=4),
                          llama8b, h100, gpus=2)
    assert tune.units == {"tokens": 2_000_000, "epochs": 2, "steps": 123.0}  # ceil(2e6 / (2·1024·4·2))
    assert set(tune.metrics) >= {"step_s", "tokens_per_s", "samples_per_s", "mfu", "achieved_tflops"}
    assert 0 < tune.metrics["mfu"] <= tune.efficiency.compute
    serve = estimate_speed(_serve(requests=100, output_tokens=50), llama8b, h100)
    assert serve.units == {"requests": 100, "output_tokens": 5000}
    assert serve.metrics["e2e_s"] == pytest.approx(serve.metrics["ttft_s"] + 49 * serve.metrics["tpot_s"])
    image = estimate_speed(_image(images=10), load_image_preset("sd15"), h100)
    assert image.units == {"images": 10} and image.metrics["images_per_s"] > 0


def test_mismatched_job_and_model_is_a_spec_error(llama8b: ModelShape, h100: Gpu) -> None:
    with pytest.raises(SpecError):
        estimate_speed(_image(), llama8b, h100)


# --- efficiency defaults ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", EFFICIENCY_KINDS)
def test_default_efficiency_for_every_gpu(kind: str) -> None:
    for gpu in load_catalog():
        eff = default_efficiency(gpu, kind)
        assert eff.source and 0 < eff.compute <= 1 and eff.band_low < 1 < eff.band_high


def test_rtx5090_band_reflects_disputed_peak() -> None:
    gpu = find_gpu("rtx-5090")
    assert default_efficiency(gpu, "training").band_low == 0.55
    assert "mmapeak" in default_efficiency(gpu, "training").source
    assert default_efficiency(gpu, "decode").band_low == default_efficiency(find_gpu("h100"), "decode").band_low


def test_unknown_efficiency_kind(h100: Gpu) -> None:
    with pytest.raises(SpecError):
        default_efficiency(h100, "gaming")


def test_estimate_is_serializable(llama8b: ModelShape, h100: Gpu) -> None:
    est = estimate_speed(_serve(), llama8b, h100)
    assert SpeedEstimate.model_validate_json(est.model_dump_json()) == est
