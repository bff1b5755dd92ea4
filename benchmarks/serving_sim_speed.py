"""How fast is the serving simulator? Target: 10,000 requests in under a second.

Run: PYTHONPATH=src .venv/bin/python benchmarks/serving_sim_speed.py
Simulates 10,000 requests of 1,024 prompt and 256 output tokens on one replica (Llama-3-8B-like step
costs on one H100: ~15 ms of weights a step, 2,048-token budget, 256 sequences), under five loads: a
closed loop of 64 users (the brief's case), of 1 user (2.56M steps, nearly all in runs of decodes),
of 512 users (past max_num_seqs: a queue), a Poisson rate at ~70% of what the replica holds, and an
unstable rate (the run stops when the last request is sent, then a closed loop at max_num_seqs
measures what the replica holds). Prints the median wall time of 3 repeats of each.
"""

from __future__ import annotations

import statistics
import time

from gpuscout.estimator.serving import Arrivals, EngineLimits, SimConfig, StepCosts, saturated_rate, simulate

COSTS = StepCosts(overhead_s=0.004, weights_s=0.015, kv_read_s_per_token=2e-7, compute_s_per_token=2e-5,
                  attention_s_per_pair=1e-10, request_overhead_s=0.01, source="benchmark: round numbers")
CONFIG = SimConfig(costs=COSTS, limits=EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048, kv_blocks=40_000))
REQUESTS, PROMPT, OUTPUT = 10_000, 1024, 256


def loads() -> list[tuple[str, Arrivals]]:
    held = saturated_rate(CONFIG, prompt_tokens=PROMPT, output_tokens=OUTPUT)

    def closed(users: int) -> Arrivals:
        return Arrivals(kind="concurrency", concurrency=users, requests=REQUESTS, prompt_tokens=PROMPT,
                        output_tokens=OUTPUT)

    def poisson(rate: float) -> Arrivals:
        return Arrivals(kind="poisson", rate_per_s=rate, requests=REQUESTS, prompt_tokens=PROMPT, output_tokens=OUTPUT)

    return [("concurrency 64", closed(64)), ("concurrency 1", closed(1)), ("concurrency 512", closed(512)),
            (f"poisson {0.7 * held:.3g} req/s (70%)", poisson(0.7 * held)),
            (f"poisson {2 * held:.3g} req/s (unstable)", poisson(2 * held))]


def main() -> None:
    print(f"{REQUESTS} requests, {PROMPT} prompt + {OUTPUT} output tokens, median of 3")
    for name, arrivals in loads():
        times = []
        for _ in range(3):
            start = time.perf_counter()
            result = simulate(CONFIG, arrivals)
            times.append(time.perf_counter() - start)
        print(f"  {name:32s} {statistics.median(times):6.3f} s   ({result.completed} completed, "
              f"{result.duration_s:,.0f} simulated s, {result.preemptions} preemptions, stable={result.stable})")


if __name__ == "__main__":
    main()
