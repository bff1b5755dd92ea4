"""What a load test should do, as one typed, validated object: `LoadPlan`.

`gpuscout load` turns its options into a plan with `make_plan`, and `session.run_plan` runs it;
the Python API takes the same plan. Every option is checked here, once, with a what/why/fix error,
so the run itself never starts on a plan that cannot work.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.loadgen.client import MAX_TIMEOUT_S, Endpoint, default_timeout_s, endpoint_url
from gpuscout.loadgen.schedule import (
    MAX_CONCURRENCY,
    MAX_REQUESTS_PER_LEVEL,
    LoadShape,
    ShapeKind,
    check_schedule_size,
)
from gpuscout.loadgen.workload import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_WORKLOAD_TOKENS
from gpuscout.results.schema import BillingType
from gpuscout.workload.job import Slo

Arrival = Literal["constant", "poisson", "gamma"]
PromptDistribution = Literal["fixed", "uniform", "normal"]
DEFAULT_REQUESTS = 100  # measured requests per level when neither a count nor a duration is given


class LoadPlan(Frozen):
    """One load test: the endpoint, the traffic, the prompts, and what to measure."""

    model_config = ConfigDict(allow_inf_nan=False)

    url: str
    model: str = Field(min_length=1)
    endpoint: Endpoint = "chat"
    stream: bool = True
    concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)  # closed loop: requests in flight
    rate: float | None = Field(None, gt=0)  # open loop: requests per second
    arrival: Arrival = "poisson"
    burstiness: float = Field(1.0, gt=0)  # gamma shape k: 1 = Poisson, < 1 burstier
    requests: int | None = Field(None, gt=0, le=MAX_REQUESTS_PER_LEVEL)  # measured requests per level
    duration_s: float | None = Field(None, gt=0)  # or run each level this long (in-flight requests cancelled)
    warmup: int = Field(0, ge=0, le=MAX_REQUESTS_PER_LEVEL)
    prompt_tokens: int = Field(128, gt=0, le=MAX_PROMPT_TOKENS)
    prompt_dist: PromptDistribution = "fixed"
    prompt_spread: int = Field(0, ge=0, le=MAX_PROMPT_TOKENS)
    output_tokens: int = Field(128, gt=0, le=MAX_OUTPUT_TOKENS)
    dataset: Path | None = None  # JSONL prompts instead of synthetic ones
    tokenizer: str | None = None  # local tokenizer: exact prompts and token counts
    seed: int = 0
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)  # None: default_timeout_s(output_tokens)
    sweep: tuple[float, ...] = ()  # levels to sweep
    search: bool = False  # find the most load meeting the SLO's P95 targets
    slo: Slo | None = None
    percentile: float = Field(95.0, gt=0, lt=100)  # the percentile the validity gate needs samples for
    # Independent runs of every level, each a fresh client, interleaved across a sweep's levels:
    # compare needs the variation between runs to tell a real difference from drift.
    runs: int = Field(3, ge=1, le=100)
    region: str | None = Field(None, max_length=200)  # where the server was rented (a fixed variable)
    billing: BillingType | None = None  # on-demand / spot / reserved (a fixed variable)
    # Production-like traffic (docs/measurement.md §2.11–§2.12)
    prefix_share: float = Field(0.0, ge=0, lt=1)  # share of each prompt's tokens shared with its group
    prefix_groups: int = Field(1, ge=1, le=100_000)  # distinct shared prefixes
    prefix_control: bool = False  # also run every level with the same lengths and no shared prefix
    turns: int | None = Field(None, ge=1, le=1000)  # multi-turn conversations of this many turns
    think_s: float = Field(0.0, ge=0, le=86_400)  # pause between an answer and the next turn
    trace: Path | None = None  # a Mooncake-format trace replayed on its own schedule
    speedup: float = Field(1.0, gt=0, le=1e6)  # trace replay speed
    sharegpt: Path | None = None  # a ShareGPT-style JSON file of conversations
    multi_turn: bool = False  # ShareGPT: send whole conversations, not only their first turns
    metrics_url: str | None = None  # the server's Prometheus /metrics (scraped before, during, after)
    workers: int = Field(1, ge=1, le=64)  # client processes sharing one schedule
    image_size: str | None = Field(None, pattern=r"^\d{2,5}x\d{2,5}$")  # images endpoint: e.g. 1024x1024
    server_gpu: str | None = Field(None, max_length=100)  # the server's GPU (catalog name): feeds pick
    server_gpus: int = Field(1, ge=1, le=64)  # GPUs behind the endpoint (one replica)

    @model_validator(mode="after")
    def _consistent(self) -> LoadPlan:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("both concurrency and rate were given; a run is either closed loop (requests in "
                             "flight) or open loop (arrival rate): pass one of them")
        if self.search and self.slo is None:
            raise ValueError("search has no target: it finds the most load whose P95 latencies meet targets; "
                             "add at least one of ttft_p95, tpot_p95, e2e_p95 (seconds)")
        if any(level <= 0 for level in self.sweep):
            raise ValueError("sweep levels must be positive")
        if self.closed_loop and any(not 1 <= level <= MAX_CONCURRENCY for level in self.sweep):
            raise ValueError(f"a concurrency sweep's levels must be from 1 to {MAX_CONCURRENCY} requests in flight")
        if self.rate is not None and self.requests is None and self.duration_s is not None:
            for level in (*self.sweep, self.rate):
                check_schedule_size(level, self.duration_s)  # before anything is built or sent
        sources = [name for name, given in (("--dataset", self.dataset), ("--trace", self.trace),
                                            ("--sharegpt", self.sharegpt)) if given is not None]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} were both given; prompts come from one source")
        if self.trace is not None and (self.concurrency is not None or self.rate is not None):
            raise ValueError("a trace is replayed on its own schedule: drop --concurrency/--rate (use --speedup)")
        if self.sessions and self.rate is not None:
            raise ValueError("conversations are sent by users (--concurrency), each turn after the last answer: "
                             "drop --rate")
        if self.prefix_share and (self.trace or self.sharegpt or self.dataset or self.sessions):
            raise ValueError("--prefix-share builds synthetic prompts: it cannot be combined with a dataset, a "
                             "trace or conversations")
        if self.prefix_control and not self.prefix_share:
            raise ValueError("--prefix-control compares shared prefixes with unshared ones: give --prefix-share")
        if self.endpoint == "images" and (self.sessions or self.trace):
            raise ValueError("image generations are single prompts: no --turns, --multi-turn or --trace")
        if not (self.trace or self.sharegpt or self.dataset):  # synthetic prompts: their size, before they are built
            longest = self.prompt_tokens + self.prompt_spread
            total = self.prompts_needed * longest
            if total > MAX_WORKLOAD_TOKENS:
                raise ValueError(f"{self.prompts_needed:,} prompts of up to {longest:,} "
                                 f"tokens are {total:,} tokens to build, more than the {MAX_WORKLOAD_TOKENS:,} a "
                                 "workload may hold: lower --requests, --prompt-tokens or --prompt-spread")
        endpoint_url(self.url, self.endpoint)  # a malformed URL is refused before any work
        if self.metrics_url is not None:
            endpoint_url(self.metrics_url, self.endpoint)
        return self

    @property
    def sessions(self) -> bool:
        """Multi-turn conversations: synthetic (--turns) or a ShareGPT file's (--multi-turn)."""
        return self.turns is not None or (self.sharegpt is not None and self.multi_turn)

    @property
    def closed_loop(self) -> bool:
        return self.rate is None and self.trace is None

    @property
    def level(self) -> float | None:
        """The single level asked for (concurrency or users, rate, or a trace's speed-up), if any."""
        if self.trace is not None:
            return self.speedup
        return self.concurrency if self.closed_loop else self.rate

    @property
    def request_timeout_s(self) -> float:
        """The per-request timeout: as given, or 30 s + 0.5 s per output token (docs/measurement.md §2.5)."""
        return self.timeout_s if self.timeout_s is not None else default_timeout_s(self.output_tokens)

    @property
    def prompts_needed(self) -> int:
        """Prompts to prepare: every measured request plus the warm-up (reused cyclically if short)."""
        return (self.requests or 256) + self.warmup

    @property
    def prompts_sampled(self) -> int:
        """Prompts to draw from a dataset: one per request the plan can send (a rate's whole duration), at
        most a level's cap, so a large file gives a run its own sample instead of all its entries."""
        if self.requests is not None:
            return self.requests + self.warmup
        if self.rate is not None and self.duration_s is not None:
            fastest = max((*self.sweep, self.rate))
            return min(MAX_REQUESTS_PER_LEVEL, math.ceil(fastest * self.duration_s)) + self.warmup
        return MAX_REQUESTS_PER_LEVEL + self.warmup


def make_plan(**options: Any) -> LoadPlan:
    """A `LoadPlan` from keyword options; an invalid option is a SpecError naming it."""
    try:
        return LoadPlan(**options)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "load options"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SpecError(f"Invalid load option {where}: {message}.",
                        "gpuscout load checks every option before it sends a request.",
                        "Correct the option (gpuscout load --help lists them).") from None


def parse_levels(text: str) -> tuple[float, ...]:
    """'1,2,4,8' → (1.0, 2.0, 4.0, 8.0)."""
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise SpecError(f"--sweep {text!r} is not a list of numbers.", "A sweep runs one case per level.",
                        "Pass levels like --sweep 1,2,4,8.") from None


def shape_at(plan: LoadPlan, level: float, trace_requests: int | None = None) -> LoadShape:
    """The load shape of one level of the plan (concurrency rounds down to whole requests; a trace's level is
    its speed-up, and it sends `trace_requests`, its length, unless told fewer)."""
    key: dict[str, Any] = {"concurrency": max(1, int(level))} if plan.closed_loop else {"rate_rps": float(level)}
    kind: ShapeKind = "sessions" if plan.sessions else "concurrency" if plan.closed_loop else plan.arrival
    requests = plan.requests if plan.requests or plan.duration_s else DEFAULT_REQUESTS
    if plan.trace is not None:
        kind, key = "trace", {"speedup": float(level)}
        requests = min(plan.requests or trace_requests or DEFAULT_REQUESTS, trace_requests or MAX_REQUESTS_PER_LEVEL)
    try:
        return LoadShape(kind=kind, burstiness=plan.burstiness, requests=requests, duration_s=plan.duration_s,
                         warmup_requests=plan.warmup, seed=plan.seed, think_s=plan.think_s, **key)
    except ValidationError as exc:
        raise SpecError(f"Invalid load shape at level {level:g}: {exc.errors()[0]['msg']}.",
                        "Concurrency, rate, requests and duration must be positive; warm-up ≥ 0.",
                        "Correct the option.") from None
