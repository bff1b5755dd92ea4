"""How fast is the estimator? Target: 20 GPUs × 100 job variants in well under a second.

Run: .venv/bin/python benchmarks/estimator_speed.py
Prints the wall time of 2,000 estimates (20 GPUs × 100 fine-tune/inference/image variants), the
median of 5 repeats, and the time per estimate. Pure arithmetic: no torch is imported.
"""

from __future__ import annotations

import statistics
import sys
import time

from gpuscout.estimator.memory import estimate_memory
from gpuscout.hardware.catalog import load_catalog
from gpuscout.workload.image import load_image_preset
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, Lora
from gpuscout.workload.model import Model
from gpuscout.workload.presets import load_llm_preset


def variants() -> list[tuple[Job, Model]]:
    llama, mixtral, sdxl = load_llm_preset("llama-3-8b"), load_llm_preset("mixtral-8x7b"), load_image_preset("sdxl")
    out: list[tuple[Job, Model]] = []
    for i in range(40):
        out.append((FinetuneJob(kind="finetune", model="llama-3-8b", method=("full", "lora", "qlora")[i % 3],
                                micro_batch=1 + i % 8, seq_len=512 * (1 + i % 8), lora=Lora(rank=8 << (i % 4)),
                                gradient_checkpointing=bool(i % 2), gpus=1 + i % 4, sharding="zero3"), llama))
    for i in range(40):
        out.append((InferenceJob(kind="inference", model="mixtral-8x7b", concurrency=1 + 4 * i,
                                 prompt_tokens=256 * (1 + i % 16), weights=("bf16", "fp8", "int4")[i % 3]), mixtral))
    for i in range(20):
        out.append((ImageJob(kind="image", model="sdxl", batch=1 + i % 4, width=512 + 64 * (i % 8),
                             height=512 + 64 * (i % 8)), sdxl))
    return out


def main() -> None:
    gpus = load_catalog()[:20]
    jobs = variants()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for job, model in jobs:
            for gpu in gpus:
                estimate_memory(job, model, gpu)
        times.append(time.perf_counter() - start)
    n = len(jobs) * len(gpus)
    med = statistics.median(times)
    print(f"{n} estimates ({len(gpus)} GPUs × {len(jobs)} variants): median {med * 1000:.1f} ms "
          f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}) over 5 runs; "
          f"{med / n * 1e6:.1f} µs per estimate; torch imported: {'torch' in sys.modules}")


if __name__ == "__main__":
    main()
