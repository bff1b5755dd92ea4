"""Host RAM and disk of a job, each term checked against a hand computation."""

from __future__ import annotations

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.host import HostTerm, estimate_host
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob
from gpuscout.workload.shape import ModelShape

GIB = 2**30
P8B = 8_030_261_248  # Llama-3-8B parameters (exact; tests/workload checks them against transformers)
# LoRA rank 16 on every linear of Llama-3-8B, per layer r·(d_in + d_out):
# q, o 16·(4096+4096); k, v 16·(4096+1024); gate, up, down 16·(4096+14336); × 32 layers.
LORA16 = 32 * (2 * 16 * 8192 + 2 * 16 * 5120 + 3 * 16 * 18432)


def _terms(terms: tuple[HostTerm, ...]) -> dict[str, int]:
    return {t.name: t.bytes for t in terms}


def test_lora_rank_16_hand_count() -> None:
    assert LORA16 == 41_943_040


def test_zero_offload_holds_16_bytes_per_param_plus_pinned_buffers(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="full", optimizer_offload=True)
    ram = _terms(estimate_host(job, llama8b).ram)
    # fp32 master 4 + fp32 gradient 4 + Adam m 4 + v 4 = 16 B per parameter (ZeRO-Offload).
    assert ram["offloaded optimizer states"] == 16 * P8B
    assert ram["pinned buffers and slack"] == 8 * P8B  # DeepSpeed's factor 1.5 over the states
    # One fp32 load copy (4 B/param) is freed as the states are built: smaller than them, so it adds nothing.
    assert ram["checkpoint load copies"] == 0
    assert ram["process baseline"] == 3 * GIB
    assert ram["DataLoader workers"] == 2 * 3 * GIB // 2  # 1 process × 2 workers × 1.5 GiB
    assert estimate_host(job, llama8b).ram_bytes == 24 * P8B + 6 * GIB


def test_data_parallel_ranks_each_load_a_copy_but_zero3_loads_once(llama8b: ModelShape) -> None:
    ddp = FinetuneJob(kind="finetune", model="llama-3-8b", method="full", gpus=8)
    zero3 = ddp.model_copy(update={"sharding": "zero3"})
    assert _terms(estimate_host(ddp, llama8b).ram)["checkpoint load copies"] == 8 * P8B * 4
    assert _terms(estimate_host(zero3, llama8b).ram)["checkpoint load copies"] == P8B * 4
    assert _terms(estimate_host(ddp, llama8b).ram)["process baseline"] == 8 * 3 * GIB


def test_lora_disk_counts_kept_checkpoints_output_model_and_dataset(llama8b: ModelShape) -> None:
    # 10M tokens / (1 × 2048) per step → 4,883 steps; a save every 1,000 → 4 saves, 2 kept.
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="lora", checkpoint_every_steps=1000)
    disk = _terms(estimate_host(job, llama8b).disk)
    assert disk["checkpoints kept"] == 2 * LORA16 * (4 + 8)  # fp32 adapters + AdamW m, v in fp32
    assert disk["final output"] == LORA16 * 4
    assert disk["model weights"] == P8B * 2  # the 16-bit checkpoint as published
    assert disk["dataset"] == 10_000_000 * (4 + 16)
    assert disk["software environment"] == 20 * 10**9


def test_no_saves_no_checkpoints_and_a_given_dataset_size_wins(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b")
    disk = _terms(estimate_host(job, llama8b, dataset_bytes=500e9).disk)
    assert "checkpoints kept" not in disk
    assert disk["dataset"] == 500 * 10**9


def test_more_checkpoints_kept_never_shrink_the_disk(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", method="full", checkpoint_every_steps=100)
    sizes = [estimate_host(job.model_copy(update={"checkpoints_kept": k}), llama8b).disk_bytes for k in (1, 2, 5)]
    assert sizes[0] < sizes[1] < sizes[2]


def test_serving_stages_weights_per_replica_and_reserves_vllm_swap(llama8b: ModelShape) -> None:
    job = InferenceJob(kind="inference", model="llama-3-8b", tensor_parallel=2, requests=1000,
                       prompt_tokens=1000, output_tokens=250)
    needs = estimate_host(job, llama8b, processes=8)  # 4 replicas of TP 2
    ram = _terms(needs.ram)
    assert ram["weights staged while loading"] == 4 * P8B * 2
    assert ram["vLLM swap space"] == 8 * 4 * GIB
    disk = _terms(needs.disk)
    assert disk["outputs"] == 1000 * 250 * 4
    assert needs.output_bytes == 1000 * 250 * 4
    assert needs.workers_per_process == 0


def test_image_offload_keeps_the_pipeline_in_host_ram() -> None:
    sdxl = load_image_preset("sdxl")
    job = ImageJob(kind="image", model="sdxl", offload="model", images=100)
    needs = estimate_host(job, sdxl, processes=2)
    pipeline = _terms(needs.disk)["model weights"]
    assert _terms(needs.ram)["pipeline weights"] == 2 * pipeline
    assert _terms(needs.disk)["outputs"] == 100 * 1024 * 1024 * 3


def test_a_job_on_the_wrong_kind_of_model_is_a_clear_error(llama8b: ModelShape) -> None:
    with pytest.raises(SpecError):
        estimate_host(ImageJob(kind="image", model="sdxl"), llama8b)


def test_vcpus_wanted_is_a_core_per_process_and_worker(llama8b: ModelShape) -> None:
    job = FinetuneJob(kind="finetune", model="llama-3-8b", gpus=4, dataloader_workers=3)
    assert estimate_host(job, llama8b).vcpus_wanted == 4 * (1 + 3)
