"""The detail of a load case beyond its latencies: plateau throughput, percentile bounds, prefix cache,
conversation turns, the server's own metrics, image generations (docs/measurement.md §2.10–§2.13).

Each function takes the run's successful requests and returns metrics (or notes) for the case;
`metrics.summarize_load` adds them. Names:

* `steady_output_tokens_per_s`, `steady_requests_per_s`: over the plateau (`steady.plateau`), tokens
  by their chunks' arrival inside it, requests by their end inside it.
* `{ttft,tpot,e2e}_s_p{50,95,99}_bound`: the order-statistic 95% upper bound on that percentile
  (`steady.percentile_bound`); a percentile the run cannot bound gets a note instead.
* `prefix_cache_hit_rate`: Σ usage.prompt_tokens_details.cached_tokens / Σ usage.prompt_tokens over
  the requests whose server reported cached tokens; `shared_prefix_fraction`: the share of prompt
  tokens the workload built to be shared (what a perfect cache could hit).
* `ttft_turn_{k}_s`: TTFT of the k-th turn of every conversation.
* `server_*`: from /metrics (`server_metrics`): running and waiting requests and KV-cache use as
  scraped during the level, prefix-cache hit rate, preemptions and generated tokens over it.
* `seconds_per_image`, `images_per_s`: image generations, e2e / images in the answer and Σ images /
  run duration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import fmean

from gpuscout.loadgen import server_metrics as sm
from gpuscout.loadgen.record import LoadRun, RequestRecord
from gpuscout.loadgen.steady import percentile_bound, plateau, samples_for_bound
from gpuscout.results.schema import Metric
from gpuscout.stats import summarize

BOUNDED = (50, 95, 99)
MAX_TURNS = 16  # per-turn TTFT for the first turns only


def metric(name: str, unit: str, samples: Sequence[float], note: str) -> Metric | None:
    if not samples:
        return None
    return Metric(name=name, unit=unit, value=fmean(samples), samples=tuple(samples), summary=summarize(samples),
                  note=note)


def single(name: str, unit: str, value: float, note: str, higher: bool = False) -> Metric:
    return Metric(name=name, unit=unit, value=value, higher_is_better=higher, note=note)


def steady_metrics(run: LoadRun, ok: list[RequestRecord], n_out: list[int]) -> list[Metric | None]:
    measured = [r for r in run.records if not r.warmup]
    window = plateau([r.sent_s for r in measured], [r.end_s for r in ok if r.end_s is not None], run.wall_s)
    if window is None:
        return []
    start, end = window
    span = end - start
    tokens = sum(n / len(r.chunk_s) * sum(1 for c in r.chunk_s if start <= c <= end)
                 for r, n in zip(ok, n_out, strict=True))
    done = sum(1 for r in ok if r.end_s is not None and start <= r.end_s <= end)
    how = f"over the plateau {start:.2f}–{end:.2f} s (first completion → last send)"
    return [single("steady_output_tokens_per_s", "tokens/s", tokens / span, f"output tokens arriving {how}", True),
            single("steady_requests_per_s", "requests/s", done / span, f"requests ending {how}", True)]


def percentile_bounds(latencies: dict[str, list[float]]) -> tuple[list[Metric], list[str]]:
    """95% upper bounds on P50/P95/P99 of each latency; one note naming the percentiles the samples cannot bound."""
    found: list[Metric] = []
    short: dict[tuple[int, int], list[str]] = {}
    for name, samples in latencies.items():
        for q in BOUNDED:
            bound = percentile_bound(samples, q)
            if bound is None:
                if samples:
                    short.setdefault((len(samples), q), []).append(name)
                continue
            found.append(single(f"{name}_p{q}_bound", "s", bound, f"95% upper confidence bound on P{q} of {name} "
                                f"(order statistic, {len(samples)} samples)"))
    if not short:
        return found, []
    parts = [f"P{q} of {', '.join(names)} ({n} samples; needs {samples_for_bound(q / 100)})"
             for (n, q), names in sorted(short.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    return found, [f"too few samples to bound {'; '.join(parts)} at 95% confidence: those percentiles are point "
                   "estimates only"]


def token_sources(ok: list[RequestRecord]) -> tuple[list[Metric], list[str]]:
    """How many requests took their output tokens from each source, and a note when any are chunk counts."""
    counts = Counter(r.output_tokens_source for r in ok if r.output_tokens_source is not None)
    found = [single(f"output_tokens_from_{source}", "requests", n, f"requests whose output tokens came from {source}")
             for source, n in sorted(counts.items())]
    notes = []
    if counts.get("chunks"):
        notes.append(f"output tokens of {counts['chunks']} of {len(ok)} request(s) are counts of content chunks (the "
                     "server sent no usage and no --tokenizer was given): a lower bound, since one chunk can carry "
                     "several tokens and a token that decodes to nothing sends none; pass --tokenizer for exact counts")
    return found, notes


def prefix_metrics(ok: list[RequestRecord], prompt_tokens: Sequence[int]) -> list[Metric | None]:
    """The server's cache hits (cached_tokens) and what the workload made shareable."""
    reported = [r for r in ok if r.cached_tokens_server is not None and r.prompt_tokens_server]
    out: list[Metric | None] = []
    if reported:
        cached = sum(r.cached_tokens_server or 0 for r in reported)
        prompt = sum(r.prompt_tokens_server or 0 for r in reported)
        out += [single("cached_prompt_tokens", "tokens", cached, f"Σ usage cached_tokens ({len(reported)} requests)"),
                single("prefix_cache_hit_rate", "fraction", cached / prompt if prompt else 0.0,
                       "Σ cached_tokens / Σ prompt_tokens, as the server reported them", True)]
    shared = sum(r.prefix_tokens for r in ok)
    total = sum(prompt_tokens)
    if shared and total:
        out.append(single("shared_prefix_fraction", "fraction", shared / total,
                          "prompt tokens the workload shares between requests / all prompt tokens"))
    return out


def turn_metrics(ok: list[RequestRecord]) -> list[Metric | None]:
    turns = sorted({r.turn for r in ok if r.turn is not None})[:MAX_TURNS]
    return [metric(f"ttft_turn_{k}_s", "s", [r.chunk_s[0] - r.sent_s for r in ok if r.turn == k],
                   f"TTFT of turn {k} of each conversation (its history grows turn by turn)") for k in turns]


def server_metric_list(run: LoadRun, client_tokens: int) -> list[Metric | None]:
    """The server's own account of the level, beside the client's numbers."""
    samples = run.server
    if not samples:
        return []
    engine = run.server_engine or "server"
    out: list[Metric | None] = []
    for name, key, unit in (("server_running_requests", "running", "requests"),
                            ("server_waiting_requests", "waiting", "requests"),
                            ("server_kv_cache_usage", "kv_usage", "fraction")):
        out.append(metric(name, unit, sm.gauge_samples(samples, key), f"{engine} /metrics '{key}', every scrape"))
    rate = sm.prefix_hit_rate(samples)
    if rate is not None:
        out.append(single("server_prefix_cache_hit_rate", "fraction", rate, f"{engine} /metrics prefix cache", True))
    for name, key in (("server_preemptions", "preemptions"), ("server_generation_tokens", "generation_tokens"),
                      ("server_prompt_tokens", "prompt_tokens")):
        rise = sm.counter_increase(samples, key)
        if rise is not None:
            beside = f" (the client counted {client_tokens:,})" if key == "generation_tokens" else ""
            out.append(single(name, "count", rise, f"{engine} /metrics '{key}' increase over the level{beside}"))
    return out


def image_metrics(ok: list[RequestRecord], duration: float) -> list[Metric | None]:
    per_image = [(r.chunk_s[-1] - r.sent_s) / r.images for r in ok if r.images]
    images = sum(r.images or 0 for r in ok)
    return [metric("seconds_per_image", "s", per_image, "e2e / images in the answer, per request"),
            single("images_per_s", "images/s", images / duration if duration > 0 else 0.0,
                   "Σ images / run duration", True)]
