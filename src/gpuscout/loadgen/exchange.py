"""One request on the wire: its body, its response read into a `Live` as it arrives, every failure a kind.

The response is read by a sink on the connection's callback (`wire.Connection.data_received`), so a
content chunk is stamped in the read that brought it, with no task switch in between:

* `StreamSink`: SSE lines (`sse`), each content chunk stamped; the size caps of docs/measurement.md §2.5.
* `PlainSink`: a whole JSON body (non-streamed chat/completions, and image generations), stamped at
  its last byte.
* either: an HTTP error status is recorded at once; up to `MAX_ERROR_BODY_BYTES` of its body, for up
  to `ERROR_BODY_S`, go into the message, then the connection is dropped.

`attempt` maps what went wrong to the error kinds of docs/measurement.md §2.5 (`timeout`, `connect`,
`dropped_stream`, `malformed_http`, `oversize_line`, `oversize_body`, `http_<status>` …).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from gpuscout.loadgen.counts import ABSURD_PER_MAX_TOKENS
from gpuscout.loadgen.sse import LineSplitter, OversizeLineError, parse_object, parse_read
from gpuscout.loadgen.wire import Connection, Pool, StopReading, WireError
from gpuscout.redact import scrub

ERROR_BODY_S = 5.0  # an HTTP error's body gets this long to arrive; the status is the measurement
SWEEP_S = 0.1  # how often requests in flight are checked against their timeout (`sweep`)
BODY_BASE_BYTES = 4 << 20
BODY_PER_TOKEN_BYTES = 16 << 10
IMAGES_ASKED = 1  # images per request ("n"): an answer holding more is not the one asked for
IMAGE_BODY_BYTES = 64 << 20  # one generated image as base64 JSON: a 2048² PNG is ~8 MiB, ×4/3 in base64
MAX_ERROR_BODY_BYTES = 64 << 10
CANCELLED_AT_DEADLINE = "cancelled_at_deadline"
INTERRUPTED = "interrupted"


def max_body_bytes(max_tokens: int) -> int:
    """The most bytes one response may carry: 4 MiB + 16 KiB per output token asked for."""
    return BODY_BASE_BYTES + BODY_PER_TOKEN_BYTES * max_tokens


@dataclass(slots=True)
class Live:
    """Mutable per-request state; turned into a frozen RequestRecord once, after the run."""

    index: int
    prompt: int
    warmup: bool
    intended: float
    sent: float = 0.0
    connect: float = 0.0  # seconds spent opening a new connection for it (0: a kept-alive one)
    chunks: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    end: float | None = None
    status: int | None = None
    error: str | None = None
    usage: object | None = None
    pinned: bool = False
    images: int | None = None
    session: int | None = None
    turn: int | None = None
    messages: list[dict[str, str]] | None = None  # a conversation turn: the history it is sent with


@dataclass(slots=True)
class Wire:
    """What every request of a level shares: the connections, the headers, how to read answers."""

    pool: Pool
    headers: dict[str, str]
    chat: bool
    stream: bool
    images: bool
    timeout_s: float
    secrets: tuple[str, ...]
    cancel_reason: str = INTERRUPTED
    deadlines: dict[Connection, float] = field(default_factory=dict)  # in flight: when each times out (`sweep`)


async def sweep(wire: Wire) -> None:
    """Stop every request in flight past its deadline, checked every `SWEEP_S` (or a twentieth of the timeout,
    if shorter): one timer for the level instead of an `asyncio.timeout` a request, which cost 3 µs of the
    client's CPU each (create, schedule, cancel) at thousands of requests a second."""
    every = min(SWEEP_S, wire.timeout_s / 20)
    while True:
        await asyncio.sleep(every)
        now = time.perf_counter()
        for conn in [conn for conn, deadline in wire.deadlines.items() if deadline <= now]:
            conn.stop(TimeoutError())


class _Sink:
    """The part every sink shares: the status, and an error body read up to its caps."""

    __slots__ = ("conn", "error_parts", "error_size", "live", "secrets", "timer")

    def __init__(self, live: Live, secrets: tuple[str, ...]) -> None:
        self.live, self.secrets = live, secrets
        self.conn: Connection | None = None
        self.error_parts: list[bytes] | None = None
        self.error_size = 0
        self.timer: asyncio.TimerHandle | None = None

    def head(self, status: int, now: float) -> None:
        self.live.status = status
        if status != 200:
            self.live.error = f"http_{status}: (body not read)"
            self.error_parts = []
            if self.conn is not None:
                self.timer = asyncio.get_running_loop().call_later(ERROR_BODY_S, self.conn.stop, StopReading())

    def error_body(self, data: bytes) -> None:
        assert self.error_parts is not None
        self.error_parts.append(data)
        self.error_size += len(data)
        self.note_error()
        if self.error_size >= MAX_ERROR_BODY_BYTES:
            raise StopReading  # the rest is not read: dropping the connection ends it

    def note_error(self) -> None:
        if self.error_parts is not None:
            text = b"".join(self.error_parts)[:MAX_ERROR_BODY_BYTES]
            self.live.error = f"http_{self.live.status}: {scrub_text(text, self.secrets)[:200]}"

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class StreamSink(_Sink):
    __slots__ = ("cap", "chat", "lines", "malformed", "max_chunks", "max_tokens", "received")

    def __init__(self, live: Live, secrets: tuple[str, ...], chat: bool, max_tokens: int) -> None:
        super().__init__(live, secrets)
        self.chat, self.max_tokens = chat, max_tokens
        self.cap, self.max_chunks = max_body_bytes(max_tokens), ABSURD_PER_MAX_TOKENS * max_tokens
        self.received = self.malformed = 0
        self.lines = LineSplitter()

    def body(self, data: bytes, now: float) -> None:
        if self.error_parts is not None:
            self.error_body(data)
            return
        live = self.live
        self.received += len(data)
        if self.received > self.cap:
            live.error = (f"oversize_body: the stream passed {self.cap:,} bytes for max_tokens {self.max_tokens:,}; "
                          "the rest was not read")
            raise StopReading
        try:
            read = parse_read(self.lines, data, chat=self.chat)  # `[DONE]` carries nothing: the framing tells the end
        except OversizeLineError as exc:
            live.error = f"oversize_line: {exc}; the rest was not read"
            raise StopReading from None
        self.malformed += read.malformed
        chunks = live.chunks
        if read.texts:
            chunks.extend([now] * len(read.texts))
            live.pieces.extend(read.texts)
        if read.usage is not None:
            live.usage = read.usage
        for error in read.errors:
            live.error = f"stream_error: {scrub_text(error, self.secrets)}"
        if len(chunks) > self.max_chunks:
            live.error = (f"oversize_body: more than {self.max_chunks:,} content chunks for max_tokens "
                          f"{self.max_tokens:,}; the rest was not read")
            raise StopReading

    def finish(self) -> None:
        if self.malformed and self.live.error is None:
            self.live.error = f"malformed_sse: {self.malformed} data line(s) were not JSON objects"


class PlainSink(_Sink):
    """A whole JSON body; `images` reads an image generation's `data` list instead of text."""

    __slots__ = ("cap", "chat", "images", "last", "max_tokens", "parts", "size")

    def __init__(self, live: Live, secrets: tuple[str, ...], chat: bool, max_tokens: int, images: bool) -> None:
        super().__init__(live, secrets)
        self.chat, self.max_tokens, self.images = chat, max_tokens, images
        self.cap = IMAGE_BODY_BYTES if images else max_body_bytes(max_tokens)
        self.parts: list[bytes] = []
        self.size = 0
        self.last = 0.0

    def body(self, data: bytes, now: float) -> None:
        if self.error_parts is not None:
            self.error_body(data)
            return
        self.size += len(data)
        if self.size > self.cap:
            what = "image response" if self.images else f"body for max_tokens {self.max_tokens:,}"
            self.live.error = f"oversize_body: the {what} passed {self.cap:,} bytes; the rest was not read"
            raise StopReading
        self.parts.append(data)
        self.last = now

    def finish(self) -> None:
        live = self.live
        if live.error is not None or live.status != 200:
            return
        try:
            obj = json.loads(b"".join(self.parts))
        except (ValueError, RecursionError):
            live.error = "malformed_response: the body is not JSON"
            return
        if self.images:
            self._images(obj)
            return
        event = parse_object(obj, chat=self.chat, delta=False)
        if event.text:
            live.chunks.append(self.last or time.perf_counter())
            live.pieces.append(event.text)
        live.usage = event.usage
        if event.error:
            live.error = f"stream_error: {scrub_text(event.error, self.secrets)}"

    def _images(self, obj: Any) -> None:
        """OpenAI's images response: {"data": [{"b64_json": …} or {"url": …}, …]}."""
        data = obj.get("data") if isinstance(obj, dict) else None
        made = [d for d in data if isinstance(d, dict) and (d.get("b64_json") or d.get("url"))] \
            if isinstance(data, list) else []
        if isinstance(obj, dict) and obj.get("error"):
            self.live.error = f"stream_error: {scrub_text(str(obj['error'])[:200], self.secrets)}"
        elif not made:
            self.live.error = "empty: the response holds no image (no data[].b64_json or url)"
        elif len(made) > IMAGES_ASKED:  # counted as asked, a server could report any throughput it liked
            self.live.error = (f"malformed_response: the response holds {len(made):,} images where n={IMAGES_ASKED} "
                               "was asked; its count cannot be trusted")
        else:
            self.live.images = len(made)
            self.live.chunks.append(self.last or time.perf_counter())
            self.live.pieces.append("")


def scrub_text(what: object, secrets: tuple[str, ...]) -> str:
    """Error text without secrets (API key, URL credentials) or newlines, at most 300 characters."""
    text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
    return scrub(text, secrets).replace("\n", " ").strip()[:300]


@dataclass(slots=True)
class Started:
    """A request already written on a kept-alive connection (`begin`), its answer still to come."""

    conn: Connection
    sink: StreamSink | PlainSink
    done: asyncio.Future[None]


def _sink(wire: Wire, live: Live, max_tokens: int) -> StreamSink | PlainSink:
    return (StreamSink(live, wire.secrets, wire.chat, max_tokens) if wire.stream
            else PlainSink(live, wire.secrets, wire.chat, max_tokens, wire.images))


def begin(wire: Wire, live: Live, request: bytes, max_tokens: int) -> Started | None:
    """Write `request` at once on an idle kept-alive connection, or None when there is none: the open loop
    sends at its deadline from the scheduler itself, not from a task that starts a loop iteration later."""
    conn = wire.pool.take_idle()
    if conn is None:
        return None
    sink = _sink(wire, live, max_tokens)
    sink.conn = conn
    live.sent, done = conn.exchange(request, sink)
    return Started(conn, sink, done)


async def attempt(wire: Wire, live: Live, request: bytes, max_tokens: int, started: Started | None = None) -> None:
    """Send `request` on a pooled connection and read its answer into `live`; errors become its `error`.
    `started`: the request was already written (`begin`); only its answer is awaited."""
    sink = started.sink if started is not None else _sink(wire, live, max_tokens)
    conn: Connection | None = started.conn if started is not None else None
    start = time.perf_counter()
    if started is None:
        live.sent = start  # replaced by the write's stamp once the bytes go out
    try:
        if started is None:
            conn = await _connection(wire.pool, live)  # opening one is bounded by the pool (≤ the timeout)
            sink.conn = conn
            live.sent, done = conn.exchange(request, sink)
        else:
            done = started.done
        assert conn is not None
        wire.deadlines[conn] = start + wire.timeout_s
        await done
        sink.finish()
    except TimeoutError:
        if not (live.error or "").startswith("http_"):  # an error status is the answer, however slow its body
            live.error = f"timeout: no complete answer within {wire.timeout_s:g} s"
    except StopReading:
        sink.note_error()  # a cap or an error body: the sink said what
    except WireError as exc:
        if not (live.error or "").startswith("http_"):
            live.error = f"{exc.kind}: {scrub_text(exc, wire.secrets)}"
    except asyncio.CancelledError:
        live.error = f"{wire.cancel_reason}: still running when the level was stopped"
        live.end = time.perf_counter()
        raise
    finally:
        sink.close()
        if conn is not None:
            wire.deadlines.pop(conn, None)
            wire.pool.release(conn)  # kept when its answer ended cleanly, else dropped
    live.end = time.perf_counter()


async def _connection(pool: Pool, live: Live) -> Connection:
    """A kept-alive connection, or a new one; the time opening it is the request's `connect`."""
    kept = pool.take_idle()
    if kept is not None:
        return kept
    start = time.perf_counter()
    conn = await pool.connect()
    live.connect = time.perf_counter() - start
    return conn
