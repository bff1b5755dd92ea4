"""A discrete-event simulator of one LLM serving replica under load (docs/serving_sim.md).

The engine's scheduler is simulated as vLLM V1 documents it (continuous batching, chunked prefill
under a token budget, KV blocks, preemption by recompute, prefix-cache hits), with each step's time
from `StepCosts`, so a serving verdict counts queueing rather than judging a lone request.
"""

from gpuscout.estimator.serving.capacity import SimCapacity, max_concurrency_at_slo, max_rate_at_slo
from gpuscout.estimator.serving.goodput import goodput, slo_misses
from gpuscout.estimator.serving.model import (
    Arrivals,
    EngineLimits,
    Percentiles,
    SimConfig,
    SimResult,
    StepCosts,
    step_seconds,
)
from gpuscout.estimator.serving.simulate import saturated_rate, simulate

__all__ = ["Arrivals", "EngineLimits", "Percentiles", "SimCapacity", "SimConfig", "SimResult", "StepCosts",
           "goodput", "max_concurrency_at_slo", "max_rate_at_slo", "saturated_rate", "simulate", "slo_misses",
           "step_seconds"]
