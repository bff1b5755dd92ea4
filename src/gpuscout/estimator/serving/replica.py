"""What one replica of a serving job holds, simulated: users at the SLO, or its saturated throughput.

`estimate` shows it per GPU as a capacity line; `pick` (cost/simulated.py) uses the same sizing.
The users held at the SLO are bisected at both ends of the speed model's band: the expected costs
and the slow end (each cost × its efficiency row's band_high); the slow end is the figure to plan
with. A job without SLO targets gets the replica's saturated throughput instead: its engine full
(max_num_seqs users, or as many as the KV cache holds at the job's context, the fewer), closed loop.
"""

from __future__ import annotations

from gpuscout.estimator.serving.capacity import REQUESTS_PER_USER, max_concurrency_at_slo
from gpuscout.estimator.serving.from_speed import engine_limits, simulable, step_costs
from gpuscout.estimator.serving.model import Arrivals, SimConfig
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.job import InferenceJob, Slo
from gpuscout.workload.shape import ModelShape

# Requests one closed-loop simulation runs: at least 400 (a P95 from 20 samples above it), and the
# simulator's own 5 a user past 80 users (estimator/serving/capacity.py REQUESTS_PER_USER, so a run
# here and a bisection's run at the same users are the same run), at most 20,000. Measured on the
# example sheet: 8 shapes of Llama-3-8B at 500 users, 135 runs, took 9.5 s at a flat 2,000 requests;
# the first of them, 1 user, alone 0.2 s (benchmarks/serving_sim_speed.py for the simulator's speed).
SIM_REQUESTS_MIN = 400
SIM_REQUESTS_PER_USER = REQUESTS_PER_USER
SIM_REQUESTS_MAX = 20_000


def sim_requests(users: int) -> int:
    """Requests a closed-loop simulation of `users` runs."""
    return min(max(SIM_REQUESTS_MIN, SIM_REQUESTS_PER_USER * users), SIM_REQUESTS_MAX)


def has_targets(slo: Slo) -> bool:
    return any(v is not None for v in (slo.ttft_p95_s, slo.tpot_p95_s, slo.e2e_p95_s))


class ReplicaCapacity(Frozen):
    """One replica (`gpus` GPUs, tensor parallel) of the job, simulated."""

    gpu_sku: str
    gpus: int
    users_held: int | None = None  # users at the SLO, expected costs; None: the job has no SLO targets
    users_held_slow: int | None = None  # the same at the band's slow end (the figure to plan with)
    saturated_users: int | None = None  # no SLO: the closed-loop users that fill the engine
    output_tokens_per_s: float  # at users_held (or saturated), expected costs
    output_tokens_per_s_slow: float  # at users_held_slow (or saturated), slow end
    costs_source: str


def _configs(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> tuple[SimConfig, SimConfig]:
    limits = engine_limits(job, shape, gpu)
    tp = job.tensor_parallel
    return (SimConfig(costs=step_costs(job, shape, gpu), limits=limits, tensor_parallel=tp),
            SimConfig(costs=step_costs(job, shape, gpu, slow_end=True), limits=limits, tensor_parallel=tp))


def _closed(job: InferenceJob, users: int) -> Arrivals:
    return Arrivals(kind="concurrency", concurrency=users, requests=sim_requests(users),
                    prompt_tokens=job.prompt_tokens, output_tokens=job.output_tokens)


def replica_capacity(job: InferenceJob, shape: ModelShape, gpu: Gpu) -> ReplicaCapacity:
    """One replica of `job` at its tensor_parallel on `gpu` (the caller checks `simulable` first;
    a SpecError when its KV cache has no room)."""
    why = simulable(job)
    if why is not None:
        raise ValueError(why)
    expected, slow = _configs(job, shape, gpu)
    base = {"gpu_sku": gpu.sku, "gpus": job.tensor_parallel, "costs_source": expected.costs.source}
    if has_targets(job.slo):
        # Up to max_num_seqs: past it new users only queue, so the SLO holds past it only for a loose
        # target; the bisection stays bounded by the engine's batch (docs/serving_sim.md).
        held = [max_concurrency_at_slo(config, job.slo, prompt_tokens=job.prompt_tokens,
                                       output_tokens=job.output_tokens, requests=SIM_REQUESTS_MIN,
                                       max_concurrency=expected.limits.max_num_seqs)
                for config in (expected, slow)]
        users = [cap.concurrency or 0 for cap in held]
        rates = [cap.result.output_tokens_per_s if cap.result is not None and n else 0.0
                 for cap, n in zip(held, users, strict=True)]
        return ReplicaCapacity(**base, users_held=users[0], users_held_slow=users[1], output_tokens_per_s=rates[0],
                               output_tokens_per_s_slow=rates[1])
    full = max(1, min(expected.limits.max_num_seqs, expected.limits.kv_tokens // job.context_tokens))
    fast_run, slow_run = simulate(expected, _closed(job, full)), simulate(slow, _closed(job, full))
    return ReplicaCapacity(**base, saturated_users=full, output_tokens_per_s=fast_run.output_tokens_per_s,
                           output_tokens_per_s_slow=slow_run.output_tokens_per_s)
