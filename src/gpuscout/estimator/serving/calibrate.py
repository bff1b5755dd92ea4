"""Step costs learned from a load test: the engine's own step time, fitted through the simulator.

A `load` run measures what a user sees (TTFT, inter-token gaps, throughput), not what one engine step
costs. The simulator turns step costs into those figures, so the fit runs it: the free step costs are
the ones whose simulated TTFT and ITL P50/P95 and output throughput come closest to the measured
ones, in the least-squares sense on the logarithm of predicted / measured (a relative error: a 10%
miss on a 20 ms ITL weighs what a 10% miss on a 2 s TTFT weighs). The solver is Levenberg-Marquardt
on the logarithm of each cost (costs stay positive; numpy only), with finite-difference Jacobians.

What a short load at fixed prompt and output lengths can tell apart, and so what is fitted: the fixed
cost of a step (`overhead_s`), the cost of a step that does not grow with the batch (`weights_s`, the
memory side of the roofline), the cost of one new token (`compute_s_per_token`, the compute side), the
host time a request's first token pays (`request_overhead_s`) and the host time of each sequence a step
schedules (`seq_s`: the inter-token gap rising with the users where the GPU side barely grows). Context
costs (KV reads, attention pairs) grow with the context, which fixed lengths barely vary: they are kept
from the prior (0 without one; an estimate's `seq_s` is 0 and pulls nothing). With a prior, each
fitted cost is also pulled weakly toward it (`PRIOR_WEIGHT`), which settles the costs the observations
cannot separate (two constant terms) without moving what they do determine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from gpuscout.errors import SpecError
from gpuscout.estimator.serving.model import (
    MAX_SIM_CONCURRENCY,
    MAX_SIM_RATE,
    MAX_SIM_TOKENS,
    Arrivals,
    EngineLimits,
    SimConfig,
    SimResult,
    StepCosts,
)
from gpuscout.estimator.serving.simulate import simulate
from gpuscout.frozen import Frozen

FITTED = ("overhead_s", "weights_s", "compute_s_per_token", "request_overhead_s", "seq_s")
METRICS = ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s", "output_tokens_per_s")
# Relative weight of the pull toward the prior, against one metric's log residual: 0.1 = a factor of
# e (2.7x) away from the prior costs what a 10% miss of one measured figure costs. Small on purpose:
# the observations decide, the prior only breaks ties.
PRIOR_WEIGHT = 0.1
MIN_COST_S = 1e-7  # a fitted cost is kept above this (the logarithm needs > 0): 0.1 µs is nothing on any engine
# A fitted cost is kept below this: a step of a minute is far past any engine's (a flat direction of the
# least squares, a cost the observations do not bind, must not run off to the model's bound of an hour).
CEILING = math.log(60.0)
MAX_ITERATIONS = 40
# Finite-difference step, in log cost: 5%, past the small steps of a percentile over a finite run and
# inside the roofline's kink.
FD_STEP = 0.05


class ServingObservation(Frozen):
    """One load level as measured: what arrived, and what the user saw (seconds, per second)."""

    kind: Literal["concurrency", "poisson", "constant"]
    concurrency: int | None = Field(None, gt=0, le=MAX_SIM_CONCURRENCY)
    rate_per_s: float | None = Field(None, gt=0, le=MAX_SIM_RATE)
    requests: int = Field(gt=0)  # one run's requests (a level run several times pools their samples)
    seed: int = Field(0, ge=0, le=2**63 - 1)  # load's --seed: its Poisson gaps, which the simulator replays
    prompt_tokens: int = Field(gt=0, le=MAX_SIM_TOKENS)
    output_tokens: int = Field(gt=0, le=MAX_SIM_TOKENS)
    ttft_p50_s: float = Field(gt=0)
    ttft_p95_s: float = Field(gt=0)
    itl_p50_s: float = Field(gt=0)
    itl_p95_s: float = Field(gt=0)
    output_tokens_per_s: float = Field(gt=0)
    requests_per_s: float = Field(gt=0)
    source: str = Field("", max_length=500)  # "<result name>: concurrency 2"

    @model_validator(mode="after")
    def _kind_has_its_number(self) -> ServingObservation:
        if self.kind == "concurrency" and self.concurrency is None:
            raise ValueError("a closed-loop observation needs its concurrency")
        if self.kind != "concurrency" and self.rate_per_s is None:
            raise ValueError(f"a {self.kind} observation needs its rate_per_s")
        return self

    @property
    def label(self) -> str:
        return f"concurrency {self.concurrency}" if self.kind == "concurrency" else f"{self.kind} {self.rate_per_s:g}/s"

    def arrivals(self, *, requests: int | None = None) -> Arrivals:
        """The same load for the simulator: one run as `load` sent it (`requests` overrides its count)."""
        return Arrivals(kind=self.kind, concurrency=self.concurrency, rate_per_s=self.rate_per_s,
                        requests=requests or self.requests, prompt_tokens=self.prompt_tokens,
                        output_tokens=self.output_tokens, seed=self.seed)

    def measured(self, metric: str) -> float:
        value: float = getattr(self, metric)
        return value


class FitResidual(Frozen):
    """One measured figure beside what the fitted costs simulate for it."""

    observation: str
    metric: str
    measured: float
    fitted: float

    @property
    def error(self) -> float:
        """(fitted − measured) / measured."""
        return self.fitted / self.measured - 1.0


class StepFit(Frozen):
    """Fitted step costs, how well they reproduce the observations, and from how many."""

    costs: StepCosts
    residuals: tuple[FitResidual, ...]
    points: int  # observations fitted
    fitted: tuple[str, ...]  # the StepCosts fields the fit chose; the rest came from the prior
    rms_log_error: float  # root mean square of log(fitted / measured) over the residuals
    iterations: int


def predicted(result: SimResult, metric: str) -> float:
    """A simulated figure under an observation's metric name."""
    values = {"ttft_p50_s": result.ttft_s.p50, "ttft_p95_s": result.ttft_s.p95, "itl_p50_s": result.itl_s.p50,
              "itl_p95_s": result.itl_s.p95, "output_tokens_per_s": result.output_tokens_per_s}
    return values[metric]


def _costs(base: StepCosts, theta: np.ndarray, source: str) -> StepCosts:
    values = {name: float(math.exp(t)) for name, t in zip(FITTED, theta, strict=True)}
    return base.model_copy(update=values | {"source": source})


def _starts(observations: list[ServingObservation], prior: StepCosts | None) -> list[dict[str, float]]:
    """Where the solver starts: the prior, or costs read off the lightest load, split three ways.

    The lightest load's inter-token gap is one step of a small batch: fixed cost plus the weights' read,
    in an unknown split; its TTFT beyond a step is the prompt's compute plus the request's own host time.
    The step time is a maximum of two sides, so the least squares has a kink and may hold a local
    minimum: three splits (fixed cost 10%, 50%, 90% of the step) are each solved and the best kept.
    """
    light = min(observations, key=lambda o: o.concurrency or o.rate_per_s or 1)
    step = light.itl_p50_s
    per_seq = _per_seq_start(observations, step)
    if prior is not None:
        return [{name: max(getattr(prior, name), MIN_COST_S) for name in FITTED} | {"seq_s": prior.seq_s or per_seq}]
    beyond = max(light.ttft_p50_s - step, step)
    return [{"overhead_s": step * share, "weights_s": step * (1 - share),
             "compute_s_per_token": beyond * 0.8 / light.prompt_tokens, "request_overhead_s": beyond * 0.2,
             "seq_s": per_seq}
            for share in (0.1, 0.5, 0.9)]


def _per_seq_start(observations: list[ServingObservation], step: float) -> float:
    """A start for the per-sequence host time: the inter-token gap's rise per added user between the
    lightest and the heaviest closed-loop level (1% of a step when there is only one, or no rise)."""
    loops = sorted((o for o in observations if o.concurrency), key=lambda o: o.concurrency or 0)
    if len(loops) >= 2 and (loops[-1].concurrency or 0) > (loops[0].concurrency or 0):
        rise = (loops[-1].itl_p50_s - loops[0].itl_p50_s) / ((loops[-1].concurrency or 0) - (loops[0].concurrency or 0))
        if rise > 0:
            return rise
    return step * 0.01


def fit_step_costs(observations: list[ServingObservation] | tuple[ServingObservation, ...],
                   prior: StepCosts | None, *, limits: EngineLimits,
                   metrics: tuple[str, ...] = METRICS) -> StepFit:
    """Step costs whose simulation of each observed load comes closest to the measurement.

    `limits` are the engine's real scheduler settings (requests at once, token budget, KV blocks): the
    fit is only meaningful when the simulated engine runs the same limits as the measured one.
    """
    obs = list(observations)
    if not obs:
        raise SpecError("No load observations to fit step costs from.",
                        "The fit needs at least one measured load level.",
                        "Run `gpuscout load` at one or more concurrencies (e.g. --sweep 1,2) and pass its result.")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise SpecError(f"Unknown metric(s) {', '.join(unknown)}.", "The fit compares only what a load level "
                        "measures and the simulator predicts.", f"Fit from {', '.join(METRICS)}.")
    base = prior if prior is not None else StepCosts(overhead_s=1e-3, weights_s=0.0, kv_read_s_per_token=0.0,
                                                     compute_s_per_token=0.0, attention_s_per_pair=0.0,
                                                     source="no prior")
    measured = np.array([o.measured(m) for o in obs for m in metrics])
    source = ("calibrated from " + "; ".join(dict.fromkeys(o.source or o.label for o in obs)))[:500]
    floor = math.log(MIN_COST_S)
    anchor = np.log(np.array([max(getattr(prior, n), MIN_COST_S) for n in FITTED])) if prior is not None else None
    # The pull toward the prior only where the prior knows the cost: an estimate's per-sequence host time
    # is 0 (no public figure), which is no evidence that it is small.
    pull = (PRIOR_WEIGHT * np.array([1.0 if getattr(prior, n) > 0 else 0.0 for n in FITTED])
            if prior is not None else None)

    def simulated(theta: np.ndarray) -> np.ndarray:
        config = SimConfig(costs=_costs(base, theta, source), limits=limits)
        out: list[float] = []
        for o in obs:
            # Each observation simulated as load sent one run (its requests, its seed): a short run's
            # throughput carries its ramp and drain, which a long simulation would not.
            result = simulate(config, o.arrivals())
            out.extend(max(predicted(result, m), 1e-12) for m in metrics)
        return np.array(out)

    def residuals(theta: np.ndarray) -> np.ndarray:
        r: np.ndarray = np.log(simulated(theta) / measured)
        if anchor is not None:
            assert pull is not None
            r = np.concatenate([r, pull * (theta - anchor)])
        return r

    best: tuple[float, np.ndarray, int] | None = None
    for start in _starts(obs, prior):
        theta0 = np.log(np.array([max(start[n], MIN_COST_S) for n in FITTED]))
        cost, theta, iterations = _levenberg_marquardt(residuals, theta0, floor)
        if best is None or cost < best[0]:
            best = (cost, theta, iterations)
    assert best is not None
    _, theta, iterations = best
    costs = _costs(base, theta, source)
    fitted = simulated(theta)
    rows = []
    k = 0
    for o in obs:
        for m in metrics:
            rows.append(FitResidual(observation=o.label, metric=m, measured=float(measured[k]),
                                    fitted=float(fitted[k])))
            k += 1
    logs = np.log(fitted / measured)
    return StepFit(costs=costs, residuals=tuple(rows), points=len(obs), fitted=FITTED,
                   rms_log_error=float(np.sqrt(np.mean(logs**2))), iterations=iterations)


def _levenberg_marquardt(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray,
                         floor: float) -> tuple[float, np.ndarray, int]:
    """Minimise |residuals(theta)|² from `theta` (each coordinate kept in floor … CEILING); (cost, theta,
    iterations)."""
    lam = 1e-2
    r = residuals(theta)
    cost = float(r @ r)
    iterations = 0
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported
        jac = np.empty((r.size, theta.size))
        for j in range(theta.size):
            step = np.zeros_like(theta)
            step[j] = FD_STEP
            jac[:, j] = (residuals(theta + step) - r) / FD_STEP
        improved = converged = False
        normal = jac.T @ jac
        while lam < 1e8:
            delta = np.linalg.solve(normal + lam * np.diag(np.diag(normal) + 1e-9), -jac.T @ r)
            candidate = np.clip(theta + delta, floor, CEILING)
            rc = residuals(candidate)
            cc = float(rc @ rc)
            if cc < cost:
                converged = cost - cc < 1e-6 * max(cost, 1e-12)
                theta, r, cost, lam, improved = candidate, rc, cc, lam / 3, True
                break
            lam *= 4
        if not improved or converged:
            break
    return cost, theta, iterations


def predict(costs: StepCosts, limits: EngineLimits, observation: ServingObservation, *,
            requests: int | None = None) -> SimResult:
    """The simulator's answer for an observed load (to hold beside the measurement).

    By default it simulates one run as `load` sent it (the observation's requests a run and `--seed`):
    the simulator draws a Poisson level's gaps as `load` does (the first request at 0, then
    `random.Random(seed).expovariate(rate)`), so it replays the very schedule that was sent, and `load`
    counts throughput from a run's first send to its last reply, ramp and drain included. A long
    simulation gives the steady state instead: on the real engine's 30-request Poisson runs that came
    out 23-34% above the measured throughput, a difference of definition, not of the model.
    """
    return simulate(SimConfig(costs=costs, limits=limits), observation.arrivals(requests=requests))
