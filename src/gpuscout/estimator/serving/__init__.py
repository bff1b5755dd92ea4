"""A discrete-event simulator of one LLM serving replica under load (docs/serving_sim.md).

The engine's scheduler is simulated as vLLM V1 documents it (continuous batching, chunked prefill
under a token budget, KV blocks, preemption by recompute, prefix-cache hits), with each step's time
from `StepCosts`, so a serving verdict counts queueing rather than judging a lone request.
"""

from gpuscout.estimator.serving.model import (
    Arrivals,
    EngineLimits,
    Percentiles,
    SimConfig,
    SimResult,
    StepCosts,
    step_seconds,
)

__all__ = ["Arrivals", "EngineLimits", "Percentiles", "SimConfig", "SimResult", "StepCosts", "step_seconds"]
