"""The load generator: one asyncio loop, one shared HTTP/1.1 keep-alive client, absolute schedules.

Per request it records the intended send time (schedule, or the moment a closed-loop worker became
free), the actual send time, every content-chunk arrival and the end, so latency can be computed from
the intended time too (coordinated omission, docs/measurement.md §1). Errors are data, never fatal: HTTP errors,
timeouts, dropped streams, malformed SSE lines and refused connections become records whose `error`
starts with a kind (`http_500: …`, `timeout: …`, `dropped_stream: …`, `malformed_sse: …`, `connect: …`,
`oversize_line: …`, `oversize_body: …`, `cancelled_at_deadline: …`; docs/measurement.md §2.5).
Times in records are seconds relative to t0, the start of the measured phase (warm-up records are
negative).

Whatever the server sends, time and memory stay bounded (docs/measurement.md §2.5): each request has
a timeout (by default `default_timeout_s` of its output length) that also ends a read that stalls; an
SSE line is capped at `sse.MAX_LINE_BYTES`, a response at `max_body_bytes`, an error body is read only
up to `MAX_ERROR_BODY_BYTES`; a level with a duration cancels what is still in flight at its end.

Secrets: the API key is read from the environment and sent as a Bearer header; a URL's user-info is
not sent; secret query values are sent (the server may need them). None of them is ever stored or
printed: every URL kept is redacted and every error text scrubbed (`redact`).

Ctrl-C, SIGTERM or SIGHUP (as KeyboardInterrupt, `interrupts.stop_on_signals`) during `run_load_sync`
raise `LoadInterrupted`, which carries the requests that finished before it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, cast
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict

from gpuscout.errors import SpecError
from gpuscout.loadgen.counts import ABSURD_PER_MAX_TOKENS, impossible_count
from gpuscout.loadgen.redact import redact_url, scrub, url_secrets
from gpuscout.loadgen.schedule import LoadShape, planned_requests, send_offsets
from gpuscout.loadgen.sse import (
    LineSplitter,
    MalformedSseError,
    OversizeLineError,
    parse_line,
    parse_object,
    read_usage,
)

Endpoint = Literal["chat", "completions"]
Progress = Callable[[int, int], None]
PATHS = {"chat": "/chat/completions", "completions": "/completions"}
SPIN_S = 0.0015  # sleep to this close to a deadline, then yield-spin: the loop's timer rounds to 1 ms
EXTRA_FIELDS = ("ignore_eos", "min_tokens", "stream_options")

# Time (docs/measurement.md §2.5): the default per-request timeout grows with the output asked for,
# allowing 2 tokens/s per request, far below any GPU server's decode rate even when it is saturated.
DEFAULT_TIMEOUT_BASE_S = 30.0
DEFAULT_TIMEOUT_PER_TOKEN_S = 0.5
MAX_TIMEOUT_S = 86_400.0
CONNECT_TIMEOUT_S = 10.0
ERROR_BODY_S = 5.0  # an HTTP error's body gets this long to arrive; the status is the measurement
# Size: a response may carry this much per output token asked for (a streamed chunk is ~200 bytes, a few
# KiB with logprobs), on top of a base; an error body is read only this far.
BODY_BASE_BYTES = 4 << 20
BODY_PER_TOKEN_BYTES = 16 << 10
MAX_ERROR_BODY_BYTES = 64 << 10
CANCELLED_AT_DEADLINE = "cancelled_at_deadline"
INTERRUPTED = "interrupted"


def default_timeout_s(output_tokens: int) -> float:
    """Per-request timeout when none is given: 30 s + 0.5 s per output token (docs/measurement.md §2.5)."""
    return DEFAULT_TIMEOUT_BASE_S + DEFAULT_TIMEOUT_PER_TOKEN_S * output_tokens


def max_body_bytes(max_tokens: int) -> int:
    """The most bytes one response may carry: 4 MiB + 16 KiB per output token asked for."""
    return BODY_BASE_BYTES + BODY_PER_TOKEN_BYTES * max_tokens


class PromptLike(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def output_tokens(self) -> int: ...


class WorkloadLike(Protocol):
    @property
    def prompts(self) -> Sequence[PromptLike]: ...
    @property
    def tokenizer(self) -> str | None: ...


class RequestRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    warmup: bool
    intended_s: float
    sent_s: float
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


class LoadRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    records: tuple[RequestRecord, ...]
    shape: LoadShape
    started_at: datetime
    wall_s: float  # t0 → last measured request's end
    client_cpu_s: float  # process CPU seconds over the measured phase
    url: str  # without credentials
    model: str
    endpoint: Endpoint
    stream: bool
    notes: tuple[str, ...] = ()
    # time.perf_counter() at t0, the origin of every *_s time in `records`: CLOCK_MONOTONIC on Linux, one
    # clock for every process on the host, so another process's timestamps (a server's) can be aligned.
    t0_perf_counter_s: float | None = None
    timeout_s: float | None = None  # the per-request timeout used


class LoadInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP during a level. `run` holds the measured requests that finished before
    it (None when none had); `signum` is the termination signal, None for Ctrl-C."""

    def __init__(self, run: LoadRun | None, signum: int | None) -> None:
        super().__init__("interrupted")
        self.run = run
        self.signum = signum


class ResponseTooLarge(Exception):
    """A response past its size cap; the message starts with the error kind."""


def endpoint_url(url: str, endpoint: Endpoint) -> str:
    """Base URL, …/v1, or a full …/chat/completions URL → the request URL as shown and stored: no
    user-info, secret query values as *** (`redact`). `request_url` is what is sent."""
    return redact_url(request_url(url, endpoint))


def request_url(url: str, endpoint: Endpoint) -> str:
    """The URL requests go to: scheme, host, port, path to the endpoint, query kept; user-info dropped."""
    fix = "Pass the server's base URL, e.g. http://127.0.0.1:8000 or https://host/v1."
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise SpecError(f"{redact_url(url)!r} is not a valid URL.",
                        "A port must be a number from 0 to 65535, and a host in [brackets] an IPv6 address.",
                        fix) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{redact_url(url)!r} is not an http(s) URL.",
                        "gpuscout load sends OpenAI-compatible requests over HTTP.", fix)
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in parts.hostname:
        netloc = f"[{parts.hostname}]" + ("" if port is None else f":{port}")
    path = parts.path.rstrip("/")
    if not path.endswith(("/chat/completions", "/completions")):
        path = (path if path.endswith("/v1") else path + "/v1") + PATHS[endpoint]
    return urlunsplit((parts.scheme, netloc, path, parts.query, ""))


@dataclass(slots=True)
class _Live:
    """Mutable per-request state; turned into a frozen RequestRecord once, after the run."""

    index: int
    prompt: int
    warmup: bool
    intended: float
    sent: float = 0.0
    chunks: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    end: float | None = None
    status: int | None = None
    error: str | None = None
    usage: object | None = None
    pinned: bool = False


@dataclass(slots=True)
class _Context:
    client: httpx.AsyncClient  # shared by the open loop's requests
    client_options: dict[str, Any]  # to build one single-connection client per closed-loop worker
    url: str  # sent
    shown_url: str  # stored and printed: redacted
    model: str
    chat: bool
    stream: bool
    prompts: Sequence[PromptLike]
    timeout_s: float
    extra_body: dict[str, Any]
    secrets: tuple[str, ...]  # scrubbed from every error text
    extras_on: bool = True
    notes: list[str] = field(default_factory=list)
    bodies: dict[tuple[int, bool], bytes] = field(default_factory=dict)
    # Closed-loop workers' clients, kept from the warm-up into the measured phase so its
    # connections are already open (connection setup belongs to warm-up, not to TTFT).
    worker_clients: list[httpx.AsyncClient] = field(default_factory=list)
    done: int = 0
    total: int = 0
    progress: Progress | None = None
    cancel_reason: str = INTERRUPTED  # what a cancelled request is recorded as
    lives: list[_Live] = field(default_factory=list)  # every request started, warm-up first
    t0: float | None = None  # perf_counter at the start of the measured phase
    cpu0: float = 0.0


@dataclass(slots=True)
class _RunInfo:
    """What a LoadRun needs besides the requests; kept where an interrupt can still reach it."""

    shape: LoadShape
    started_at: datetime
    model: str
    endpoint: Endpoint
    stream: bool
    tokenizer: str | None
    ctx: _Context | None = None


async def run_load(url: str, model: str, workload: WorkloadLike, shape: LoadShape, *, endpoint: Endpoint = "chat",
                   stream: bool = True, api_key_env: str | None = "OPENAI_API_KEY", timeout_s: float | None = None,
                   extra_body: dict[str, Any] | None = None, progress: Progress | None = None,
                   _info: list[_RunInfo] | None = None) -> LoadRun:
    """Run one load shape. `timeout_s` None: `default_timeout_s` of the longest output asked for."""
    target = request_url(url, endpoint)
    if not workload.prompts:
        raise SpecError("The workload has no prompts.", "Every request sends one prompt.",
                        "Ask for at least one prompt (--requests, or a dataset with lines).")
    timeout = _check_timeout(timeout_s, max(p.output_tokens for p in workload.prompts))
    key = os.environ.get(api_key_env) if api_key_env else None
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json",
               "accept-encoding": "identity"}  # size caps count the bytes the server sends, so no compression
    if key:
        headers["authorization"] = f"Bearer {key}"
    width = shape.concurrency or 0
    limits = httpx.Limits(max_connections=width or None, max_keepalive_connections=width or 1024)
    # One TLS context for every client: building one per client costs ~20 ms each (httpx 0.28).
    # The read timeout equals the request's: a read that stalls that long ends it as `timeout`.
    options: dict[str, Any] = {"headers": headers, "timeout": httpx.Timeout(timeout, connect=min(timeout,
                                                                                                CONNECT_TIMEOUT_S)),
                               "http1": True, "http2": False, "follow_redirects": False, "trust_env": False,
                               "verify": httpx.create_ssl_context()}
    info = _RunInfo(shape, datetime.now(UTC), model, endpoint, stream, workload.tokenizer)
    if _info is not None:
        _info.append(info)
    secrets = tuple(s for s in ((key or ""), *url_secrets(url)) if s)
    gc.collect()
    gc.freeze()  # fewer GC pauses during the run (vLLM's freeze_gc_heap, docs/measurement.md §5)
    try:
        async with httpx.AsyncClient(limits=limits, **options) as client:
            ctx = _Context(client, options, target, redact_url(target), model, endpoint == "chat", stream,
                           workload.prompts, timeout, dict(extra_body or {}), secrets, progress=progress)
            info.ctx = ctx
            if "@" in urlsplit(url.strip()).netloc:
                ctx.notes.append("the URL's user:password@ was not sent; the API key goes as a Bearer token "
                                 "(--api-key-env)")
            try:
                await _phases(ctx, shape)
            finally:
                await asyncio.gather(*(c.aclose() for c in ctx.worker_clients))
    finally:
        gc.unfreeze()
    run = _build_run(info, ctx, ctx.lives, time.process_time() - ctx.cpu0)
    measured = [r for r in run.records if not r.warmup]
    if measured and all(r.error and r.error.startswith("connect") for r in measured):
        run = run.model_copy(update={"notes": (*run.notes, f"every request failed to connect to {ctx.shown_url}: "
                                                           "is the server running and reachable?")})
    return run


def run_load_sync(url: str, model: str, workload: WorkloadLike, shape: LoadShape, **kwargs: Any) -> LoadRun:
    """`run_load` in its own event loop; an interrupt raises `LoadInterrupted` with what finished."""
    info: list[_RunInfo] = []
    try:
        return asyncio.run(run_load(url, model, workload, shape, _info=info, **kwargs))
    except KeyboardInterrupt as stop:
        raise LoadInterrupted(_finished_run(info[0]) if info else None, getattr(stop, "signum", None)) from stop


def _check_timeout(timeout_s: float | None, output_tokens: int) -> float:
    if timeout_s is None:
        return default_timeout_s(output_tokens)
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise SpecError(f"The request timeout {timeout_s!r} s is not a number of seconds in (0, {MAX_TIMEOUT_S:g}].",
                        "Every request must end: the timeout bounds how long one may take.",
                        f"Pass --timeout between 0 and {MAX_TIMEOUT_S:g}, or leave it out for "
                        f"{DEFAULT_TIMEOUT_BASE_S:g} s + {DEFAULT_TIMEOUT_PER_TOKEN_S:g} s per output token.")
    return float(timeout_s)


def _finished_run(info: _RunInfo) -> LoadRun | None:
    """The measured requests that finished before an interrupt, as a run; None when there are none."""
    ctx = info.ctx
    if ctx is None or ctx.t0 is None:
        return None
    finished = [live for live in ctx.lives if not live.warmup and live.end is not None
                and not (live.error or "").startswith(INTERRUPTED)]
    if not finished:
        return None
    dropped = sum(1 for live in ctx.lives if not live.warmup) - len(finished)
    run = _build_run(info, ctx, finished, time.process_time() - ctx.cpu0)
    note = f"interrupted: {len(finished)} request(s) finished; {dropped} in flight were dropped"
    return run.model_copy(update={"notes": (*run.notes, note)})


def _build_run(info: _RunInfo, ctx: _Context, lives: list[_Live], cpu_s: float) -> LoadRun:
    t0 = ctx.t0 if ctx.t0 is not None else time.perf_counter()
    records = _records(lives, t0, info.tokenizer, ctx.prompts)
    measured = [r for r in records if not r.warmup]
    wall = max((r.end_s if r.end_s is not None else r.sent_s for r in measured), default=0.0)
    return LoadRun(records=tuple(records), shape=info.shape, started_at=info.started_at, wall_s=wall,
                   client_cpu_s=cpu_s, url=ctx.shown_url, model=info.model, endpoint=info.endpoint, stream=info.stream,
                   notes=tuple(ctx.notes), t0_perf_counter_s=ctx.t0, timeout_s=ctx.timeout_s)


async def _phases(ctx: _Context, shape: LoadShape) -> None:
    """Warm-up (closed loop, excluded from statistics), then the measured phase from t0."""
    n_prompts = len(ctx.prompts)
    if shape.warmup_requests:
        warm = (_Live(-1 - i, i % n_prompts, True, 0.0) for i in range(shape.warmup_requests))
        await _closed_loop(ctx, warm, min(shape.concurrency or 8, shape.warmup_requests), None)
    planned = planned_requests(shape)
    ctx.total = planned if shape.requests is not None or shape.rate_rps is not None else 0
    offset = shape.warmup_requests
    ctx.cpu0, ctx.t0 = time.process_time(), time.perf_counter()
    t0 = ctx.t0
    offsets = send_offsets(shape, planned)
    if offsets is None:
        assert shape.concurrency is not None
        measured = (_Live(i, (offset + i) % n_prompts, False, 0.0) for i in range(planned))
        await _closed_loop(ctx, measured, shape.concurrency, shape.duration_s and t0 + shape.duration_s)
    else:
        await _open_loop(ctx, offsets, t0, shape.duration_s, offset)


async def _closed_loop(ctx: _Context, todo: Iterator[_Live], width: int, deadline: float | None) -> None:
    """`width` workers; each sends its next request the moment its previous one ends."""
    lives = ctx.lives

    async def worker(client: httpx.AsyncClient) -> None:
        for live in todo:  # a shared iterator: workers take the next request in turn
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                return
            live.intended = now
            lives.append(live)
            await _send(ctx, live, client)

    await _finish(ctx, [asyncio.create_task(worker(c)) for c in _worker_clients(ctx, width)], deadline)


def _worker_clients(ctx: _Context, width: int) -> list[httpx.AsyncClient]:
    """One keep-alive connection per worker, each in its own client.

    httpx's shared pool scans every connection on each request, which cost two thirds of the
    client's CPU at concurrency 64 (cProfile, benchmarks/load_client_ceiling.py); per-worker
    clients doubled the sustained rate at 16. They live until `run_load` closes them.
    """
    single = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    while len(ctx.worker_clients) < width:
        ctx.worker_clients.append(httpx.AsyncClient(limits=single, **ctx.client_options))
    return ctx.worker_clients[:width]


async def _open_loop(ctx: _Context, offsets: list[float], t0: float, duration_s: float | None,
                     offset: int) -> None:
    """Send request i at t0 + offsets[i], absolutely: a late send never moves the next one."""
    tasks = []
    n_prompts = len(ctx.prompts)
    try:
        for i, off in enumerate(offsets):
            if duration_s is not None and off >= duration_s:
                break
            deadline = t0 + off
            delay = deadline - time.perf_counter()
            if delay > SPIN_S:
                await asyncio.sleep(delay - SPIN_S + 0.0005)
            while time.perf_counter() < deadline:
                await asyncio.sleep(0)
            live = _Live(i, (offset + i) % n_prompts, False, deadline)
            ctx.lives.append(live)
            tasks.append(asyncio.create_task(_send(ctx, live, ctx.client)))
    except asyncio.CancelledError:
        await _cancel(tasks)  # Ctrl-C while scheduling: the sent requests end as interrupted, then stop
        raise
    await _finish(ctx, tasks, None if duration_s is None else t0 + duration_s)


async def _finish(ctx: _Context, tasks: list[asyncio.Task[None]], deadline: float | None) -> None:
    """Wait for `tasks`; at `deadline` cancel those still running (recorded as cancelled_at_deadline)."""
    if not tasks:
        return
    try:
        timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
        _, pending = await asyncio.wait(tasks, timeout=timeout)
    except asyncio.CancelledError:
        await _cancel(tasks)  # Ctrl-C: requests still running end as interrupted before the clients close
        raise
    if pending:
        ctx.cancel_reason = CANCELLED_AT_DEADLINE
        await _cancel(list(pending))
        now = time.perf_counter()
        for live in ctx.lives:  # a task cancelled before its first step never reached _attempt's handler
            if live.end is None and not live.warmup:
                live.error, live.end = f"{CANCELLED_AT_DEADLINE}: never sent", now
                live.sent = live.sent or live.intended
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a bug in the client: keep its traceback


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _send(ctx: _Context, live: _Live, client: httpx.AsyncClient) -> None:
    """One request; a 400 while the pinning extras are on turns them off and retries once."""
    await _attempt(ctx, live, ctx.extras_on, client)
    if live.status == 400 and live.pinned:  # also for requests already in flight when the first 400 came
        if ctx.extras_on:
            ctx.extras_on = False
            ctx.notes.append(f"the server answered 400 to {', '.join(EXTRA_FIELDS)}; "
                             "retried without them, so output lengths are not pinned")
        live.chunks.clear()
        live.pieces.clear()
        live.error = live.usage = None
        await _attempt(ctx, live, False, client)
    if not live.warmup:
        ctx.done += 1
        if ctx.progress is not None:
            ctx.progress(ctx.done, ctx.total)


async def _attempt(ctx: _Context, live: _Live, extras: bool, client: httpx.AsyncClient) -> None:
    body = _body(ctx, live.prompt, extras)
    live.pinned = extras
    live.sent = time.perf_counter()
    try:
        async with asyncio.timeout(ctx.timeout_s):
            if ctx.stream:
                await _streamed(ctx, live, body, client)
            else:
                await _plain(ctx, live, body, client)
    except (TimeoutError, httpx.TimeoutException):
        if not (live.error or "").startswith("http_"):  # an error status is the answer, however slow its body
            live.error = f"timeout: no complete answer within {ctx.timeout_s:g} s"
    except httpx.ConnectError as exc:
        live.error = f"connect: {_scrub(ctx, exc)}"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        live.error = f"{_protocol_kind(exc)}: {_scrub(ctx, exc)}"
    except OversizeLineError as exc:
        live.error = f"oversize_line: {exc}; the rest was not read"
    except ResponseTooLarge as exc:
        live.error = str(exc)
    except httpx.HTTPError as exc:
        live.error = f"http: {type(exc).__name__}: {_scrub(ctx, exc)}"
    except asyncio.CancelledError:
        live.error = f"{ctx.cancel_reason}: still running when the level was stopped"
        live.end = time.perf_counter()
        raise
    live.end = time.perf_counter()


def _protocol_kind(exc: httpx.HTTPError) -> str:
    """A connection that ended early is a dropped stream; anything else h11 refused is malformed HTTP."""
    text = str(exc).lower()
    dropped = isinstance(exc, httpx.ReadError) or any(w in text for w in ("closed", "disconnect", "incomplete"))
    return "dropped_stream" if dropped else "malformed_http"


async def _streamed(ctx: _Context, live: _Live, body: bytes, client: httpx.AsyncClient) -> None:
    malformed = 0
    async with client.stream("POST", ctx.url, content=body) as resp:
        live.status = resp.status_code
        if resp.status_code != 200:
            await _http_error(ctx, live, resp)
            return
        max_tokens = ctx.prompts[live.prompt].output_tokens
        cap, max_chunks = max_body_bytes(max_tokens), ABSURD_PER_MAX_TOKENS * max_tokens
        received = 0
        feed = LineSplitter().feed
        chunks, pieces, chat = live.chunks, live.pieces, ctx.chat
        async with aclosing(_reads(resp)) as reads:
            async for data in reads:
                now = time.perf_counter()
                received += len(data)
                if received > cap:
                    raise ResponseTooLarge(f"oversize_body: the stream passed {cap:,} bytes for max_tokens "
                                           f"{max_tokens:,}; the rest was not read")
                for line in feed(data):
                    try:
                        event = parse_line(line.rstrip(b"\r"), chat=chat)
                    except MalformedSseError:
                        malformed += 1
                        continue
                    if event.text:
                        chunks.append(now)
                        pieces.append(event.text)
                    if event.usage is not None:
                        live.usage = event.usage
                    if event.error:
                        live.error = f"stream_error: {_scrub(ctx, event.error)}"
                if len(chunks) > max_chunks:
                    raise ResponseTooLarge(f"oversize_body: more than {max_chunks:,} content chunks for max_tokens "
                                           f"{max_tokens:,}; the rest was not read")
    if malformed and live.error is None:
        live.error = f"malformed_sse: {malformed} data line(s) were not JSON objects"


async def _plain(ctx: _Context, live: _Live, body: bytes, client: httpx.AsyncClient) -> None:
    async with client.stream("POST", ctx.url, content=body) as resp:
        live.status = resp.status_code
        if resp.status_code != 200:
            await _http_error(ctx, live, resp)
            return
        max_tokens = ctx.prompts[live.prompt].output_tokens
        content = await _read_all(resp, max_body_bytes(max_tokens), max_tokens)
        now = time.perf_counter()
    try:
        obj = json.loads(content)
    except (ValueError, RecursionError):
        live.error = "malformed_response: the body is not JSON"
        return
    event = parse_object(obj, chat=ctx.chat, delta=False)
    if event.text:
        live.chunks.append(now)
        live.pieces.append(event.text)
    live.usage = event.usage
    if event.error:
        live.error = f"stream_error: {_scrub(ctx, event.error)}"


def _reads(resp: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body as it arrives, undecoded; an async generator (httpx types it as an iterator), so a read
    loop left early can close it at once (`aclosing`) rather than when the garbage collector gets to it."""
    return cast(AsyncGenerator[bytes, None], resp.aiter_raw())


async def _read_all(resp: httpx.Response, cap: int, max_tokens: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async with aclosing(_reads(resp)) as reads:
        async for data in reads:
            size += len(data)
            if size > cap:
                raise ResponseTooLarge(f"oversize_body: the body passed {cap:,} bytes for max_tokens {max_tokens:,}; "
                                       "the rest was not read")
            parts.append(data)
    return b"".join(parts)


async def _http_error(ctx: _Context, live: _Live, resp: httpx.Response) -> None:
    """An error status: recorded at once; up to 64 KiB of its body, for up to 5 s, go into the message."""
    live.error = f"http_{resp.status_code}: (body not read)"
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(ERROR_BODY_S), aclosing(_reads(resp)) as reads:
            async for data in reads:
                parts.append(data)
                size += len(data)
                if size >= MAX_ERROR_BODY_BYTES:
                    break  # the rest is not read: leaving the stream closes this connection
    except (TimeoutError, httpx.HTTPError):
        pass  # the status already says what happened
    live.error = f"http_{resp.status_code}: {_scrub(ctx, b''.join(parts)[:MAX_ERROR_BODY_BYTES])[:200]}"


def _body(ctx: _Context, prompt_index: int, extras: bool) -> bytes:
    """Request JSON, serialized once per prompt and reused (no per-request encoding cost)."""
    key = (prompt_index, extras)
    cached = ctx.bodies.get(key)
    if cached is not None:
        return cached
    prompt = ctx.prompts[prompt_index]
    body: dict[str, Any] = {"model": ctx.model, "max_tokens": prompt.output_tokens, "stream": ctx.stream}
    if ctx.chat:
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    if extras:
        # Pin the output length where the server accepts it (vLLM, SGLang, llama.cpp read these).
        body |= {"ignore_eos": True, "min_tokens": prompt.output_tokens}
        if ctx.stream:
            body["stream_options"] = {"include_usage": True}
    body |= ctx.extra_body
    encoded = json.dumps(body, separators=(",", ":")).encode()
    ctx.bodies[key] = encoded
    return encoded


def _scrub(ctx: _Context, what: object) -> str:
    """Error text without secrets (API key, URL credentials) or newlines, at most 300 characters."""
    text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
    return scrub(text, ctx.secrets).replace("\n", " ").strip()[:300]


def _records(lives: list[_Live], t0: float, tokenizer: str | None,
             prompts: Sequence[PromptLike]) -> list[RequestRecord]:
    count = _token_counter(tokenizer)
    records = []
    for live in sorted(lives, key=lambda x: (not x.warmup, x.index if not x.warmup else -x.index)):
        usage = read_usage(live.usage)
        chunks = tuple(c - t0 for c in live.chunks)
        text = "".join(live.pieces)
        client_count = count(text) if count is not None and text else None
        max_tokens = prompts[live.prompt].output_tokens
        out_server, issue = usage.completion, usage.impossible
        if out_server is not None:
            issue = impossible_count(out_server, max_tokens=max_tokens, content_chars=len(text), chunks=len(chunks),
                                     reasoning=usage.reasoning, tokenizer_count=client_count)
            if issue is not None:
                out_server = None
        records.append(RequestRecord(
            index=live.index if not live.warmup else -1 - live.index, warmup=live.warmup,
            intended_s=live.intended - t0, sent_s=live.sent - t0, first_chunk_s=chunks[0] if chunks else None,
            chunk_s=chunks, end_s=None if live.end is None else live.end - t0, status=live.status, error=live.error,
            output_tokens_server=out_server, prompt_tokens_server=usage.prompt, output_tokens_client=client_count,
            max_tokens=max_tokens, pinned=live.pinned, count_issue=issue, usage_ignored=usage.ignored))
    return records


def _token_counter(tokenizer: str | None) -> Callable[[str], int | None] | None:
    """The workload's tokenizer (engineer B's count_tokens), or None when absent."""
    if tokenizer is None:
        return None
    try:
        from gpuscout.loadgen.workload import count_tokens  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def count(text: str) -> int | None:
        result: int | None = count_tokens(text, tokenizer)
        return result

    return count
