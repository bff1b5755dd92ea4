"""A serving job's SLO verdict and capacity on one instance shape, from the serving simulator.

The speed model times a lone request; what a deployment is decided on is a queueing question. Here
one replica of the placed job (its tensor-parallel group) is simulated at the job's load with the
speed model's step costs (estimator/serving/from_speed.py), and the verdict is judged at the slow
end of the speed model's band (every cost × its row's band_high), so that an uncertain verdict errs
toward more GPUs (docs/serving_sim.md, "Where the simulation is used"):

* the job's `concurrency` users, closed loop, spread over the instance's replicas (⌈C / R⌉ each):
  the users one replica holds at the SLO (bisection), the replicas that makes and the instances of
  the offer they take (more than one when the instance's replicas cannot hold the users: the bill is
  that many instances'), the SLO verdict at the resulting load, and the job's runtime from the
  simulated throughput (expected costs; the band's slow end from the slow-end simulation);
* a target rate (`pick --target-rps`), Poisson: the rate one replica holds at the SLO (bisection),
  the replicas and instances it takes, and the job's requests over that rate.

Each shape is simulated once per ranking (the caller caches layouts per GPU × count), and each
simulation runs a bounded number of requests, so a sheet of thousands of offers stays quick.
"""

from __future__ import annotations

import math

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.serving.capacity import max_concurrency_at_slo, max_rate_at_slo
from gpuscout.estimator.serving.from_speed import engine_limits, simulable, step_costs
from gpuscout.estimator.serving.goodput import slo_misses
from gpuscout.estimator.serving.model import Arrivals, SimConfig, SimResult
from gpuscout.estimator.serving.replica import SIM_REQUESTS_MIN, has_targets, sim_requests
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.workload.job import InferenceJob, Slo
from gpuscout.workload.shape import ModelShape

SOURCE_SIMULATED = "simulated"
SOURCE_MEASURED = "measured"
SOURCE_ESTIMATE = "single-request estimate"
# Requests one open-loop (target rate) simulation runs: a P95 from 100 samples above it, and the
# simulator's default sample for a rate bisection doubled (estimator/serving/capacity.py).
RATE_REQUESTS = 2_000


class SimulatedLoad(Frozen):
    """One replica of a serving layout simulated at the job's load."""

    load: str  # '10 users a replica' or 'Poisson 12 req/s over 3 replicas'
    users_per_replica: int | None  # closed loop: the job's users each replica serves
    replicas_used: int  # replicas that serve (fewer than the instance's when there are fewer users)
    instances: int = 1  # a target rate may need several instances of the offer
    held_users: int | None = None  # users one replica holds at the SLO (slow end); None: no SLO targets
    held_at_least: bool = False  # the search stopped at the job's users, all met: it holds at least that many
    held_rate_per_s: float | None = None  # requests/s one replica holds at the SLO (target-rate loads)
    replicas_needed: int | None = None  # for the job's users or the target rate; None: none would do
    misses: tuple[str, ...] = ()  # SLO targets missed at the load, slow end
    one_instance_misses: tuple[str, ...] = ()  # several instances: what one alone would miss at the job's users
    one_instance_users: int | None = None  # the users a replica of one instance alone would serve
    requests_per_s: float  # the whole deployment's, at the load (expected costs)
    slow_requests_per_s: float  # the same at the band's slow end
    output_tokens_per_s: float
    ttft_p95_s: float  # at the load, slow end
    tpot_p95_s: float
    latency_means_s: tuple[float, float, float]  # TTFT, TPOT, e2e means at the load, expected costs
    costs_source: str


def simulate_layout(timed: InferenceJob, placed: InferenceJob, model: object, gpu: Gpu, replicas: int,
                    target_rps: float | None) -> SimulatedLoad | str:
    """The job simulated on `replicas` replicas of `placed` (its tensor-parallel group) on `gpu`, or why
    it cannot be: the step costs are of `timed` (the job as the speed model times it), the engine's
    limits and KV blocks of `placed` (a plan's fp8 KV cache holds more)."""
    why = simulable(placed)
    if why is not None:
        return why
    if not isinstance(model, ModelShape):
        return "the model is not one language model the simulator can time"
    try:
        limits = engine_limits(placed, model, gpu)
        expected = SimConfig(costs=step_costs(timed, model, gpu), limits=limits, tensor_parallel=placed.tensor_parallel)
        slow = SimConfig(costs=step_costs(timed, model, gpu, slow_end=True), limits=limits,
                         tensor_parallel=placed.tensor_parallel)
        if target_rps is not None:
            return _at_rate(placed, expected, slow, replicas, target_rps)
        return _at_users(placed, expected, slow, replicas)
    except (GpuscoutError, ValueError) as exc:  # a cost or limit outside the simulator's range
        return f"the simulation could not run ({str(exc).splitlines()[0][:160]})"


def _at_users(job: InferenceJob, expected: SimConfig, slow: SimConfig, replicas: int) -> SimulatedLoad:
    """The job's users over the instance's replicas; when one replica holds fewer at the SLO than that
    puts on it, over as many instances as the users need (the one instance's misses are kept)."""
    used = max(1, min(replicas, job.concurrency))
    users = math.ceil(job.concurrency / used)
    slow_run = simulate(slow, _closed(job, users))
    held = needed = None
    at_least = False
    instances = 1
    one_instance: tuple[str, ...] = ()
    alone = users
    if has_targets(job.slo):
        one_instance = tuple(slo_misses(slow_run, job.slo))
        if not one_instance:  # the replica holds its share: at least that many (no search, a sheet stays quick)
            held, at_least = users, True
        elif users == 1:
            held = 0
        else:  # the most it holds below its share, by bisection (bounded by the share, not by max_num_seqs)
            cap = max_concurrency_at_slo(slow, job.slo, prompt_tokens=job.prompt_tokens,
                                         output_tokens=job.output_tokens, requests=SIM_REQUESTS_MIN,
                                         max_concurrency=users - 1)
            held = cap.concurrency or 0
        needed = math.ceil(job.concurrency / held) if held else None
        if needed is not None and held < users:  # spread over more instances of the offer
            instances = math.ceil(needed / replicas)
            used = min(instances * replicas, job.concurrency)
            users = math.ceil(job.concurrency / used)
            slow_run = simulate(slow, _closed(job, users))
    fast_run = simulate(expected, _closed(job, users))
    load = f"{users} user{'s' if users > 1 else ''} a replica"
    sim = _load(load, users, used, instances, held, None, needed, job.slo, fast_run, slow_run, expected)
    return sim.model_copy(update={"one_instance_misses": one_instance if instances > 1 else (),
                                  "one_instance_users": alone, "held_at_least": at_least})


def _closed(job: InferenceJob, users: int) -> Arrivals:
    """The job's `users` closed loop, sampled as a bisection's run at that many users is."""
    return Arrivals(kind="concurrency", concurrency=users, requests=sim_requests(users),
                    prompt_tokens=job.prompt_tokens,
                    output_tokens=job.output_tokens)


def _at_rate(job: InferenceJob, expected: SimConfig, slow: SimConfig, replicas: int,
             target_rps: float) -> SimulatedLoad:
    """Replicas for `target_rps` Poisson arrivals: each holds the most its SLO allows (without targets: the
    most it sustains), and the deployment is simulated at its share of the rate."""
    cap = max_rate_at_slo(slow, job.slo, prompt_tokens=job.prompt_tokens, output_tokens=job.output_tokens,
                          requests=RATE_REQUESTS)
    held = cap.rate_per_s or 0.0
    if held <= 0:
        needed, used, share = None, replicas, target_rps / replicas
    else:
        needed = math.ceil(target_rps / held - 1e-9)
        used, share = needed, target_rps / needed
    instances = max(1, math.ceil(used / replicas))
    arrivals = Arrivals(kind="poisson", rate_per_s=share, requests=RATE_REQUESTS,
                        prompt_tokens=job.prompt_tokens, output_tokens=job.output_tokens)
    fast_run, slow_run = simulate(expected, arrivals), simulate(slow, arrivals)
    load = f"Poisson {target_rps:g} req/s over {used} replica{'s' if used > 1 else ''}"
    return _load(load, None, used, instances, None, held, needed, job.slo, fast_run, slow_run, expected)


def _load(load: str, users: int | None, used: int, instances: int, held: int | None, held_rate: float | None,
          needed: int | None, slo: Slo, fast_run: SimResult, slow_run: SimResult, expected: SimConfig) -> SimulatedLoad:
    misses = tuple(slo_misses(slow_run, slo)) if has_targets(slo) else ()
    if not slow_run.stable and slow_run.unstable:
        misses = (*misses, slow_run.unstable)
    return SimulatedLoad(
        load=load, users_per_replica=users, replicas_used=used, instances=instances, held_users=held,
        held_rate_per_s=held_rate, replicas_needed=needed, misses=misses,
        requests_per_s=fast_run.requests_per_s * used, slow_requests_per_s=slow_run.requests_per_s * used,
        output_tokens_per_s=fast_run.output_tokens_per_s * used, ttft_p95_s=slow_run.ttft_s.p95,
        tpot_p95_s=slow_run.tpot_s.p95, costs_source=expected.costs.source,
        latency_means_s=(fast_run.ttft_s.mean, fast_run.tpot_s.mean, fast_run.e2e_s.mean))


def miss_words(sim: SimulatedLoad, target_rps: float | None = None) -> str:
    """'P95 TTFT 2.75 s > 1 s at 10 users a replica (simulated, the band's slow end); a replica holds
    6 users: 4 replicas needed' — why the offer misses the SLO at the job's load."""
    if target_rps is not None and sim.replicas_needed is None:
        return "one replica holds no request rate at the SLO (simulated, the band's slow end)"
    words = f"{'; '.join(sim.misses)} at {sim.load} (simulated, the band's slow end)"
    if sim.held_users is not None:
        if sim.held_users == 0:
            return words + "; one replica misses it even for one user"
        return words + f"; a replica holds {sim.held_users} user{'s' if sim.held_users > 1 else ''}: " \
                       f"{sim.replicas_needed} replicas needed"
    return words



def one_instance_words(sim: SimulatedLoad) -> str | None:
    """'one instance alone misses the SLO: P95 TTFT 1.31 s > 1 s at the job's 20 users' (several instances)."""
    if sim.instances <= 1 or not sim.one_instance_misses:
        return None
    return (f"one instance alone misses the SLO ({'; '.join(sim.one_instance_misses)} at "
            f"{sim.one_instance_users} users a replica, the band's slow end): priced as {sim.instances} instances")
