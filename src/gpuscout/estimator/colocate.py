"""Memory of serving several models on the same GPUs: what adds up, and how the KV budget is shared.

gpuscout models co-serving as vLLM runs it: **one engine process per model** (a vLLM instance
serves one model), so every model brings its own CUDA context, CUDA graphs, NCCL buffers when
tensor-parallel, weights, profiled activations and KV cache. A shared-process server (one CUDA
context for all models) would hold one context and one set of graphs less per extra model; that
is not what is modelled. docs/estimator.md §2.12.

vLLM's `gpu_memory_utilization` is a per-instance share of the GPU's total memory
(`vllm/config/cache.py`). Each worker takes its start-up snapshot after the CUDA context and NCCL
exist, refuses to start when free memory is below utilization × total, and sizes its KV cache as
utilization × total − (weights + profiled peak activations + non-torch growth)
(`vllm/v1/worker/gpu_worker.py`); CUDA graphs are captured after that (vLLM 0.21 and later
take an estimate of them out of the budget first, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; here
they stay outside, counted on top: the safe side for fitting). So per engine i:

    inside_i  = weights + profiled activation peak (forward or sampler) + KV at its concurrency
                (what its own gpu_memory_utilization must cover)
    outside_i = CUDA context + NCCL + CUDA graphs (its process, beyond its fraction)

and the job fits when Σ (inside_i + outside_i) + the reserve (1 − u) × usable ≤ usable, u being
the spec's `gpu_memory_utilization`, read as the share all engines together may take. The split
gpuscout proposes gives engine i (inside_i + its share of the spare) / usable, the spare shared in
proportion to each KV cache (every model gets the same headroom factor on its concurrency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscout.estimator.breakdown import MemoryBreakdown, MemoryTerm, total_bytes
from gpuscout.estimator.inference import (
    kv_cache_term,
    process_terms,
    reserve_term,
    weight_terms,
    working_set_terms,
)
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu, usable_memory_bytes
from gpuscout.workload.colocated import ColocatedShape, labels, require_colocated, served_jobs
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import ModelShape

FRACTION_STEP = 1000  # proposed fractions in steps of 0.001: fine enough, short enough to type


class ServedModel(Frozen):
    """One engine of a co-served job on one GPU."""


    label: str
    model: str  # the spec's model reference
    concurrency: int
    largest_concurrency: int  # with every other model at its stated concurrency
    context_tokens: int
    gpu_memory_utilization: float  # the share to give this engine (what it needs, when it does not fit)
    inside_bytes: int  # weights, activations and KV at its concurrency: what its share must cover
    outside_bytes: int  # CUDA context, NCCL and CUDA graphs: its process, beyond its share
    kv_bytes_per_sequence: int


class Colocation(Frozen):
    """The co-served models on one GPU: the split of the GPU between engines and each one's limit."""


    gpu_memory_utilization: float  # all engines together (the spec's value)
    fits: bool
    spare_bytes: int  # budget left after every model at its concurrency (negative: short by this)
    models: tuple[ServedModel, ...]


@dataclass(frozen=True)
class _Engine:
    label: str
    job: InferenceJob
    inside: tuple[MemoryTerm, ...]
    outside: tuple[MemoryTerm, ...]
    kv_per_seq: int

    @property
    def need(self) -> int:
        return total_bytes(self.inside) + total_bytes(self.outside)

    @property
    def kv(self) -> int:
        return next(t.bytes for t in self.inside if t.category == "kv_cache")


def estimate_colocated_memory(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> MemoryBreakdown:
    """Per-GPU peak of every co-served engine together: each model's terms, named by model, then
    the one reserve vLLM's shares leave unused."""
    usable = usable_memory_bytes(gpu)
    engines = _engines(job, require_colocated(shape, job), gpu)
    terms = [_named(e.label, t) for e in engines for t in (*e.inside, *e.outside)]
    terms.append(reserve_term(job.gpu_memory_utilization, usable))
    plan = _plan(job, engines, usable)
    return MemoryBreakdown(
        job_kind="inference", gpu_sku=gpu.sku, gpus=job.tensor_parallel, usable_bytes=usable,
        terms=tuple(terms), peak_bytes=total_bytes(terms), notes=_notes(plan),
    )


def colocation(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> Colocation:
    """The split of the GPU between the engines and each model's largest concurrency."""
    return _plan(job, _engines(job, require_colocated(shape, job), gpu), usable_memory_bytes(gpu))


def _plan(job: InferenceJob, engines: list[_Engine], usable: int) -> Colocation:
    budget = usable - reserve_term(job.gpu_memory_utilization, usable).bytes
    spare = budget - sum(e.need for e in engines)
    kv_total = sum(e.kv for e in engines) or 1
    models = tuple(
        ServedModel(
            label=e.label, model=e.job.model, concurrency=e.job.concurrency,
            largest_concurrency=_largest(e, spare), context_tokens=e.job.context_tokens,
            gpu_memory_utilization=_share(e, max(spare, 0) * e.kv / kv_total, usable),
            inside_bytes=total_bytes(e.inside), outside_bytes=total_bytes(e.outside),
            kv_bytes_per_sequence=e.kv_per_seq,
        )
        for e in engines
    )
    return Colocation(gpu_memory_utilization=job.gpu_memory_utilization, fits=spare >= 0, spare_bytes=spare,
                      models=models)


def _engines(job: InferenceJob, shape: ColocatedShape, gpu: Gpu) -> list[_Engine]:
    shapes = (shape, *shape.co_served)
    return [_engine(name, j, s, gpu) for name, j, s in zip(labels(job), served_jobs(job), shapes, strict=True)]


def _engine(name: str, job: InferenceJob, shape: ModelShape, gpu: Gpu) -> _Engine:
    """One model's terms, split into what its gpu_memory_utilization covers and what its process adds."""
    inside = [*weight_terms(job, shape), kv_cache_term(job, shape), *working_set_terms(job, shape, gpu)]
    per_seq = kv_cache_term(job.model_copy(update={"concurrency": 1}), shape).bytes
    return _Engine(label=name, job=job, inside=tuple(inside), outside=tuple(process_terms(job, total_bytes(inside))),
                   kv_per_seq=per_seq)


def _largest(engine: _Engine, spare: int) -> int:
    """Sequences of its full context this model could hold, the others at their concurrency
    (only its KV cache grows with its concurrency under vLLM: the working set is sized by
    max_num_batched_tokens and the sampler by max_num_seqs)."""
    room = spare + engine.kv
    return max(room // engine.kv_per_seq, 0) if engine.kv_per_seq else 0


def _share(engine: _Engine, spare_share: float, usable: int) -> float:
    """The engine's gpu_memory_utilization: never below what it needs, rounded to 0.001."""
    inside = total_bytes(engine.inside)
    floor_needed = math.ceil(inside / usable * FRACTION_STEP) / FRACTION_STEP
    offered = math.floor((inside + spare_share) / usable * FRACTION_STEP) / FRACTION_STEP
    return max(floor_needed, offered)


def _named(label: str, t: MemoryTerm) -> MemoryTerm:
    return t.model_copy(update={"name": f"{label}: {t.name}"})


def _notes(plan: Colocation) -> tuple[str, ...]:
    shares = ", ".join(f"{m.label} {m.gpu_memory_utilization:.3f}" for m in plan.models)
    total = sum(m.gpu_memory_utilization for m in plan.models)
    largest = ", ".join(f"{m.label} {m.largest_concurrency:,}" for m in plan.models)
    if plan.fits:
        split = (f"one vLLM process per model, started one after another: --gpu-memory-utilization "
                 f"{shares} (sum {total:.3f}; each share holds weights, activations and KV; CUDA context and "
                 f"graphs sit beside it; all engines together within {plan.gpu_memory_utilization})")
    else:
        split = (f"does not fit: at their concurrency the engines need --gpu-memory-utilization {shares} "
                 f"(sum {total:.3f}) plus their CUDA contexts and graphs, over {plan.gpu_memory_utilization} "
                 "of the GPU")
    return split, f"largest concurrency, each with the others at theirs: {largest}"
