"""What a load level recorded: one `RequestRecord` per request, the `LoadRun` around them.

Times are seconds relative to t0, the start of the measured phase (warm-up records are negative),
on `time.perf_counter()`: CLOCK_MONOTONIC on Linux, one clock for every process of the host, so a
server's or another worker process's stamps line up (`t0_perf_counter_s`).

Output tokens of a request come from one of three sources, recorded per request
(`output_tokens_source`, docs/measurement.md §2.4): the server's `usage` ("server"; llama.cpp's
`timings.predicted_n` counts as the server's), else the local tokenizer's count of the text
("tokenizer"), else the number of content chunks ("chunks", a lower bound: one chunk may carry
several tokens, and a token that decodes to nothing arrives as no chunk at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from gpuscout.frozen import Frozen
from gpuscout.loadgen.counts import impossible_count
from gpuscout.loadgen.exchange import Live
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.sse import read_usage

Endpoint = Literal["chat", "completions", "images"]
TokenSource = Literal["server", "tokenizer", "chunks"]


class PromptLike(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def output_tokens(self) -> int: ...


class RequestRecord(Frozen):
    index: int
    warmup: bool
    intended_s: float
    sent_s: float  # when the request's bytes were handed to the socket
    first_chunk_s: float | None
    chunk_s: tuple[float, ...]  # content-chunk arrivals
    end_s: float | None
    status: int | None
    error: str | None
    output_tokens_server: int | None  # None when absent, or when it cannot be true (count_issue says why)
    prompt_tokens_server: int | None
    output_tokens_client: int | None  # tokenizer count when one is available
    chunk_token_counts: tuple[int, ...] = ()
    max_tokens: int | None = None  # the output length asked for
    pinned: bool = False  # sent with ignore_eos/min_tokens (the server accepted them)
    count_issue: str | None = None  # the server's count was impossible (counts.impossible_count, sse.read_usage)
    usage_ignored: str | None = None  # a usage count that was not a number, ignored
    output_tokens_source: TokenSource | None = None  # where `metrics.output_tokens` takes its count from
    cached_tokens_server: int | None = None  # usage.prompt_tokens_details.cached_tokens: prompt tokens from cache
    connect_s: float = 0.0  # opening a new connection for it (before `sent_s`; 0 on a kept-alive one)
    prefix_tokens: int = 0  # prompt tokens shared with other requests (the workload's shared prefix)
    prompt_tokens: int | None = None  # the prompt's tokens as the workload built it (a conversation turn: its message)
    session: int | None = None  # multi-turn: the conversation and its turn (1 = first)
    turn: int | None = None
    images: int | None = None  # image generations: images in the answer


class ServerSample(Frozen):
    """One scrape of the server's Prometheus /metrics: seconds from t0, the values gpuscout reads."""


    t_s: float
    values: dict[str, float]


class LoadRun(Frozen):
    records: tuple[RequestRecord, ...]
    shape: LoadShape
    started_at: datetime
    wall_s: float  # t0 → last measured request's end
    client_cpu_s: float  # process CPU seconds over the measured phase (all worker processes)
    url: str  # without credentials
    model: str
    endpoint: Endpoint
    stream: bool
    notes: tuple[str, ...] = ()
    # time.perf_counter() at t0, the origin of every *_s time in `records`: CLOCK_MONOTONIC on Linux, one
    # clock for every process on the host, so another process's timestamps (a server's) can be aligned.
    t0_perf_counter_s: float | None = None
    timeout_s: float | None = None  # the per-request timeout used
    loop_lag_s: tuple[float, ...] = ()  # how late a 10 ms timer of the client's event loop fired, sampled
    # per lag sample: the loop thread's CPU time / that tick's wall interval (1.0: it ran the whole time)
    loop_lag_busy: tuple[float, ...] = ()
    # CPU seconds of the thread running the event loop (the client proper: a server started in another thread of
    # the same process, as in tests, is not in it); --workers: one per process.
    loop_cpu_s: tuple[float, ...] = ()
    # Seconds the loop thread was ready to run but waited for a CPU (Linux schedstat): CPU + wait is what it asked
    # for, so a saturated loop on a machine busy with other work still shows as saturated.
    loop_wait_s: tuple[float, ...] = ()
    worker_cpu_s: tuple[float, ...] = ()  # --workers: each process's CPU seconds (one process: empty)
    server: tuple[ServerSample, ...] = ()  # /metrics scrapes before, during and after the measured phase
    server_engine: str | None = None  # the engine its metric names belong to (vllm, sglang, tgi, llamacpp)
    stopped: str | None = None  # why the level was stopped early (over-saturation), None when it ran out

    @property
    def workers(self) -> int:
        return max(1, len(self.worker_cpu_s))


class LoadInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP during a level. `run` holds the measured requests that finished before
    it (None when none had); `signum` is the termination signal, None for Ctrl-C."""

    def __init__(self, run: LoadRun | None, signum: int | None) -> None:
        super().__init__("interrupted")
        self.run = run
        self.signum = signum


def build_records(lives: Sequence[Live], t0: float, count: Callable[[str], int | None] | None,
                  prompts: Sequence[PromptLike]) -> list[RequestRecord]:
    """Frozen records of every request, warm-up first, measured in index order."""
    return [_record(live, t0, count, prompts) for live in
            sorted(lives, key=lambda x: (not x.warmup, x.index if not x.warmup else -x.index))]


def _record(live: Live, t0: float, count: Callable[[str], int | None] | None,
            prompts: Sequence[PromptLike]) -> RequestRecord:
    usage = read_usage(live.usage)
    chunks = tuple(c - t0 for c in live.chunks)
    text = "".join(live.pieces)
    client_count = count(text) if count is not None and text else None
    prompt = prompts[live.prompt]
    max_tokens = prompt.output_tokens
    out_server, issue = usage.completion, usage.impossible
    if out_server is not None:
        issue = impossible_count(out_server, max_tokens=max_tokens, content_chars=len(text), chunks=len(chunks),
                                 reasoning=usage.reasoning, tokenizer_count=client_count)
        if issue is not None:
            out_server = None
    source: TokenSource | None = ("server" if out_server is not None else "tokenizer" if client_count is not None
                                  else "chunks" if chunks and live.images is None else None)
    return RequestRecord(
        index=live.index if not live.warmup else -1 - live.index, warmup=live.warmup,
        intended_s=live.intended - t0, sent_s=live.sent - t0, first_chunk_s=chunks[0] if chunks else None,
        chunk_s=chunks, end_s=None if live.end is None else live.end - t0, status=live.status, error=live.error,
        output_tokens_server=out_server, prompt_tokens_server=usage.prompt, output_tokens_client=client_count,
        max_tokens=max_tokens, pinned=live.pinned, count_issue=issue, usage_ignored=usage.ignored,
        output_tokens_source=source, cached_tokens_server=usage.cached, connect_s=live.connect,
        prefix_tokens=getattr(prompt, "prefix_tokens", 0) or 0, prompt_tokens=getattr(prompt, "prompt_tokens", None),
        session=live.session, turn=live.turn,
        images=live.images)


def token_counter(tokenizer: str | None) -> Callable[[str], int | None] | None:
    """The workload's tokenizer as a counting function, or None when there is none."""
    if tokenizer is None:
        return None
    from gpuscout.loadgen.workload import count_tokens

    def count(text: str) -> int | None:
        return count_tokens(text, tokenizer)

    return count
