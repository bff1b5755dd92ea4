"""`gpuscout probe URL`: how far the endpoint is from here, before any model gets involved.

Each measurement is repeated and summarized with `stats.summarize` (P50/P95, CI, spread):

* `tcp_connect_s`     – a bare TCP connect to host:port (no TLS, no HTTP).
* `http_fresh_s`      – GET on a new connection: connect (+ TLS) + request + whole response.
* `http_keepalive_s`  – GET on one kept-alive connection (warmed first): the network round trip
                        plus the server's own handling of the request.
* `download_bytes_per_s` – GET `download_url`: body bytes / (request written → last byte).
* `upload_bytes_per_s`   – POST `upload_bytes` random (incompressible) bytes to `upload_url`:
                        bytes / (request started → response read).
* `reconnect_s`       – the kept-alive connection is dropped under the client (socket aborted, as a
                        NAT timeout or server restart would); the time from the drop until the next
                        successful response: noticing the dead connection, reconnecting, re-sending.

A minimal HTTP/1.1 client on asyncio streams is used instead of an HTTP library so that each
number is what it says: which connection a request rides on, and when it is dropped, is explicit.
A reply it cannot read (no status line, a header past `MAX_HEADER_BYTES`, a bad length or chunk size)
is a `MalformedReply`: an error of that one measurement, never a traceback. The waits are bounded:
each attempt by `timeout_s`, and the first attempt that times out ends the probe's attempts (a server
that gave no answer in that long is not asked again and again), each measurement left saying why it
stopped; a URL that never answers costs one timeout, not one per attempt. URLs are shown and stored
without credentials (`redact`), and error texts are scrubbed of them.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import Field

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.frozen import Frozen
from gpuscout.loadgen.wire import http_url
from gpuscout.redact import redact_url, scrub, url_secrets
from gpuscout.stats import Summary, summarize

DEFAULT_UPLOAD_BYTES = 4 * 1024 * 1024  # large enough that the transfer outweighs the round trip on a LAN
_READ_BLOCK = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024  # status line and headers of one reply (nginx's default buffers are 8–32 KiB)
MAX_INFORMATIONAL = 8  # 1xx replies skipped before the real one


class Target(Frozen):
    url: str  # as shown and stored: no user-info, secret query values as ***
    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent on the request line
    secrets: tuple[str, ...] = Field(default=(), exclude=True, repr=False)  # scrubbed from error texts


class ProbeMeasure(Frozen):
    name: str
    unit: str  # "s" or "bytes/s"
    samples: tuple[float, ...]
    summary: Summary | None  # None when every attempt failed
    errors: tuple[str, ...] = ()
    note: str = ""


class ProbeResult(Frozen):
    url: str
    host: str
    port: int
    repeats: int
    measures: tuple[ProbeMeasure, ...]


def parse_target(url: str) -> Target:
    """An http(s) URL split into what the probe connects to; anything else is a SpecError."""
    fix = "Pass a full URL such as http://10.0.0.5:8000/v1/models or https://api.example.com/health."
    parts = urlsplit(http_url(url, fix))  # ASCII on the wire: an IDNA host, a percent-encoded path
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(url=redact_url(url.strip()), scheme=parts.scheme, host=parts.hostname or "",
                  port=parts.port or (443 if parts.scheme == "https" else 80), path=path, secrets=url_secrets(url))


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reusable: bool = True

    def close(self) -> None:
        self.writer.transport.abort()


class _Client:
    """One kept-alive connection per host, reopened (once per request) when it turns out dead."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.connections: dict[tuple[str, str, int], _Connection] = {}
        self.reconnects = 0

    async def request(self, target: Target, method: str = "GET", body: bytes = b"") -> tuple[int, int]:
        key = (target.scheme, target.host, target.port)
        conn = self.connections.get(key)
        if conn is not None and conn.reusable and not conn.writer.is_closing():
            try:
                return await self._exchange(conn, target, method, body)
            except (ConnectionError, asyncio.IncompleteReadError):
                conn.close()  # stale: the server or the network dropped it; retry once on a new one
                self.reconnects += 1
        if conn is not None:
            conn.close()
        conn = self.connections[key] = await open_connection(target, self.timeout_s)
        return await self._exchange(conn, target, method, body)

    async def _exchange(self, conn: _Connection, target: Target, method: str, body: bytes) -> tuple[int, int]:
        try:
            return await asyncio.wait_for(exchange(conn, target, method, body), self.timeout_s)
        except BaseException:
            conn.reusable = False
            raise

    def drop(self, target: Target) -> None:
        """Abort the pooled connection's socket without telling the client's bookkeeping."""
        conn = self.connections.get((target.scheme, target.host, target.port))
        if conn is not None:
            conn.writer.transport.abort()

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()


async def open_connection(target: Target, timeout_s: float, *, tls: bool = True) -> _Connection:
    context = ssl.create_default_context() if tls and target.scheme == "https" else None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port, ssl=context,
                                                                        limit=_READ_BLOCK * 4), timeout_s)
    except UnicodeError as exc:  # a host name IDNA cannot encode (an empty or 64+ character label)
        raise ProbeFailure(f"cannot resolve {target.host!r}: {exc}") from None
    return _Connection(reader, writer)


class ProbeFailure(Exception):
    """An HTTP answer that is not a success where one is needed (download, upload), or no usable answer."""


class MalformedReply(ProbeFailure):
    """A reply that is not HTTP/1.1 as the probe can read it; that measurement fails, the probe goes on."""


async def exchange(conn: _Connection, target: Target, method: str, body: bytes = b"") -> tuple[int, int]:
    """Send one request and read the whole response; (status, body bytes). Marks the connection
    not reusable when the server closes it or the body length is only known at EOF."""
    host = target.host if ":" not in target.host else f"[{target.host}]"
    head = (f"{method} {target.path} HTTP/1.1\r\nHost: {host}:{target.port}\r\nUser-Agent: gpuscout-probe\r\n"
            f"Accept: */*\r\n" + (f"Content-Length: {len(body)}\r\nContent-Type: application/octet-stream\r\n"
                                  if body or method == "POST" else "") + "\r\n")
    conn.writer.write(head.encode("ascii") + body)
    await conn.writer.drain()
    for _ in range(MAX_INFORMATIONAL + 1):
        status, headers = await _read_head(conn.reader)
        if not 100 <= status < 200 or status == 101:
            break  # 1xx (100 Continue, 103 Early Hints) come before the real reply: skip them
    else:
        raise MalformedReply(f"more than {MAX_INFORMATIONAL} informational (1xx) replies")
    if headers.get("connection", "").lower() == "close":
        conn.reusable = False
    if method == "HEAD" or status in (204, 304) or status < 200:
        return status, 0
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, await _read_chunked(conn.reader)
    if "content-length" in headers:
        return status, await _read_exactly(conn.reader, _length(headers["content-length"]))
    conn.reusable = False  # the body ends when the server closes the connection
    return status, await _read_to_eof(conn.reader)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """Status and headers of one reply; a MalformedReply when it is not HTTP or too large."""
    status_line = await _line(reader, MAX_HEADER_BYTES)
    if not status_line:
        raise ConnectionError("the server closed the connection before answering")
    parts = status_line.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise MalformedReply(f"not an HTTP status line: {status_line[:60]!r}")
    return int(parts[1]), await _read_headers(reader, MAX_HEADER_BYTES - len(status_line))


async def _line(reader: asyncio.StreamReader, budget: int) -> bytes:
    try:
        line = await reader.readline()
    except ValueError:  # asyncio's LimitOverrunError: one line past the stream's buffer limit
        raise MalformedReply(f"a header line of more than {MAX_HEADER_BYTES} bytes") from None
    if len(line) > budget:
        raise MalformedReply(f"reply headers of more than {MAX_HEADER_BYTES} bytes")
    return line


async def _read_headers(reader: asyncio.StreamReader, budget: int = MAX_HEADER_BYTES) -> dict[str, str]:
    headers: dict[str, str] = {}
    while (line := await _line(reader, budget)) not in (b"\r\n", b"\n"):
        if not line:
            raise ConnectionError("the connection closed inside the response headers")
        budget -= len(line)
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def _length(text: str) -> int:
    if not (text.strip().isdigit() and len(text.strip()) <= 18):
        raise MalformedReply(f"Content-Length {text[:30]!r} is not a byte count")
    return int(text)


async def _read_exactly(reader: asyncio.StreamReader, size: int) -> int:
    left = size
    while left:
        left -= len(await reader.readexactly(min(left, _READ_BLOCK)))
    return size


async def _read_chunked(reader: asyncio.StreamReader) -> int:
    total = 0
    while size := _chunk_size(await _line(reader, MAX_HEADER_BYTES)):
        total += await _read_exactly(reader, size)
        if await reader.readexactly(2) != b"\r\n":
            raise MalformedReply("a chunk is not followed by CRLF")
    await _read_headers(reader)  # trailers, ending with a blank line
    return total


def _chunk_size(line: bytes) -> int:
    text = line.split(b";")[0].strip()
    if not text:
        if not line:
            raise asyncio.IncompleteReadError(b"", None)  # the connection closed mid-body
        raise MalformedReply("an empty chunk-size line")
    try:
        if len(text) > 15:
            raise ValueError
        return int(text, 16)
    except ValueError:
        raise MalformedReply(f"chunk size {text[:20]!r} is not hexadecimal") from None


async def _read_to_eof(reader: asyncio.StreamReader) -> int:
    total = 0
    while block := await reader.read(_READ_BLOCK):
        total += len(block)
    return total


async def probe(url: str, *, repeats: int = 10, download_url: str | None = None, upload_url: str | None = None,
                upload_bytes: int = DEFAULT_UPLOAD_BYTES, timeout_s: float = 10.0) -> ProbeResult:
    """Measure everything `repeats` times against `url` (and the transfer URLs when given)."""
    if repeats < 1:
        raise SpecError(f"--repeats {repeats}.", "Each measurement needs at least one sample.", "Pass --repeats ≥ 1.")
    target = parse_target(url)
    download, upload = (parse_target(u) if u else None for u in (download_url, upload_url))
    secrets = tuple(s for t in (target, download, upload) if t is not None for s in t.secrets)
    gate = _Gate(timeout_s)
    tcp = await _repeat("tcp_connect_s", "s", repeats, lambda: _tcp_connect(target, timeout_s), gate=gate)
    if not tcp.samples:
        raise GpuscoutError(f"Cannot connect to {target.host}:{target.port}.", scrub(tcp.errors[0], secrets),
                            "Check the URL, that the server is running, and that no firewall blocks the port.")
    measures = [tcp, await _repeat("http_fresh_s", "s", repeats, lambda: _fresh_get(target, timeout_s), gate=gate)]
    client = _Client(timeout_s)
    try:
        measures.append(await _keepalive(client, target, repeats, gate))
        if download is not None:
            measures.append(await _repeat("download_bytes_per_s", "bytes/s", repeats,
                                          lambda: _transfer(client, download, "GET", b""), gate=gate))
        if upload is not None:
            payload = os.urandom(upload_bytes)
            measures.append(await _repeat("upload_bytes_per_s", "bytes/s", repeats,
                                          lambda: _transfer(client, upload, "POST", payload),
                                          note=f"{upload_bytes} random bytes a POST", gate=gate))
        measures.append(await _repeat("reconnect_s", "s", repeats, lambda: _reconnect(client, target),
                                      note="socket aborted under a warm kept-alive connection → next success",
                                      gate=gate))
    finally:
        client.close()
    clean = tuple(m.model_copy(update={"errors": tuple(scrub(e, secrets) for e in m.errors)}) for m in measures)
    return ProbeResult(url=target.url, host=target.host, port=target.port, repeats=repeats, measures=clean)


class _Gate:
    """Whether attempts may still be made: closed by the first one that times out (`why` says so)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.why: str | None = None

    async def attempt(self, once: Callable[[], Awaitable[float]]) -> float:
        try:
            return await once()
        except TimeoutError:
            self.why = (f"skipped: an earlier attempt had no answer within {self.timeout_s:g} s, so no further "
                        "attempts were made")
            raise TimeoutError(f"no answer within {self.timeout_s:g} s") from None


async def _repeat(name: str, unit: str, repeats: int, once: Callable[[], Awaitable[float]],
                  note: str = "", *, gate: _Gate) -> ProbeMeasure:
    samples: list[float] = []
    errors: list[str] = []
    for _ in range(repeats):
        if gate.why is not None:
            errors.append(gate.why)
            break
        try:
            samples.append(await gate.attempt(once))
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ProbeFailure) as exc:
            errors.append(_describe(exc))
    return ProbeMeasure(name=name, unit=unit, samples=tuple(samples), summary=summarize(samples) if samples else None,
                        errors=tuple(errors), note=note)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300] if str(exc) else type(exc).__name__


async def _tcp_connect(target: Target, timeout_s: float) -> float:
    start = time.perf_counter()
    conn = await open_connection(target, timeout_s, tls=False)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


async def _fresh_get(target: Target, timeout_s: float) -> float:
    start = time.perf_counter()
    conn = await open_connection(target, timeout_s)
    try:
        await asyncio.wait_for(exchange(conn, target, "GET"), timeout_s)
        return time.perf_counter() - start
    finally:
        conn.close()


async def _keepalive(client: _Client, target: Target, repeats: int, gate: _Gate) -> ProbeMeasure:
    async def once() -> float:
        start = time.perf_counter()
        await client.request(target)
        return time.perf_counter() - start

    try:
        if gate.why is not None:
            raise ProbeFailure(gate.why)
        await gate.attempt(once)  # warm: open the connection that the samples then reuse
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ProbeFailure) as exc:
        error = str(exc) if isinstance(exc, ProbeFailure) and gate.why == str(exc) else _describe(exc)
        return ProbeMeasure(name="http_keepalive_s", unit="s", samples=(), summary=None, errors=(error,))
    before = client.reconnects
    measure = await _repeat("http_keepalive_s", "s", repeats, once, gate=gate)
    if client.reconnects > before:
        return measure.model_copy(update={"note": f"the server closed the kept-alive connection; "
                                                  f"{client.reconnects - before} samples include a reconnect"})
    return measure


async def _transfer(client: _Client, target: Target, method: str, body: bytes) -> float:
    start = time.perf_counter()
    status, received = await client.request(target, method, body)
    elapsed = time.perf_counter() - start
    if not 200 <= status < 300:
        raise ProbeFailure(f"{method} {target.url} answered HTTP {status}")
    moved = len(body) if method == "POST" else received
    if moved == 0:
        raise ProbeFailure(f"{method} {target.url} moved no bytes")
    return moved / elapsed


async def _reconnect(client: _Client, target: Target) -> float:
    await client.request(target)  # a warm connection to drop
    client.drop(target)
    start = time.perf_counter()
    await client.request(target)
    return time.perf_counter() - start
