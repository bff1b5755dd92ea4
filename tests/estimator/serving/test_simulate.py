"""The serving simulator against what the vLLM V1 scheduler does, and against queueing identities.

Step costs are chosen round so that expected times can be written from the step formula itself; the
simulated times are then held to those exactly (float rounding aside), never to a wall clock.
"""

from __future__ import annotations

import math
import random
import re

import pytest
from pydantic import ValidationError

from gpuscout.errors import SpecError
from gpuscout.estimator.serving import Arrivals, EngineLimits, SimConfig, StepCosts, simulate, step_seconds
from gpuscout.estimator.serving.simulate import _Run, _simulate, saturated_rate

COSTS = StepCosts(overhead_s=0.004, weights_s=0.015, kv_read_s_per_token=2e-7, compute_s_per_token=2e-5,
                  attention_s_per_pair=1e-10, request_overhead_s=0.01, source="test: round numbers")
LIMITS = EngineLimits(max_num_seqs=64, max_num_batched_tokens=2048, kv_blocks=20_000)
CONFIG = SimConfig(costs=COSTS, limits=LIMITS)


def config(**limits: object) -> SimConfig:
    return SimConfig(costs=COSTS, limits=LIMITS.model_copy(update=limits))


def closed(users: int, requests: int, prompt: int = 700, output: int = 300) -> Arrivals:
    return Arrivals(kind="concurrency", concurrency=users, requests=requests, prompt_tokens=prompt,
                    output_tokens=output)


def poisson(rate: float, requests: int, seed: int = 0, prompt: int = 700, output: int = 300) -> Arrivals:
    return Arrivals(kind="poisson", rate_per_s=rate, requests=requests, prompt_tokens=prompt, output_tokens=output,
                    seed=seed)


def test_same_seed_same_result_other_seed_other_arrivals() -> None:
    a, b = simulate(CONFIG, poisson(4, 400, seed=7)), simulate(CONFIG, poisson(4, 400, seed=7))
    assert a == b
    c = simulate(CONFIG, poisson(4, 400, seed=8))
    assert c.e2e_s != a.e2e_s


def test_every_request_completes_once_and_every_token_is_counted() -> None:
    for arrivals in (closed(16, 300), poisson(3, 300), closed(40, 200, prompt=3000, output=50)):
        result = simulate(CONFIG, arrivals)
        assert result.completed == arrivals.requests == len(result.per_request)
        assert result.output_tokens_per_s * result.duration_s == pytest.approx(
            arrivals.requests * arrivals.output_tokens, rel=1e-9)
        assert all(0 < ttft <= e2e for ttft, _, e2e in result.per_request)


def test_runs_of_decode_steps_advanced_at_once_equal_the_step_by_step_run() -> None:
    """The closed form for a run of decode-only steps must give what stepping one at a time gives."""
    for arrivals in (closed(24, 200), poisson(5, 300), closed(30, 150, prompt=1500, output=200)):
        fast, slow = _simulate(CONFIG, arrivals, bulk=True), _simulate(CONFIG, arrivals, bulk=False)
        assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
        for f, s in zip(fast.per_request, slow.per_request, strict=True):
            assert f == pytest.approx(s, rel=1e-9, abs=1e-12)
        assert fast.tpot_s == slow.tpot_s or fast.tpot_s.mean == pytest.approx(slow.tpot_s.mean, rel=1e-9)
        # ITL from runs is sampled at a few points of each run: the same distribution within 1%.
        assert fast.itl_s.mean == pytest.approx(slow.itl_s.mean, rel=1e-9)
        assert fast.itl_s.p50 == pytest.approx(slow.itl_s.p50, rel=0.01)


def test_littles_law_on_a_steady_run() -> None:
    """Mean requests in the engine (integrated step by step) = throughput × mean e2e; and, within the
    sampling noise of 3,000 Poisson arrivals, = the offered rate × mean e2e."""
    costs = COSTS.model_copy(update={"request_overhead_s": 0.0})  # in the engine from the send on
    rate = 4.0
    run = _Run(SimConfig(costs=costs, limits=LIMITS), poisson(rate, 3000, seed=3), bulk=True)
    run.loop()
    result = run.result()
    assert result.stable and result.completed == 3000
    mean_in_system = run.in_system_s / result.duration_s
    assert mean_in_system == pytest.approx(result.requests_per_s * result.e2e_s.mean, rel=0.01)
    # Poisson noise on the rate: 1/√3000 ≈ 1.8%; 3 standard errors.
    assert mean_in_system == pytest.approx(rate * result.e2e_s.mean, rel=0.055)


def test_a_lone_request_ttft_is_its_overhead_plus_its_prefill_steps() -> None:
    """A 5,000-token prompt under a 2,048-token budget: chunks of 2048, 2048 and 904 tokens."""
    result = simulate(CONFIG, closed(1, 1, prompt=5000, output=1))
    expected = COSTS.request_overhead_s
    done = 0
    for chunk in (2048, 2048, 904):
        pairs = chunk * done + chunk * (chunk + 1) // 2
        expected += step_seconds(COSTS, new_tokens=chunk, context_tokens_read=done + chunk, attention_pairs=pairs)
        done += chunk
    assert result.ttft_s.p50 == pytest.approx(expected, rel=1e-12)
    assert result.e2e_s.p50 == pytest.approx(expected, rel=1e-12)  # one output token: done with the prefill


def test_a_lone_decode_takes_one_step_per_token() -> None:
    flat = COSTS.model_copy(update={"kv_read_s_per_token": 0.0, "attention_s_per_pair": 0.0})
    result = simulate(SimConfig(costs=flat, limits=LIMITS), closed(1, 1, prompt=100, output=50))
    one = step_seconds(flat, new_tokens=1, context_tokens_read=0, attention_pairs=0)
    assert result.itl_s.p50 == result.itl_s.p99 == pytest.approx(one, rel=1e-12)
    # With context-dependent costs every decode step reads one more token: TPOT is their mean.
    grown = simulate(CONFIG, closed(1, 1, prompt=100, output=50))
    steps = [step_seconds(COSTS, new_tokens=1, context_tokens_read=101 + j, attention_pairs=101 + j) for j in range(49)]
    assert grown.tpot_s.p50 == pytest.approx(sum(steps) / 49, rel=1e-12)


def test_queueing_appears_when_users_exceed_max_num_seqs() -> None:
    cfg = config(max_num_seqs=8)
    at, past = simulate(cfg, closed(8, 200)), simulate(cfg, closed(16, 400))
    # Past the limit half the users wait a whole request's time for a slot.
    assert past.ttft_s.p50 > 0.3 * at.e2e_s.p50
    assert past.ttft_s.p50 > 5 * at.ttft_s.p50
    assert past.max_queue >= 8
    assert max(q for _, q in past.queue_len) >= 8
    # The throughput of a full replica does not rise with more users.
    assert past.requests_per_s == pytest.approx(at.requests_per_s, rel=0.05)


def test_chunked_prefill_splits_a_long_prompt_and_keeps_decodes_flowing() -> None:
    # Unchunked, a prompt must fit the budget whole (vLLM refuses to start otherwise).
    with pytest.raises(SpecError, match="max_num_batched_tokens = 2048"):
        simulate(config(chunked_prefill=False), closed(1, 1, prompt=5000, output=10))
    big = config(max_num_batched_tokens=16384)
    whole = simulate(config(max_num_batched_tokens=16384, chunked_prefill=False), closed(1, 1, prompt=5000, output=1))
    assert whole.ttft_s.p50 == pytest.approx(COSTS.request_overhead_s + step_seconds(
        COSTS, new_tokens=5000, context_tokens_read=5000, attention_pairs=5000 * 5001 // 2), rel=1e-12)
    # Long prompts arriving among running decodes: chunked, a decode step carries at most 2,048
    # prompt tokens; unchunked, a whole 8,000-token prompt stalls every decode for one long step.
    arrivals = closed(8, 80, prompt=8000, output=200)
    chunked = simulate(config(max_num_batched_tokens=2048), arrivals)
    unchunked = simulate(config(max_num_batched_tokens=16384, chunked_prefill=False), arrivals)
    assert unchunked.itl_s.p99 > 2 * chunked.itl_s.p99
    assert big.limits.chunked_prefill


def test_preemption_happens_when_the_kv_cache_is_tiny_and_is_counted() -> None:
    # 200 blocks of 16 tokens: three requests of 700 + 300 tokens fill it.
    tiny, ample = simulate(config(kv_blocks=200), closed(16, 150)), simulate(CONFIG, closed(16, 150))
    assert ample.preemptions == 0
    assert tiny.preemptions > 0
    assert tiny.completed == 150
    assert tiny.e2e_s.p50 > ample.e2e_s.p50
    assert max(v for _, v in tiny.kv_used) > 0.9
    assert max(v for _, v in ample.kv_used) < 0.2


def test_a_request_larger_than_the_whole_cache_is_refused() -> None:
    with pytest.raises(SpecError, match=r"needs 63 KV blocks of 16 tokens, but the cache holds 50"):
        simulate(config(kv_blocks=50), closed(1, 1, prompt=700, output=300))


def test_prefix_cache_hits_cut_ttft() -> None:
    arrivals = closed(1, 1, prompt=4096, output=1)
    cold, warm = simulate(CONFIG, arrivals), simulate(config(prefix_hit_rate=0.5), arrivals)
    # Half the prompt (2,048 tokens, whole blocks) is cached: one 2,048-token chunk computed, not two.
    pairs = 2048 * 2048 + 2048 * 2049 // 2
    chunk = step_seconds(COSTS, new_tokens=2048, context_tokens_read=4096, attention_pairs=pairs)
    assert warm.ttft_s.p50 == pytest.approx(COSTS.request_overhead_s + chunk, rel=1e-12)
    assert warm.ttft_s.p50 < 0.6 * cold.ttft_s.p50


def test_an_unsustainable_rate_is_reported_unstable_with_what_the_replica_holds() -> None:
    held = saturated_rate(CONFIG, prompt_tokens=700, output_tokens=300)
    result = simulate(CONFIG, poisson(2 * held, 2000))
    assert not result.stable
    assert result.unstable is not None
    match = re.fullmatch(r"unstable: the queue grows without bound at ([\d.]+) req/s; the replica holds ([\d.]+) req/s",
                         result.unstable)
    assert match, result.unstable
    assert float(match.group(1)) == pytest.approx(2 * held, rel=0.01)
    assert float(match.group(2)) == pytest.approx(held, rel=0.01)
    assert result.completed < 2000  # it stopped when the last request was sent
    # The throughput of the overloaded run is what the full replica holds.
    assert result.requests_per_s == pytest.approx(held, rel=0.1)
    assert simulate(CONFIG, poisson(0.7 * held, 2000)).stable


def test_an_unsustainable_trace_is_reported_too() -> None:
    rows = tuple((i * 0.01, 700, 300) for i in range(1500))  # 100 requests a second
    result = simulate(CONFIG, Arrivals(kind="trace", requests=1500, prompt_tokens=1, output_tokens=1, trace=rows))
    assert not result.stable and result.unstable and "at 100 req/s" in result.unstable


@pytest.mark.parametrize(("model", "fields", "message"), [
    (Arrivals, {"kind": "poisson", "rate_per_s": 1, "requests": 10**8, "prompt_tokens": 1, "output_tokens": 1},
     "less than or equal to 1000000"),
    (Arrivals, {"kind": "poisson", "requests": 10, "prompt_tokens": 1, "output_tokens": 1}, "needs rate_per_s"),
    (Arrivals, {"kind": "concurrency", "concurrency": 0, "requests": 10, "prompt_tokens": 1, "output_tokens": 1},
     "greater than 0"),
    (Arrivals, {"kind": "trace", "requests": 2, "prompt_tokens": 1, "output_tokens": 1,
                "trace": ((1.0, 10, 10), (0.5, 10, 10))}, "sort the rows by send time"),
    (Arrivals, {"kind": "constant", "rate_per_s": math.inf, "requests": 10, "prompt_tokens": 1, "output_tokens": 1},
     "finite number"),
    (EngineLimits, {"max_num_seqs": 1024, "max_num_batched_tokens": 512, "kv_blocks": 100},
     r"max_num_batched_tokens \(512\) must be at least max_num_seqs \(1024\)"),
    (EngineLimits, {"max_num_seqs": 8, "max_num_batched_tokens": 512, "kv_blocks": 100, "prefix_hit_rate": 1.0},
     "less than 1"),
    (StepCosts, {"overhead_s": -1, "weights_s": 0.01, "kv_read_s_per_token": 0, "compute_s_per_token": 0,
                 "attention_s_per_pair": 0, "source": "x"}, "greater than or equal to 0"),
    (StepCosts, {"overhead_s": 0, "weights_s": 0, "kv_read_s_per_token": 0, "compute_s_per_token": 0,
                 "attention_s_per_pair": 0, "source": "x"}, "never advance"),
    (StepCosts, {"overhead_s": 0.01, "weights_s": 0.01, "expert_weights_s": 0.1, "kv_read_s_per_token": 0,
                 "compute_s_per_token": 0, "attention_s_per_pair": 0, "source": "x"}, "needs both above 0"),
])
def test_absurd_inputs_are_refused_with_the_range(model: type, fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        model(**fields)


def test_experts_read_grows_with_the_tokens_that_touch_them() -> None:
    moe = COSTS.model_copy(update={"weights_s": 0.001, "expert_weights_s": 0.1, "experts_touched_per_token": 0.125,
                                   "kv_read_s_per_token": 0.0, "attention_s_per_pair": 0.0, "compute_s_per_token": 0.0})
    one = step_seconds(moe, new_tokens=1, context_tokens_read=0, attention_pairs=0)
    many = step_seconds(moe, new_tokens=64, context_tokens_read=0, attention_pairs=0)
    assert one == pytest.approx(0.004 + 0.001 + 0.1 * 0.125)
    assert many == pytest.approx(0.004 + 0.001 + 0.1 * (1 - 0.875**64))


def random_case(rng: random.Random) -> tuple[SimConfig, Arrivals]:
    # Costs and rates off round numbers: an arrival that falls exactly on a step's end is a float tie
    # (a sum of steps against a closed form), decided either way by the last bit.
    jitter = rng.uniform(0.9, 1.1)
    costs = StepCosts(overhead_s=rng.choice([0, 0.001, 0.005]), weights_s=rng.choice([0.002, 0.01, 0.03]),
                      kv_read_s_per_token=rng.choice([0, 1e-7, 1e-6]), compute_s_per_token=rng.choice([1e-6, 2e-5]),
                      attention_s_per_pair=rng.choice([0, 1e-10, 1e-8]), comm_s_per_token=rng.choice([0, 1e-6]),
                      request_overhead_s=rng.choice([0, 0.01, 0.1]), source="test: random")
    costs = costs.model_copy(update={k: v * jitter for k, v in costs.model_dump().items() if isinstance(v, float)})
    seqs = rng.choice([1, 2, 4, 16, 64])
    limits = EngineLimits(max_num_seqs=seqs, max_num_batched_tokens=max(seqs, rng.choice([16, 64, 512, 2048])),
                          kv_blocks=rng.choice([60, 200, 2000, 100_000]), block_tokens=rng.choice([1, 16, 32]),
                          chunked_prefill=rng.random() < 0.8, prefix_hit_rate=rng.choice([0, 0, 0.3, 0.9]))
    n, prompt, output = rng.choice([5, 40]), rng.choice([1, 10, 100, 700]), rng.choice([1, 2, 10, 100])
    kind = rng.choice(["concurrency", "poisson", "constant", "trace"])
    if kind == "concurrency":
        arrivals = Arrivals(kind=kind, concurrency=rng.choice([1, 3, 10]), requests=n, prompt_tokens=prompt,
                            output_tokens=output)
    elif kind == "trace":
        t, rows = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rng.choice([1, 10, 100]))
            rows.append((t, rng.randint(1, prompt), rng.randint(1, output)))
        arrivals = Arrivals(kind=kind, requests=n, prompt_tokens=1, output_tokens=1, trace=tuple(rows))
    else:
        rate = rng.choice([0.5, 5, 50]) * rng.uniform(0.9, 1.1)
        arrivals = Arrivals(kind=kind, rate_per_s=rate, requests=n, prompt_tokens=prompt, output_tokens=output,
                            seed=rng.randint(0, 99))
    return SimConfig(costs=costs, limits=limits), arrivals


def test_random_replicas_and_loads_advanced_at_once_equal_step_by_step() -> None:
    """Scheduler corners (tiny caches that preempt, block sizes of 1, prompts over the budget,
    unchunked prefill, prefix hits, traces, overloads that stop early) met at random: the run
    advanced in closed form equals the step-by-step run, and a stable run completes every request."""
    rng = random.Random(2026)
    checked = 0
    while checked < 40:
        cfg, arrivals = random_case(rng)
        try:
            fast = _simulate(cfg, arrivals, bulk=True)
        except SpecError:  # a request the cache or an unchunked step cannot hold: refused both ways
            with pytest.raises(SpecError):
                _simulate(cfg, arrivals, bulk=False)
            continue
        slow = _simulate(cfg, arrivals, bulk=False)
        assert (fast.completed, fast.preemptions, fast.stable) == (slow.completed, slow.preemptions, slow.stable)
        assert fast.duration_s == pytest.approx(slow.duration_s, rel=1e-9)
        assert fast.e2e_s.mean == pytest.approx(slow.e2e_s.mean, rel=1e-9)
        if fast.stable:
            assert fast.completed == arrivals.requests
        checked += 1


def test_the_last_admitted_request_is_the_one_preempted() -> None:
    """Two requests whose KV outgrows a 60-block cache: the later one is preempted (recompute) and
    finishes after the earlier one, which runs on undisturbed. Their prompts (400 and 408 tokens) put
    them at different block phases, so it is the later one that first finds no block free: it
    preempts itself, not the earlier one."""
    rows = ((0.0, 400, 300), (0.001, 408, 300))
    arrivals = Arrivals(kind="trace", requests=2, prompt_tokens=1, output_tokens=1, trace=rows)
    result = simulate(config(kv_blocks=60), arrivals)
    alone = simulate(config(kv_blocks=60), Arrivals(kind="trace", requests=1, prompt_tokens=1, output_tokens=1,
                                                    trace=rows[:1]))
    assert result.preemptions >= 1
    first, second = result.per_request
    assert first[2] < second[2]
    # The first ran beside the second only until the preemption: never slower than with it throughout.
    assert first[2] < 1.5 * alone.e2e_s.p50


def test_admission_is_first_come_first_served_even_when_a_later_request_would_fit() -> None:
    """A running request holds most of a 60-block cache; the next waiting one needs more than is left,
    so the small one behind it waits too (vLLM stops admitting at the first request that does not fit)."""
    rows = ((0.0, 500, 200), (0.01, 900, 10), (0.02, 10, 10))
    arrivals = Arrivals(kind="trace", requests=3, prompt_tokens=1, output_tokens=1, trace=rows)
    result = simulate(config(kv_blocks=60), arrivals)
    (_, _, running_e2e), (big_ttft, _, _), (small_ttft, _, _) = result.per_request
    assert result.preemptions == 0
    big_first, small_first = big_ttft + 0.01, small_ttft + 0.02  # first tokens, from the run's start
    assert big_first > running_e2e  # the big one starts when the running one has finished
    assert small_first > running_e2e  # and the small one, which would have fitted beside it, waits too
    assert small_first >= big_first - 1e-12
