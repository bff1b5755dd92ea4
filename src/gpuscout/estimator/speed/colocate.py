"""Time of serving several models on the same GPUs: each engine's work, time-sliced.

Each model runs in its own process (estimator/colocate.py). Without NVIDIA MPS, kernels from
different processes do not run at the same time: the GPU switches between their contexts
(NVIDIA MPS documentation, "When to Use MPS"). Each engine's own roofline estimate already runs
at the achieved bandwidth or compute rate, so two engines cannot overlap into more: their
bandwidth demands add up. gpuscout's model (docs/estimator.md §3.10):

    job       = Σ each engine's job time alone (the GPU does every engine's work, one at a time)
    band      = Σ low ends … Σ high ends × (1 + CONTEXT_SWITCH_ALLOWANCE)
    TTFT/TPOT of the main model = its own + one decode step of every other engine (while all are
              busy, one step of each other engine falls between two of its own)

Throughputs are for all models together. Latency targets (`[slo]`) are the main model's.
"""

from __future__ import annotations

from gpuscout.estimator.efficiency import Efficiency
from gpuscout.estimator.speed.roofline import SpeedEstimate
from gpuscout.estimator.speed.serve import estimate_inference_speed
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.colocated import labels, require_colocated, served_jobs
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.shape import ModelShape

# ASSUMPTION: switching the GPU between processes costs time no public source measures for
# serving engines (NVIDIA's MPS documentation names the overhead, without a figure); the
# pessimistic end gains 10% for it, the estimate itself does not.
CONTEXT_SWITCH_ALLOWANCE = 0.10


def estimate_colocated_speed(job: InferenceJob, shape: ModelShape, gpu: Gpu, *, gpus: int | None,
                             efficiency: Efficiency | None) -> SpeedEstimate:
    tp = gpus or job.tensor_parallel
    shapes = (shape, *require_colocated(shape, job).co_served)
    alone = [estimate_inference_speed(j, s, gpu, gpus=tp, efficiency=efficiency)
             for j, s in zip(served_jobs(job), shapes, strict=True)]
    names = labels(job)
    main, others = alone[0], alone[1:]
    interleaved = sum(o.metrics["decode_step_s"] for o in others)
    ttft, tpot = main.metrics["ttft_s"] + interleaved, main.metrics["tpot_s"] + interleaved
    job_s = sum(a.job_s for a in alone)
    requests, tokens = (sum(a.units[k] for a in alone) for k in ("requests", "output_tokens"))
    heaviest = max(alone, key=lambda a: a.job_s)
    low, high = sum(a.job_low_s for a in alone), sum(a.job_high_s for a in alone) * (1 + CONTEXT_SWITCH_ALLOWANCE)
    # The band as multipliers, so the SLO check (pessimistic end × latency) sees the allowance too.
    band = heaviest.efficiency.model_copy(update={"band_low": low / job_s, "band_high": high / job_s})
    return SpeedEstimate(
        job_kind="inference", gpu_sku=gpu.sku, gpus=tp, job_s=job_s, job_low_s=low, job_high_s=high,
        bound=heaviest.bound,
        metrics={"ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + (job.output_tokens - 1) * tpot,
                 "decode_step_s": main.metrics["decode_step_s"], "output_tokens_per_s": tokens / job_s,
                 "requests_per_s": requests / job_s},
        units={"requests": requests, "output_tokens": tokens},
        phases=tuple(p.model_copy(update={"name": f"{n}: {p.name}"}) for n, a in zip(names, alone, strict=True)
                     for p in a.phases),
        efficiency=band, notes=_notes(names, alone, interleaved),
    )


def _notes(names: tuple[str, ...], alone: list[SpeedEstimate], interleaved: float) -> tuple[str, ...]:
    each = ", ".join(f"{n} {a.job_s:,.0f} s" for n, a in zip(names, alone, strict=True))
    return (
        f"co-served, time-sliced (one process per model, no MPS): job = Σ each engine's time alone ({each}); "
        f"the pessimistic end adds {CONTEXT_SWITCH_ALLOWANCE:.0%} for context switches (ASSUMPTION)",
        f"{names[0]}'s TTFT and TPOT include one decode step of every other engine ({interleaved * 1e3:,.1f} ms); "
        "throughputs are all models together; the SLO is the main model's",
        f"efficiency and bound are those of the engine with the most work "
        f"({names[alone.index(max(alone, key=lambda a: a.job_s))]}); the band is the engines' bands summed",
        *alone[0].notes[:1],
    )
