"""The server's own account, from its Prometheus `/metrics`: queue, KV cache, prefix cache, preemptions.

`parse_prometheus` reads the text exposition format (one `name{labels} value` a line; comments,
histogram buckets and unparsable lines skipped; a name with several label sets is summed, so a
server that labels by model or engine reads as its total). `read_server` then picks the values
gpuscout shows beside the client's numbers, under one name whatever the engine calls them (names
as the engines document them: vLLM `docs/design/metrics.md` (V0 and V1), SGLang
`docs/references/production_metrics.md`, TGI's router metrics, llama.cpp's server README, which
exposes them with `--metrics`):

| gpuscout name | vLLM | SGLang | TGI | llama.cpp |
|---|---|---|---|---|
| running | num_requests_running | num_running_reqs | batch_current_size | requests_processing |
| waiting | num_requests_waiting | num_queue_reqs | queue_size | requests_deferred |
| kv_usage (0–1) | kv_cache_usage_perc, gpu_cache_usage_perc | token_usage | — | kv_cache_usage_ratio |
| prefix_queries, prefix_hits (counters) | prefix_cache_queries, prefix_cache_hits (V1; gpu_… before) | — | — | — |
| prefix_hit_rate (gauge) | gpu_prefix_cache_hit_rate (V0) | cache_hit_rate | — | — |
| preemptions (counter) | num_preemptions | — | — | — |
| prompt_tokens, generation_tokens | prompt_tokens, generation_tokens | same | — | prompt_tokens, tokens_predicted |

Counters are read as the increase over the measured phase (last scrape − first), gauges as their
samples; `summarize_server` turns a run's scrapes into result metrics.

Every value read is checked once, in `read_server`, before anything uses it: finite, not negative, a
fraction within 0–1 and a count within `MAX_COUNT`. A page with a value outside its range is not a
reading of a real server (a broken exporter, a hostile endpoint): it is refused whole, with the name,
the value and the range in the message, rather than summed into an infinite or absurd result.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

from gpuscout.loadgen.record import ServerSample

MAX_METRICS_BYTES = 16 << 20  # a /metrics page with per-request histograms is a few hundred KiB
# The largest count a real server reports: a token counter at 1e6 tokens/s (past any single server: vLLM's
# published H100 throughputs are ~1e4 tokens/s) for 30 years is 9.5e14. Requests running or waiting are
# far fewer. Within it, sums and differences over any run's scrapes stay far inside a result's ±1e30.
MAX_COUNT = 1e15
FRACTIONS = frozenset({"kv_usage", "prefix_hit_rate"})  # documented by every engine as 0–1
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                 "llamacpp:kv_cache_usage_ratio"),
    "prefix_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                          "llamacpp:tokens_predicted_total"),
}
ENGINES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"), ("llamacpp:", "llamacpp"))


def parse_prometheus(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text page, summed over label sets; histogram parts and NaN skipped."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        found = _LINE.match(line)
        if found is None or found.group(1).endswith(("_bucket", "_created")):
            continue
        try:
            value = float(found.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            values[found.group(1)] = values.get(found.group(1), 0.0) + value
    return values


class MetricOutOfRange(ValueError):
    """A value on the page no real server reports; the message names it, its value and its range."""


def read_server(page: dict[str, float]) -> tuple[str | None, dict[str, float]]:
    """(engine, the values gpuscout reads) of one parsed page; engine None when no known name is there.

    Raises MetricOutOfRange for a value outside its range (see the module's docstring)."""
    picked: dict[str, float] = {}
    for name, candidates in (*GAUGES.items(), *COUNTERS.items()):
        source = next((c for c in candidates if c in page), None)
        if source is not None:
            picked[name] = _in_range(name, source, page[source])
    engine = next((engine for prefix, engine in ENGINES if any(k.startswith(prefix) for k in page)), None)
    return engine, picked


def _in_range(name: str, source: str, value: float) -> float:
    top = 1.0 if name in FRACTIONS else MAX_COUNT
    if not (math.isfinite(value) and 0 <= value <= top):
        raise MetricOutOfRange(f"{source} is {value:.6g} (summed over its label sets), outside the range a server "
                               f"reports, 0 to {top:g}")
    return value


def counter_increase(samples: Sequence[ServerSample], name: str) -> float | None:
    """A counter's increase from the first scrape to the last (a restart, a fall, counts from zero)."""
    seen = [s.values[name] for s in samples if name in s.values]
    if len(seen) < 2:
        return None
    rise = 0.0
    for before, after in itertools.pairwise(seen):
        rise += after - before if after >= before else after
    return rise


def gauge_samples(samples: Sequence[ServerSample], name: str, start_s: float = 0.0) -> list[float]:
    """A gauge's values scraped from `start_s` on (the measured phase and the scrape after it)."""
    return [s.values[name] for s in samples if name in s.values and s.t_s >= start_s]


def prefix_hit_rate(samples: Sequence[ServerSample]) -> float | None:
    """The prefix cache's token hit rate over the run: Δhits / Δqueries (vLLM V1), else the last
    hit-rate gauge the engine reports (vLLM V0, SGLang)."""
    queries, hits = counter_increase(samples, "prefix_queries"), counter_increase(samples, "prefix_hits")
    if queries and hits is not None:
        return min(1.0, max(0.0, hits / queries))
    gauge = gauge_samples(samples, "prefix_hit_rate")
    return gauge[-1] if gauge else None
