"""The load generator: one asyncio loop, raw HTTP/1.1 keep-alive connections (`wire`), absolute schedules.

Per request it records the intended send time (schedule, or the moment a closed-loop worker became
free), the actual send time (stamped right before the request's bytes are written to the socket),
every content-chunk arrival and the end, so latency can be computed from the intended time too
(coordinated omission, docs/measurement.md §1). Errors are data, never fatal: HTTP errors, timeouts,
dropped streams, malformed SSE lines and refused connections become records whose `error` starts with a
kind (`http_500: …`, `timeout: …`, `dropped_stream: …`, `malformed_sse: …`, `connect: …`,
`malformed_http: …`, `oversize_line: …`, `oversize_body: …`, `cancelled_at_deadline: …`;
docs/measurement.md §2.5). Times in records are seconds relative to t0, the start of the measured phase
(warm-up records are negative).

Whatever the server sends, time and memory stay bounded (docs/measurement.md §2.5): each request has
a timeout (by default `default_timeout_s` of its output length) that also ends a read that stalls; an
SSE line is capped at `sse.MAX_LINE_BYTES`, a response at `max_body_bytes`, an error body is read only
up to `MAX_ERROR_BODY_BYTES`; a level with a duration cancels what is still in flight at its end.

While a level runs, `monitor` samples the event loop's lag (the client's own saturation), stops an
open-loop level whose server is over-saturated (`steady.oversaturated`), and scrapes the server's
/metrics when asked (`server_metrics`).

Secrets: the API key is read from the environment and sent as a Bearer header; a URL's user-info is
not sent; secret query values are sent (the server may need them). None of them is ever stored or
printed: every URL kept is redacted and every error text scrubbed (`redact`).

Ctrl-C, SIGTERM or SIGHUP (as KeyboardInterrupt, `interrupts.stop_on_signals`) during `run_load_sync`
raise `LoadInterrupted`, which carries the requests that finished before it.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import ssl
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from gpuscout.errors import SpecError
from gpuscout.loadgen import monitor
from gpuscout.loadgen.context import Progress, RunContext, WorkerPart
from gpuscout.loadgen.conversation import run_sessions
from gpuscout.loadgen.exchange import (
    CANCELLED_AT_DEADLINE,
    INTERRUPTED,
    MAX_ERROR_BODY_BYTES,
    Live,
    Started,
    Wire,
    attempt,
    begin,
    max_body_bytes,
    sweep,
)
from gpuscout.loadgen.record import (
    Endpoint,
    LoadInterrupted,
    LoadRun,
    PromptLike,
    RequestRecord,
    build_records,
    token_counter,
)
from gpuscout.loadgen.request import Bodies
from gpuscout.loadgen.schedule import LONG_WAIT_S, LoadShape, arrivals_of, planned_requests, send_offsets
from gpuscout.loadgen.wire import Pool, Target, http_url
from gpuscout.redact import redact_url, url_secrets

__all__ = ["CANCELLED_AT_DEADLINE", "MAX_ERROR_BODY_BYTES", "Endpoint", "LoadInterrupted", "LoadRun",
           "RequestRecord", "default_timeout_s", "endpoint_url", "max_body_bytes", "run_load", "run_load_sync"]

PATHS = {"chat": "/chat/completions", "completions": "/completions", "images": "/images/generations"}
SPIN_S = 0.0015  # sleep to this close to a deadline, then yield-spin: the loop's timer rounds to 1 ms
STOPPED_OVERSATURATED = "stopped_oversaturated"

# Time (docs/measurement.md §2.5): the default per-request timeout grows with the output asked for,
# allowing 2 tokens/s per request, far below any GPU server's decode rate even when it is saturated.
DEFAULT_TIMEOUT_BASE_S = 30.0
DEFAULT_TIMEOUT_PER_TOKEN_S = 0.5
MAX_TIMEOUT_S = 86_400.0
CONNECT_TIMEOUT_S = 10.0


def default_timeout_s(output_tokens: int) -> float:
    """Per-request timeout when none is given: 30 s + 0.5 s per output token (docs/measurement.md §2.5)."""
    return DEFAULT_TIMEOUT_BASE_S + DEFAULT_TIMEOUT_PER_TOKEN_S * output_tokens


class WorkloadLike(Protocol):
    @property
    def prompts(self) -> Sequence[PromptLike]: ...
    @property
    def tokenizer(self) -> str | None: ...


def endpoint_url(url: str, endpoint: Endpoint) -> str:
    """Base URL, …/v1, or a full …/chat/completions URL → the request URL as shown and stored: no
    user-info, secret query values as *** (`redact`). `request_url` is what is sent."""
    return redact_url(request_url(url, endpoint))


def request_url(url: str, endpoint: Endpoint) -> str:
    """The URL requests go to: scheme, host, port, path to the endpoint, query kept; user-info dropped
    (`wire.http_url`: ASCII on the wire)."""
    parts = urlsplit(http_url(url, "Pass the server's base URL, e.g. http://127.0.0.1:8000 or https://host/v1."))
    path = parts.path.rstrip("/")
    if not path.endswith(tuple(PATHS.values())):
        path = (path if path.endswith("/v1") else path + "/v1") + PATHS[endpoint]
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass(slots=True)
class _RunInfo:
    """What a LoadRun needs besides the requests; kept where an interrupt can still reach it."""

    shape: LoadShape
    started_at: datetime
    model: str
    endpoint: Endpoint
    stream: bool
    tokenizer: str | None
    ctx: RunContext | None = None


async def run_load(url: str, model: str, workload: WorkloadLike, shape: LoadShape, *, endpoint: Endpoint = "chat",
                   stream: bool = True, api_key_env: str | None = "OPENAI_API_KEY", timeout_s: float | None = None,
                   extra_body: dict[str, Any] | None = None, progress: Progress | None = None,
                   metrics_url: str | None = None, _info: list[_RunInfo] | None = None,
                   _part: WorkerPart | None = None) -> LoadRun:
    """Run one load shape. `timeout_s` None: `default_timeout_s` of the longest output asked for.
    `metrics_url`: the server's Prometheus /metrics, scraped before, during and after the level."""
    target = request_url(url, endpoint)
    if not workload.prompts:
        raise SpecError("The workload has no prompts.", "Every request sends one prompt.",
                        "Ask for at least one prompt (--requests, or a dataset with lines).")
    timeout = _check_timeout(timeout_s, max(p.output_tokens for p in workload.prompts))
    stream = stream and endpoint != "images"  # image generations answer with one JSON body
    key = os.environ.get(api_key_env) if api_key_env else None
    headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json",
               "accept-encoding": "identity"}  # size caps count the bytes the server sends, so no compression
    if key:
        headers["authorization"] = f"Bearer {key}"
    info = _RunInfo(shape, datetime.now(UTC), model, endpoint, stream, workload.tokenizer)
    if _info is not None:
        _info.append(info)
    secrets = tuple(s for s in ((key or ""), *url_secrets(url), *url_secrets(metrics_url or "")) if s)
    pool = Pool(Target.parse(target), min(timeout, CONNECT_TIMEOUT_S),
                ssl.create_default_context() if target.startswith("https") else None)
    wire = Wire(pool, headers, endpoint == "chat", stream, endpoint == "images", timeout, secrets)
    bodies = Bodies(pool.target, headers, model, endpoint, stream, workload.prompts, dict(extra_body or {}))
    ctx = RunContext(wire, redact_url(target), bodies, workload.prompts, progress=progress)
    info.ctx = ctx
    if "@" in urlsplit(url.strip()).netloc:
        ctx.notes.append("the URL's user:password@ was not sent; the API key goes as a Bearer token (--api-key-env)")
    gc.collect()
    gc.freeze()  # fewer GC pauses during the run (vLLM's freeze_gc_heap, docs/measurement.md §5)
    sweeper = asyncio.create_task(sweep(wire))
    try:
        await _phases(ctx, shape, workload, metrics_url, _part)
    finally:
        sweeper.cancel()
        gc.unfreeze()
        pool.close()
    run = _build_run(info, ctx, ctx.lives, time.process_time() - ctx.cpu0)
    measured = [r for r in run.records if not r.warmup]
    if measured and all(r.error and r.error.startswith("connect") for r in measured):
        run = run.model_copy(update={"notes": (*run.notes, f"every request failed to connect to {ctx.shown_url}: "
                                                           "is the server running and reachable?")})
    return run


def run_load_sync(url: str, model: str, workload: WorkloadLike, shape: LoadShape, **kwargs: Any) -> LoadRun:
    """`run_load` in its own event loop; an interrupt raises `LoadInterrupted` with what finished."""
    info: list[_RunInfo] = []
    out: list[LoadRun] = []
    try:
        asyncio.run(_into(out, run_load(url, model, workload, shape, _info=info, **kwargs)))
        return out[0]
    except KeyboardInterrupt as stop:  # a run that had just ended is kept whole
        run = out[0] if out else _finished_run(info[0]) if info else None
        raise LoadInterrupted(run, getattr(stop, "signum", None)) from stop


async def _into(out: list[LoadRun], run: Coroutine[Any, Any, LoadRun]) -> None:
    """The run's result kept outside the main task: on exit asyncio.run (3.11) compares the SIGINT handler,
    a partial holding that task, with signal.getsignal, which formats its repr — and with it the whole
    LoadRun, every record — in a ValueError message it then discards: 0.5 s for 3,000 requests."""
    out.append(await run)


def _check_timeout(timeout_s: float | None, output_tokens: int) -> float:
    if timeout_s is None:
        return default_timeout_s(output_tokens)
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise SpecError(f"The request timeout {timeout_s!r} s is not a number of seconds in (0, {MAX_TIMEOUT_S:g}].",
                        "Each request is bounded by it, and so is every read.",
                        "Pass --timeout as a positive number of seconds (it defaults to 30 s + 0.5 s per output "
                        "token).")
    return float(timeout_s)


def _finished_run(info: _RunInfo) -> LoadRun | None:
    """The measured requests that finished before an interrupt, as a run; None when none did."""
    ctx = info.ctx
    if ctx is None:
        return None
    finished = [live for live in ctx.lives if not live.warmup and live.end is not None
                and not (live.error or "").startswith(INTERRUPTED)]
    if not finished:
        return None
    dropped = sum(1 for live in ctx.lives if not live.warmup) - len(finished)
    run = _build_run(info, ctx, finished, time.process_time() - ctx.cpu0)
    note = f"interrupted: {len(finished)} request(s) finished; {dropped} in flight were dropped"
    return run.model_copy(update={"notes": (*run.notes, note)})


def _build_run(info: _RunInfo, ctx: RunContext, lives: list[Live], cpu_s: float) -> LoadRun:
    t0 = ctx.t0 if ctx.t0 is not None else time.perf_counter()
    records = build_records(lives, t0, token_counter(info.tokenizer), ctx.prompts)
    measured = [r for r in records if not r.warmup]
    wall = max((r.end_s if r.end_s is not None else r.sent_s for r in measured), default=0.0)
    watch = ctx.watch
    return LoadRun(records=tuple(records), shape=info.shape, started_at=info.started_at, wall_s=wall,
                   client_cpu_s=cpu_s, url=ctx.shown_url, model=info.model, endpoint=info.endpoint, stream=info.stream,
                   notes=tuple(ctx.notes + (watch.notes if watch else [])), t0_perf_counter_s=ctx.t0,
                   timeout_s=ctx.wire.timeout_s, loop_lag_s=tuple(watch.loop_lag_s) if watch else (),
                   loop_lag_busy=tuple(watch.loop_busy) if watch else (),
                   loop_cpu_s=(_ended(ctx.thread1, time.thread_time) - ctx.thread0,) if ctx.t0 is not None else (),
                   loop_wait_s=_waited(ctx),
                   server=tuple(watch.server_samples(t0)) if watch else (),
                   server_engine=watch.engine if watch else None, stopped=watch.stopped if watch else None)


def run_queue_wait_s() -> float | None:
    """Seconds this thread has waited for a CPU while ready to run (/proc/thread-self/schedstat), or None."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _ended(stamp: float | None, clock: Callable[[], float]) -> float:
    """A clock's reading when the measured phase ended; now, for a run interrupted inside it."""
    return clock() if stamp is None else stamp


def _waited(ctx: RunContext) -> tuple[float, ...]:
    now = ctx.wait1 if ctx.wait1 is not None else run_queue_wait_s()
    if ctx.t0 is None or ctx.wait0 is None or now is None:
        return ()
    return (max(0.0, now - ctx.wait0),)


async def _phases(ctx: RunContext, shape: LoadShape, workload: WorkloadLike, metrics_url: str | None,
                  part: WorkerPart | None) -> None:
    """Warm-up (closed loop, excluded from statistics), then the measured phase from t0."""
    n_prompts = len(ctx.prompts)
    first = part.warmup_first if part is not None else 0
    if shape.warmup_requests:
        warm = (Live(-1 - i, (first + i) % n_prompts, True, 0.0) for i in range(shape.warmup_requests))
        await _closed_loop(ctx, warm, min(shape.concurrency or 8, shape.warmup_requests), None)
    planned = planned_requests(shape)
    ctx.total = planned if shape.requests is not None or shape.rate_rps is not None else 0
    open_loop = shape.kind not in ("concurrency", "sessions")
    ctx.watch = monitor.Watch(metrics_url, ctx.wire.headers, ctx.wire.secrets, watch_saturation=open_loop,
                              lives=ctx.lives, endpoint=ctx.wire.pool.target)
    await ctx.watch.before()
    if part is not None:
        ready = asyncio.get_running_loop().run_in_executor(None, part.ready)
        t0 = await ready
        delay = t0 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    ctx.cpu0, ctx.thread0, ctx.wait0 = time.process_time(), time.thread_time(), run_queue_wait_s()
    ctx.t0 = time.perf_counter() if part is None else t0
    ctx.watch.start(ctx.t0)
    try:
        await _measured(ctx, shape, workload, planned, part)
        # The loop thread's CPU over the measured phase only: turning lives into records afterwards is not
        # load the client generated, and the gate reads CPU / wall as the client's saturation.
        ctx.thread1, ctx.wait1 = time.thread_time(), run_queue_wait_s()
    finally:
        await ctx.watch.stop()


async def _measured(ctx: RunContext, shape: LoadShape, workload: WorkloadLike, planned: int,
                    part: WorkerPart | None) -> None:
    assert ctx.t0 is not None
    t0, n_prompts = ctx.t0, len(ctx.prompts)
    offset = part.warmup_total if part is not None else shape.warmup_requests
    if shape.kind == "trace":
        offset = 0  # request i replays trace line i
    deadline = shape.duration_s and t0 + shape.duration_s
    if shape.kind == "sessions":
        assert shape.concurrency is not None
        await run_sessions(ctx, workload, shape, planned, deadline, _send, _finish, part)
        return
    offsets = send_offsets(shape, planned, arrivals_of(shape, ctx.prompts))
    if offsets is None:
        assert shape.concurrency is not None
        indices: Iterator[int] = iter(range(planned))
        if part is not None and part.next_index is not None:
            indices = _shared(part.next_index, planned)
        measured = (Live(i, (offset + i) % n_prompts, False, 0.0) for i in indices)
        await _closed_loop(ctx, measured, shape.concurrency, deadline)
    else:
        chosen = [(i, off) for i, off in enumerate(offsets) if part is None or i % part.of == part.share]
        await _open_loop(ctx, chosen, t0, shape.duration_s, offset)


def _shared(next_index: Callable[[], int], planned: int) -> Iterator[int]:
    while (i := next_index()) < planned:
        yield i


def stopping(ctx: RunContext) -> bool:
    return ctx.watch is not None and ctx.watch.stopped is not None


async def _closed_loop(ctx: RunContext, todo: Iterator[Live], width: int, deadline: float | None) -> None:
    """`width` workers; each sends its next request the moment its previous one ends."""
    lives = ctx.lives

    async def worker() -> None:
        for live in todo:  # a shared iterator: workers take the next request in turn
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                return
            live.intended = now
            lives.append(live)
            await _send(ctx, live)

    await _finish(ctx, [asyncio.create_task(worker()) for _ in range(width)], deadline)


async def _open_loop(ctx: RunContext, offsets: list[tuple[int, float]], t0: float, duration_s: float | None,
                     offset: int) -> None:
    """Send request i at t0 + its offset, absolutely: a late send never moves the next one. A wait longer
    than `LONG_WAIT_S` is shown on the progress display, with the time it ends."""
    tasks = []
    n_prompts = len(ctx.prompts)
    try:
        for i, off in offsets:
            if (duration_s is not None and off >= duration_s) or stopping(ctx):
                break
            deadline = t0 + off
            delay = deadline - time.perf_counter()
            shown = ctx.progress if delay > LONG_WAIT_S else None
            if shown is not None:  # said, never silent: idle until this send
                shown(ctx.done, ctx.total, waiting_until=time.time() + delay)
            if delay > SPIN_S:
                await asyncio.sleep(delay - SPIN_S + 0.0005)
                if stopping(ctx):
                    break
            if shown is not None:
                shown(ctx.done, ctx.total)
            while time.perf_counter() < deadline:
                await asyncio.sleep(0)
            live = Live(i, (offset + i) % n_prompts, False, deadline)
            ctx.lives.append(live)
            tasks.append(asyncio.create_task(_send(ctx, live, _begin(ctx, live))))
    except asyncio.CancelledError:
        await _cancel(tasks)  # Ctrl-C while scheduling: the sent requests end as interrupted, then stop
        raise
    await _finish(ctx, tasks, None if duration_s is None else t0 + duration_s)


async def _finish(ctx: RunContext, tasks: list[asyncio.Task[None]], deadline: float | None) -> None:
    """Wait for `tasks`; at `deadline`, or when the watch stops the level, cancel those still running."""
    if not tasks:
        return
    try:
        pending = set(tasks)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            if ctx.watch is not None and ctx.watch.watching:
                timeout = monitor.CHECK_S if timeout is None else min(timeout, monitor.CHECK_S)
            _, pending = await asyncio.wait(pending, timeout=timeout)
            if pending and (stopping(ctx) or (deadline is not None and time.perf_counter() >= deadline)):
                break
    except asyncio.CancelledError:
        await _cancel(tasks)  # Ctrl-C: requests still running end as interrupted before the clients close
        raise
    if pending:
        reason = STOPPED_OVERSATURATED if stopping(ctx) else CANCELLED_AT_DEADLINE
        ctx.wire.cancel_reason = reason
        await _cancel(list(pending))
        now = time.perf_counter()
        for live in ctx.lives:  # a task cancelled before its first step never reached attempt's handler
            if live.end is None and not live.warmup:
                live.error, live.end = f"{reason}: never sent", now
                live.sent = live.sent or live.intended
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a bug in the client: keep its traceback


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _begin(ctx: RunContext, live: Live) -> Started | None:
    """Write the request now if a kept-alive connection is idle (`exchange.begin`)."""
    bodies = ctx.bodies
    live.pinned = bodies.extras_on and bodies.pins
    return begin(ctx.wire, live, bodies.request(live, live.pinned), ctx.prompts[live.prompt].output_tokens)


async def _send(ctx: RunContext, live: Live, started: Started | None = None) -> None:
    """One request; a 400 or 422 while the pinning extras are on turns them off and retries once."""
    bodies = ctx.bodies
    max_tokens = ctx.prompts[live.prompt].output_tokens
    if started is None:
        live.pinned = bodies.extras_on and bodies.pins
    await attempt(ctx.wire, live, bodies.request(live, live.pinned), max_tokens, started)
    # 422: FastAPI's answer to fields its request model does not declare (`transformers serve` refuses
    # ignore_eos and min_tokens so); also for requests already in flight when the first refusal came
    if live.status in (400, 422) and live.pinned:
        if bodies.extras_on:
            bodies.extras_on = False
            ctx.notes.append(f"the server answered {live.status} to {', '.join(bodies.extra_names)}; "
                             "retried without them, so output lengths are not pinned")
        live.chunks.clear()
        live.pieces.clear()
        live.error = live.usage = live.status = None
        live.pinned = False
        await attempt(ctx.wire, live, bodies.request(live, False), max_tokens)
    if not live.warmup:
        ctx.done += 1
        if ctx.progress is not None:
            ctx.progress(ctx.done, ctx.total)
