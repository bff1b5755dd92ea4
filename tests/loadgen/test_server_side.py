"""The server's side: its /metrics read under every engine's names, beside the client's counts; the steady
plateau; over-saturation stops; order-statistic bounds on percentiles; image generations."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
from fake_openai import serve_in_process, serve_in_thread

from gpuscout.cost.load_cost import price_load
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.record import ServerSample
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.server_metrics import counter_increase, parse_prometheus, prefix_hit_rate, read_server
from gpuscout.loadgen.steady import oversaturated, percentile_bound, plateau, samples_for_bound, upper_bound_rank
from gpuscout.loadgen.workload import Prompt, Workload

PAGES = {
    "vllm": ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="a"} 3\n'
             'vllm:num_requests_running{model_name="b"} 2\nvllm:num_requests_waiting{model_name="a"} 7\n'
             'vllm:kv_cache_usage_perc{model_name="a"} 0.5\nvllm:prefix_cache_queries_total{model_name="a"} 1000\n'
             'vllm:prefix_cache_hits_total{model_name="a"} 250\nvllm:num_preemptions_total 4\n'
             'vllm:e2e_request_latency_seconds_bucket{le="1"} 9\n'),
    "sglang": 'sglang:num_running_reqs{name="m"} 5\nsglang:num_queue_reqs 1\nsglang:token_usage 0.25\n'
              'sglang:cache_hit_rate 0.4\nsglang:generation_tokens_total 1.5e3\n',
    "tgi": "tgi_queue_size 6\ntgi_batch_current_size 4\n",
    "llamacpp": "llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\nllamacpp:kv_cache_usage_ratio 0.1\n"
                "llamacpp:tokens_predicted_total 77\nllamacpp:prompt_tokens_total 300\n",
}


CAUSALITY_EPS_S = 0.0001  # clock reads on different cores; causality itself leaves no slack
EARLY_TOL_S = 0.0005  # the fake never answers before its delay (the loop's timers round up)


def metric(case: Any, name: str) -> Any:
    return {m.name: m for m in case.metrics}[name]


def unique(n: int, tokens: int, tag: str = "p") -> Workload:
    return Workload(prompts=tuple(Prompt(text=f"{tag} {i}", prompt_tokens=2, output_tokens=tokens) for i in range(n)),
                    source="synthetic", seed=0, tokenizer=None, description="unique")


@pytest.mark.parametrize("engine", sorted(PAGES))
def test_every_engines_names_read_as_one(engine: str) -> None:
    found, values = read_server(parse_prometheus(PAGES[engine] + "garbage line\n# comment\nx_nan NaN\n"))
    assert found == engine
    expected = {"vllm": {"running": 5, "waiting": 7, "kv_usage": 0.5, "prefix_queries": 1000, "prefix_hits": 250,
                         "preemptions": 4},
                "sglang": {"running": 5, "waiting": 1, "kv_usage": 0.25, "prefix_hit_rate": 0.4,
                           "generation_tokens": 1500},
                "tgi": {"running": 4, "waiting": 6},
                "llamacpp": {"running": 1, "waiting": 2, "kv_usage": 0.1, "generation_tokens": 77,
                             "prompt_tokens": 300}}[engine]
    assert values == expected


def test_counters_rise_across_a_restart_and_give_the_hit_rate() -> None:
    samples = [ServerSample(t_s=t, values=v) for t, v in
               ((0, {"prefix_queries": 100, "prefix_hits": 10}), (1, {"prefix_queries": 300, "prefix_hits": 110}),
                (2, {"prefix_queries": 50, "prefix_hits": 40}))]  # a restart: counting from zero again
    assert counter_increase(samples, "prefix_queries") == 250
    assert prefix_hit_rate(samples) == pytest.approx(140 / 250)


def test_the_servers_metrics_are_scraped_beside_the_clients_counts() -> None:
    shape = LoadShape(kind="concurrency", concurrency=4, requests=40, warmup_requests=4)
    with serve_in_process(0.05, 0.005) as server:
        run = run_load_sync(server.url, "m", unique(44, 8), shape, api_key_env=None,
                            metrics_url=f"{server.url}/metrics")
        served = server.records()
    case = summarize_load(run, slo=None)
    assert run.server_engine == "vllm" and len(run.server) >= 2
    measured = [s for s in served if not s.prompt.startswith("p ") or int(s.prompt.split()[1]) >= 4]
    assert metric(case, "server_generation_tokens").value == sum(sum(s.tokens) for s in measured)
    assert metric(case, "server_generation_tokens").value == metric(case, "output_tokens_server").value
    assert max(metric(case, "server_running_requests").samples) <= 4


def test_a_metrics_page_that_cannot_be_read_is_noted_not_fatal() -> None:
    with serve_in_thread() as server:
        run = run_load_sync(server.url, "m", unique(4, 2), LoadShape(kind="concurrency", concurrency=1, requests=4),
                            api_key_env=None, metrics_url=f"{server.url}/nothing-here")
    assert all(r.error is None for r in run.records)
    assert any("server metrics not read" in n and "404" in n for n in run.notes), run.notes


def test_order_statistic_bounds_match_the_binomial() -> None:
    for n, p in ((59, 0.95), (100, 0.95), (300, 0.99), (1000, 0.5)):
        k = upper_bound_rank(n, p)
        assert k is not None
        cdf = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k))
        below = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k - 1))
        assert cdf >= 0.95 > below  # the smallest rank with the confidence
    assert upper_bound_rank(58, 0.95) is None and samples_for_bound(0.95) == 59 and samples_for_bound(0.99) == 299
    rng = random.Random(0)
    xs = [rng.expovariate(1.0) for _ in range(2000)]
    assert percentile_bound(xs, 95) >= sorted(xs)[int(0.95 * 2000)] and percentile_bound(xs[:50], 95) is None
    # Coverage: the bound is above the true P95 of Exp(1) (ln 20) in at least 95% of 400 runs of 100 samples.
    true = math.log(20)
    covered = sum((percentile_bound([rng.expovariate(1.0) for _ in range(100)], 95) or 0) >= true for _ in range(400))
    assert covered >= 0.93 * 400


def test_oversaturation_needs_both_a_growing_queue_and_a_growing_wait() -> None:
    growing = [(i * 0.05, (i * 0.05 + 0.1 + i * 0.02) if i < 60 else None, (i * 0.05 + 0.2 + i * 0.02)
                if i < 60 else None) for i in range(200)]
    assert oversaturated(growing, now=10.0, t0=0.0) is not None
    steady = [(i * 0.05, i * 0.05 + 0.1, i * 0.05 + 0.2) for i in range(199)] + [(9.95, None, None)]
    assert oversaturated(steady, now=10.0, t0=0.0) is None
    assert oversaturated(growing, now=2.0, t0=0.0) is None  # too early to judge
    assert plateau([0.0, 1.0, 2.0, 9.0], [3.0, 10.0], 10.0) == (3.0, 9.0)
    assert plateau([0.0, 1.0], [9.5], 10.0) is None


@pytest.mark.slow
def test_an_oversaturated_server_stops_the_level_early_with_the_reason() -> None:
    """Two requests at a time, ~100 ms each (≈ 20 req/s), offered 60 req/s for 10 s: the queue grows."""
    shape = LoadShape(kind="constant", rate_rps=60, requests=600)
    with serve_in_process(0.05, 0.01, "--max-running", "2") as server:
        run = run_load_sync(server.url, "m", unique(600, 6), shape, api_key_env=None, timeout_s=60)
        received = len(server.records())
    case = summarize_load(run, slo=None, percentile_needed=50)
    assert run.stopped is not None and "over-saturated" in run.stopped
    assert any("stopped early, over-saturated" in n for n in case.notes if n.startswith("invalid")), case.notes
    assert received < 600  # stopped before the schedule ran out: the server's count, not a wall-clock budget
    stopped = [r for r in run.records if r.error and r.error.startswith("stopped_oversaturated")]
    assert stopped and metric(case, "error_rate").value == 0  # cut short, not failed


def test_image_generations_are_timed_per_image_as_the_server_did_them() -> None:
    """Each request's time per image is held against the server's own record of that request, not against the
    injected delay: a busy machine stretches both sides, and causality still orders them exactly."""
    work = unique(20, 1, "a cat")
    shape = LoadShape(kind="concurrency", concurrency=2, requests=20)
    with serve_in_process(0.0, 0.0, "--image-delay", "0.03") as server:
        run = run_load_sync(server.url, "sd", work, shape, endpoint="images", api_key_env=None)
        served = {s.prompt: s for s in server.records()}
    assert all(r.error is None and r.images == 1 for r in run.records), [r.error for r in run.records]
    case = summarize_load(run, slo=None, percentile_needed=50)
    names = {m.name for m in case.metrics}
    assert {"seconds_per_image", "images_per_s", "e2e_s"} <= names and "ttft_s" not in names
    assert run.t0_perf_counter_s is not None
    t0, client_s, server_s, legs = run.t0_perf_counter_s, [], [], []
    for r in run.records:  # unique prompts, no warm-up: request i carried prompt i
        s = served[work.prompts[r.index].text]
        assert s.images == r.images == 1 and len(s.writes_s) == 1 and r.chunk_s
        # Causality, on the one host clock: the client sent before the server had the body, and the answer
        # arrived after the server began writing it (stamped just before the one write of the whole body);
        # the server never made an image faster than its injected delay.
        answered, arrived = s.writes_s[0], r.chunk_s[-1]  # the last of the answer's bytes, on the client's side
        assert t0 + r.sent_s <= s.received_s + CAUSALITY_EPS_S and answered <= t0 + arrived + CAUSALITY_EPS_S
        assert answered - s.received_s >= 0.03 - EARLY_TOL_S
        client_s.append((arrived - r.sent_s) / r.images)
        server_s.append((answered - s.received_s) / s.images)
        legs.append(client_s[-1] - server_s[-1])
    per_image = metric(case, "seconds_per_image")
    # What is reported per image is exactly what the client measured of each request, divided by its images …
    assert sorted(per_image.samples) == pytest.approx(sorted(client_s), rel=1e-9)
    assert per_image.summary.p50 == pytest.approx(statistics.median(client_s), rel=1e-9)
    # … so it is the server's own time per image plus this run's wire legs, within the legs measured here.
    p50_server = statistics.median(server_s)
    assert p50_server + min(legs) - 1e-9 <= per_image.summary.p50 <= p50_server + max(legs) + 1e-9, \
        (per_image.summary.p50, p50_server, min(legs), max(legs))
    cost = price_load(case, 3.6)
    assert cost.usd_per_1000_images == pytest.approx(0.001 / metric(case, "images_per_s").value * 1000)
