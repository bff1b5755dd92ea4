"""The load generator: one asyncio loop, one shared HTTP/1.1 keep-alive client, absolute schedules.

Per request it records the intended send time (schedule, or the moment a closed-loop worker became
free), the actual send time, every content-chunk arrival and the end, so latency can be computed from
the intended time too (coordinated omission, docs/measurement.md §1). Errors are data, never fatal: HTTP errors,
timeouts, dropped streams, malformed SSE lines and refused connections become records whose `error`
starts with a kind (`http_500: …`, `timeout: …`, `dropped_stream: …`, `malformed_sse: …`, `connect: …`).
Times in records are seconds relative to t0, the start of the measured phase (warm-up records are
negative). The API key is read from the environment, sent as a Bearer header and scrubbed from every
error text; it is never stored.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict

from gpuscout.errors import SpecError
from gpuscout.loadgen.schedule import LoadShape, planned_requests, send_offsets
from gpuscout.loadgen.sse import MalformedSseError, parse_line, parse_object, split_lines

Endpoint = Literal["chat", "completions"]
Progress = Callable[[int, int], None]
PATHS = {"chat": "/chat/completions", "completions": "/completions"}
SPIN_S = 0.0015  # sleep to this close to a deadline, then yield-spin: the loop's timer rounds to 1 ms
EXTRA_FIELDS = ("ignore_eos", "min_tokens", "stream_options")


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
    output_tokens_server: int | None
    prompt_tokens_server: int | None
    output_tokens_client: int | None  # tokenizer count when one is available
    chunk_token_counts: tuple[int, ...] = ()


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


def endpoint_url(url: str, endpoint: Endpoint) -> str:
    """Base URL, …/v1, or a full …/chat/completions URL → the request URL (credentials removed)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{url!r} is not an http(s) URL.",
                        "gpuscout load sends OpenAI-compatible requests over HTTP.",
                        "Pass the server's base URL, e.g. http://127.0.0.1:8000 or https://host/v1.")
    try:
        port = parts.port
    except ValueError:
        raise SpecError(f"{url!r} has an invalid port.", "A port must be a number from 0 to 65535.",
                        "Pass the URL as http://HOST:PORT.") from None
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
    usage: dict[str, Any] | None = None


@dataclass(slots=True)
class _Context:
    client: httpx.AsyncClient  # shared by the open loop's requests
    client_options: dict[str, Any]  # to build one single-connection client per closed-loop worker
    url: str
    model: str
    chat: bool
    stream: bool
    prompts: Sequence[PromptLike]
    timeout_s: float
    extra_body: dict[str, Any]
    secret: str | None
    extras_on: bool = True
    notes: list[str] = field(default_factory=list)
    bodies: dict[tuple[int, bool], bytes] = field(default_factory=dict)
    # Closed-loop workers' clients, kept from the warm-up into the measured phase so its
    # connections are already open (connection setup belongs to warm-up, not to TTFT).
    worker_clients: list[httpx.AsyncClient] = field(default_factory=list)
    done: int = 0
    total: int = 0
    progress: Progress | None = None


async def run_load(url: str, model: str, workload: WorkloadLike, shape: LoadShape, *, endpoint: Endpoint = "chat",
                   stream: bool = True, api_key_env: str | None = "OPENAI_API_KEY", timeout_s: float = 600,
                   extra_body: dict[str, Any] | None = None, progress: Progress | None = None) -> LoadRun:
    target = endpoint_url(url, endpoint)
    if not workload.prompts:
        raise SpecError("The workload has no prompts.", "Every request sends one prompt.",
                        "Ask for at least one prompt (--requests, or a dataset with lines).")
    secret = os.environ.get(api_key_env) if api_key_env else None
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
    if secret:
        headers["authorization"] = f"Bearer {secret}"
    width = shape.concurrency or 0
    limits = httpx.Limits(max_connections=width or None, max_keepalive_connections=width or 1024)
    # One TLS context for every client: building one per client costs ~20 ms each (httpx 0.28).
    options: dict[str, Any] = {"headers": headers, "timeout": httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
                               "http1": True, "http2": False, "follow_redirects": False, "trust_env": False,
                               "verify": httpx.create_ssl_context()}
    started_at = datetime.now(UTC)
    gc.collect()
    gc.freeze()  # fewer GC pauses during the run (vLLM's freeze_gc_heap, docs/measurement.md §5)
    try:
        async with httpx.AsyncClient(limits=limits, **options) as client:
            ctx = _Context(client, options, target, model, endpoint == "chat", stream, workload.prompts, timeout_s,
                           dict(extra_body or {}), secret, progress=progress)
            try:
                lives, t0, cpu_s = await _phases(ctx, shape)
            finally:
                await asyncio.gather(*(c.aclose() for c in ctx.worker_clients))
    finally:
        gc.unfreeze()
    records = _records(lives, t0, workload.tokenizer)
    measured = [r for r in records if not r.warmup]
    ends = [r.end_s if r.end_s is not None else r.sent_s for r in measured]
    wall = max(ends, default=0.0)
    notes = tuple(ctx.notes)
    if measured and all(r.error and r.error.startswith("connect") for r in measured):
        notes += (f"every request failed to connect to {target}: is the server running and reachable?",)
    return LoadRun(records=tuple(records), shape=shape, started_at=started_at, wall_s=wall, client_cpu_s=cpu_s,
                   url=target, model=model, endpoint=endpoint, stream=stream, notes=notes, t0_perf_counter_s=t0)


def run_load_sync(url: str, model: str, workload: WorkloadLike, shape: LoadShape, **kwargs: Any) -> LoadRun:
    return asyncio.run(run_load(url, model, workload, shape, **kwargs))


async def _phases(ctx: _Context, shape: LoadShape) -> tuple[list[_Live], float, float]:
    """Warm-up (closed loop, excluded from statistics), then the measured phase from t0."""
    lives: list[_Live] = []
    n_prompts = len(ctx.prompts)
    if shape.warmup_requests:
        warm = [_Live(-1 - i, i % n_prompts, True, 0.0) for i in range(shape.warmup_requests)]
        await _closed_loop(ctx, iter(warm), min(shape.concurrency or 8, len(warm)), None)
        lives += warm
    planned = planned_requests(shape)
    ctx.total = planned if planned < 10**9 else 0
    offset = shape.warmup_requests
    cpu0, t0 = time.process_time(), time.perf_counter()
    offsets = send_offsets(shape, planned)
    if offsets is None:
        assert shape.concurrency is not None
        measured = (_Live(i, (offset + i) % n_prompts, False, 0.0) for i in range(planned))
        lives += await _closed_loop(ctx, measured, shape.concurrency, shape.duration_s and t0 + shape.duration_s)
    else:
        lives += await _open_loop(ctx, offsets, t0, shape.duration_s, offset)
    return lives, t0, time.process_time() - cpu0


async def _closed_loop(ctx: _Context, todo: Any, width: int, deadline: float | None) -> list[_Live]:
    """`width` workers; each sends its next request the moment its previous one ends."""
    done: list[_Live] = []

    async def worker(client: httpx.AsyncClient) -> None:
        for live in todo:  # a shared iterator: workers take the next request in turn
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                return
            live.intended = now
            await _send(ctx, live, client)
            done.append(live)

    await asyncio.gather(*(worker(client) for client in _worker_clients(ctx, width)))
    return done


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
                     offset: int) -> list[_Live]:
    """Send request i at t0 + offsets[i], absolutely: a late send never moves the next one."""
    lives: list[_Live] = []
    tasks = []
    n_prompts = len(ctx.prompts)
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
        lives.append(live)
        tasks.append(asyncio.create_task(_send(ctx, live, ctx.client)))
    await asyncio.gather(*tasks)
    return lives


async def _send(ctx: _Context, live: _Live, client: httpx.AsyncClient) -> None:
    """One request; a 400 while the pinning extras are on turns them off and retries once."""
    await _attempt(ctx, live, ctx.extras_on, client)
    if live.status == 400 and ctx.extras_on:
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
    live.sent = time.perf_counter()
    try:
        async with asyncio.timeout(ctx.timeout_s):
            if ctx.stream:
                await _streamed(ctx, live, body, client)
            else:
                await _plain(ctx, live, body, client)
    except (TimeoutError, httpx.TimeoutException):
        live.error = f"timeout: no complete answer within {ctx.timeout_s:g} s"
    except httpx.ConnectError as exc:
        live.error = f"connect: {_scrub(ctx, exc)}"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        live.error = f"dropped_stream: {_scrub(ctx, exc)}"
    except httpx.HTTPError as exc:
        live.error = f"http: {type(exc).__name__}: {_scrub(ctx, exc)}"
    live.end = time.perf_counter()


async def _streamed(ctx: _Context, live: _Live, body: bytes, client: httpx.AsyncClient) -> None:
    malformed = 0
    async with client.stream("POST", ctx.url, content=body) as resp:
        live.status = resp.status_code
        if resp.status_code != 200:
            live.error = f"http_{resp.status_code}: {_scrub(ctx, (await resp.aread())[:200])}"
            return
        pending = b""
        chunks, pieces = live.chunks, live.pieces
        async for data in resp.aiter_raw():
            now = time.perf_counter()
            lines, pending = split_lines(pending, data)
            for line in lines:
                try:
                    event = parse_line(line.rstrip(b"\r"), chat=ctx.chat)
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
    if malformed and live.error is None:
        live.error = f"malformed_sse: {malformed} data line(s) were not JSON"


async def _plain(ctx: _Context, live: _Live, body: bytes, client: httpx.AsyncClient) -> None:
    resp = await client.post(ctx.url, content=body)
    now = time.perf_counter()
    live.status = resp.status_code
    if resp.status_code != 200:
        live.error = f"http_{resp.status_code}: {_scrub(ctx, resp.content[:200])}"
        return
    try:
        obj = json.loads(resp.content)
    except ValueError:
        live.error = "malformed_response: the body is not JSON"
        return
    event = parse_object(obj if isinstance(obj, dict) else {}, chat=ctx.chat, delta=False)
    if event.text:
        live.chunks.append(now)
        live.pieces.append(event.text)
    live.usage = event.usage
    if event.error:
        live.error = f"stream_error: {_scrub(ctx, event.error)}"


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
    text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
    if ctx.secret:
        text = text.replace(ctx.secret, "***")
    return text.replace("\n", " ").strip()[:300]


def _records(lives: list[_Live], t0: float, tokenizer: str | None) -> list[RequestRecord]:
    count = _token_counter(tokenizer)
    records = []
    for live in sorted(lives, key=lambda x: (not x.warmup, x.index if not x.warmup else -x.index)):
        usage = live.usage or {}
        out_server, in_server = usage.get("completion_tokens"), usage.get("prompt_tokens")
        chunks = tuple(c - t0 for c in live.chunks)
        text = "".join(live.pieces)
        records.append(RequestRecord(
            index=live.index if not live.warmup else -1 - live.index, warmup=live.warmup,
            intended_s=live.intended - t0, sent_s=live.sent - t0, first_chunk_s=chunks[0] if chunks else None,
            chunk_s=chunks, end_s=None if live.end is None else live.end - t0, status=live.status, error=live.error,
            output_tokens_server=out_server if isinstance(out_server, int) else None,
            prompt_tokens_server=in_server if isinstance(in_server, int) else None,
            output_tokens_client=count(text) if count is not None and text else None))
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
