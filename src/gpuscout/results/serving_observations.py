"""A `load` result's levels as serving observations: the numbers the simulator is fitted to and held against.

Per case (one level of `gpuscout load`): TTFT from the intended send (`ttft_from_intended_s`, what the
simulator counts: queueing included; `ttft_s` where a result predates it), the inter-token gap
(`chunk_gap_s`: every gap between content chunks, the simulator's ITL) at P50 and P95, and output
tokens and requests a second (metric names in results/schema.py and docs/measurement.md). The prompt
length is the workload's (its description "prompt tokens fixed(64)", or given); the output length is
the pinned `output_tokens` of the run's settings.
"""

from __future__ import annotations

import re

from gpuscout.errors import SpecError
from gpuscout.estimator.serving.calibrate import ServingObservation
from gpuscout.results.schema import BenchResult, Case, Metric

_PROMPT = re.compile(r"prompt tokens (?:fixed|uniform|normal)\((\d+)")


def _quantiles(case: Case, names: tuple[str, ...]) -> tuple[float, float]:
    metrics = {m.name: m for m in case.metrics}
    for name in names:
        m: Metric | None = metrics.get(name)
        if m is not None and m.summary is not None and m.summary.p50 > 0 and m.summary.p95 > 0:
            return m.summary.p50, m.summary.p95
    raise SpecError(f"{case.name}: no {' or '.join(names)} samples to read P50 and P95 from.",
                    "The level finished no streamed request.", "Run `gpuscout load` with streaming (the default).")


def _value(case: Case, name: str) -> float:
    for m in case.metrics:
        if m.name == name and m.value > 0:
            return m.value
    raise SpecError(f"{case.name}: no {name} above 0.", "The level finished no request.",
                    "Run the level again (`gpuscout load`) on a server that answers.")


def prompt_tokens_of(result: BenchResult) -> int | None:
    """The workload's prompt length (the mean of its distribution), when its description says it."""
    found = _PROMPT.search(str(result.fixed.settings.get("workload", "")))
    return int(found.group(1)) if found else None


def serving_observations(result: BenchResult, *, prompt_tokens: int | None = None,
                         levels: tuple[float, ...] | None = None) -> tuple[ServingObservation, ...]:
    """One observation per successful level of a `load` result (only `levels` when given: concurrency
    or rate values). A failed or invalid-for-lack-of-data level is skipped, never guessed."""
    if result.kind != "load":
        raise SpecError(f"{result.name}: a {result.kind} result.", "Serving observations come from `gpuscout load`.",
                        "Pass a result written by `gpuscout load -o FILE`.")
    settings = result.fixed.settings
    prompt = prompt_tokens or prompt_tokens_of(result)
    if prompt is None:
        raise SpecError(f"{result.name}: its workload ({settings.get('workload')}) does not say one prompt length.",
                        "The simulator's load needs the prompt length.",
                        "Give prompt_tokens: the mean prompt length of the dataset or trace.")
    output = settings.get("output_tokens")
    if not isinstance(output, int):
        raise SpecError(f"{result.name}: output lengths {output!r} are not one pinned length.",
                        "The simulator's load needs one output length.", "Run `gpuscout load --output-tokens N`.")
    out: list[ServingObservation] = []
    for case in result.cases:
        if case.failure is not None or not any(m.name == "output_tokens_per_s" for m in case.metrics):
            continue
        arrival = case.params.get("arrival")
        concurrency = case.params.get("concurrency")
        rate = case.params.get("rate_rps")
        if arrival == "concurrency" and isinstance(concurrency, int):
            kind, level = "concurrency", float(concurrency)
        elif arrival in ("poisson", "constant") and isinstance(rate, int | float):
            kind, level = str(arrival), float(rate)
        else:
            continue  # sessions, gamma arrivals and traces have no simulator twin here
        if levels is not None and level not in levels:
            continue
        ttft = _quantiles(case, ("ttft_from_intended_s", "ttft_s"))
        itl = _quantiles(case, ("chunk_gap_s",))
        # Requests a run sent: a level run `--runs N` times pools N runs' samples, and the simulator
        # replays one run as it was sent (its ramp and drain are in the measured throughput).
        samples, runs = next(((len(m.samples), max(len(m.runs), 1)) for m in case.metrics if m.name == "ttft_s"),
                             (0, 1))
        out.append(ServingObservation(
            kind=kind,
            concurrency=int(level) if kind == "concurrency" else None,
            rate_per_s=level if kind != "concurrency" else None,
            requests=max(round(samples / runs), 1), seed=result.fixed.seed, prompt_tokens=prompt,
            output_tokens=output,
            ttft_p50_s=ttft[0], ttft_p95_s=ttft[1], itl_p50_s=itl[0], itl_p95_s=itl[1],
            output_tokens_per_s=_value(case, "output_tokens_per_s"), requests_per_s=_value(case, "requests_per_s"),
            source=f"{result.name}: {case.name}"[:500]))
    return tuple(out)
