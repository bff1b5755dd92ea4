"""HTTP/1.1 on asyncio protocols: the load client's wire, with nothing between the clock and the socket.

An HTTP library costs the load client most of its time: with httpx (0.28) the send path of one
streamed request took 1.1–1.4 ms at concurrency 1 and 35–53 ms at 64 against 0.17 ms for a
minimal asyncio client on the same machine, and that time landed inside TTFT (measured against a
server that records when it had each request, docs/measurement.md §5.2). This module is that minimal
client, made complete enough for any OpenAI-compatible server: keep-alive connections,
Content-Length, chunked and close-delimited bodies, 1xx responses skipped, TLS through asyncio's
`ssl`.

* The send is stamped right before the request's bytes are handed to the socket (one write of
  head + body, built once per body), so building, queueing and connecting stay outside TTFT; they
  show as send lag (intended → actual send), which the validity gate reads.
* The response is read in `data_received`, on the loop's callback, with no task switch per read:
  each read is stamped once, un-framed, and handed to the request's `Sink` as one piece.
* Anything that is not HTTP raises `WireError` with an error kind: `malformed_http` (no status
  line, a head past `MAX_HEAD_BYTES`, a bad length or chunk size), `dropped_stream` (the
  connection ended before the message did), `connect`. The sink stops a response early by
  raising `StopReading` (a size cap, enough of an error body); the connection is then dropped.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, urlsplit, urlunsplit

from gpuscout.errors import SpecError
from gpuscout.redact import redact_url

MAX_HEAD_BYTES = 64 << 10  # status line and headers of one response (h11's default limit too)
MAX_CHUNK_LINE_BYTES = 4096  # a chunk-size line with its extensions
MAX_INFORMATIONAL = 8  # 1xx responses skipped before the real one
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_STATUS = re.compile(rb"HTTP/1\.([01]) (\d{3})(?: [^\r\n]*)?")
_NO_BODY = (204, 304)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_LOWER_HEX = b"%x".__mod__  # a length as a server writes its chunk size

# Parser states
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _CLOSE, _DONE = range(8)


def http_url(url: str, fix: str) -> str:
    """`url` as it goes on the wire: http(s), user-info dropped, a non-ASCII host in its IDNA form (punycode,
    RFC 5891) and non-ASCII path or query characters percent-encoded as UTF-8 (RFC 3986 §2.5), so the request
    line and Host header are ASCII; anything else is a SpecError that shows the URL without its secrets."""
    shown = repr(redact_url(url))
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise SpecError(f"{shown} is not a valid URL.",
                        "A port must be a number from 0 to 65535, and a host in [brackets] an IPv6 address.",
                        fix) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{shown} is not an http or https URL.", "gpuscout talks to servers over HTTP.", fix)
    if any(c in url for c in "\r\n\t ") or any(not c.isprintable() for c in url):
        raise SpecError(f"{shown} has a space or a control character in it.",
                        "It would end up in the request line and headers.", fix)
    host = parts.hostname
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise SpecError(f"{shown} has a host name that is not a valid internationalized domain name.",
                            "A non-ASCII host is sent in its IDNA (punycode) form, and this one has none.",
                            fix) from None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    # '%' stays: an escape already in the URL is sent as written; only characters outside ASCII are encoded
    path, query = (quote(part, safe="".join(map(chr, range(0x21, 0x7f)))) for part in (parts.path, parts.query))
    return urlunsplit((parts.scheme, netloc, path, query, ""))


class WireError(Exception):
    """Not HTTP, or not all of it: `kind` is the load client's error kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class StopReading(Exception):
    """Raised by a sink to stop reading this response (the connection is dropped)."""


class Sink(Protocol):
    def head(self, status: int, now: float) -> None: ...
    def body(self, data: bytes, now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: host, port, TLS, and the request target (path and query)."""

    host: str
    port: int
    tls: bool
    path: str
    authority: str  # the Host header

    @staticmethod
    def parse(url: str) -> Target:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if tls else 80)
        shown = f"[{host}]" if ":" in host else host
        default = port == (443 if tls else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(host, port, tls, path, shown if default else f"{shown}:{port}")

    def request(self, method: str, headers: dict[str, str], body: bytes = b"") -> bytes:
        """The request's bytes: head and body in one piece, written with one call."""
        lines = [f"{method} {self.path} HTTP/1.1", f"host: {self.authority}",
                 *(f"{k}: {v}" for k, v in headers.items()), f"content-length: {len(body)}", "", ""]
        return "\r\n".join(lines).encode("latin-1") + body


class Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time (`exchange`)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None
        self._buf = bytearray()
        self._state = _DONE
        self._left = 0
        self._keep = True
        self._seen = False  # any byte of this response
        self._skipped = 0

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._sink is None:  # bytes nobody asked for: the connection cannot carry another request
            self.reusable = False
            return
        now = time.perf_counter()
        self._seen = True
        try:
            self._feed(data, now)
        except (WireError, StopReading) as exc:
            self._fail(exc)
        except Exception as exc:  # a sink's bug: the request fails with it, the caller re-raises
            self._fail(exc)

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self._ended()

    # --- the client side
    def exchange(self, request: bytes, sink: Sink) -> tuple[float, asyncio.Future[None]]:
        """Write `request`; the sink gets the response. Returns (send stamp, future done at its end)."""
        assert self.transport is not None and self._sink is None
        loop = asyncio.get_running_loop()
        self._sink, self._done = sink, loop.create_future()
        self._buf.clear()
        self._state, self._keep, self._seen, self._skipped, self.reusable = _HEAD, True, False, 0, False
        # Stamped right before the bytes go to the socket, not before building (docs/measurement.md §2.2).
        sent = time.perf_counter()
        self.transport.write(request)
        return sent, self._done

    def stop(self, exc: BaseException) -> None:
        """End the exchange in flight with `exc` (a sink's own time limit) and drop the connection."""
        self._fail(exc)

    def abort(self) -> None:
        """Drop the connection (a response cut short, a timeout, a cancel)."""
        self.reusable = False
        self._sink = None
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    # --- parsing
    def _feed(self, data: bytes, now: float) -> None:
        pieces: list[bytes] = []
        view = data
        while view and self._sink is not None:
            if self._state == _HEAD:
                view = self._head(view, now)
            elif self._state == _LENGTH:
                take = view[: self._left]
                pieces.append(take)
                self._left -= len(take)
                view = view[len(take):]
                if not self._left:
                    self._flush(pieces, now)
                    self._complete(view)
                    return
            elif self._state == _CLOSE:
                pieces.append(view)
                view = b""
            else:
                view = self._chunked(view, pieces, now)
        self._flush(pieces, now)

    def _flush(self, pieces: list[bytes], now: float) -> None:
        if pieces and self._sink is not None:
            joined = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            if joined:
                self._sink.body(joined, now)

    def _head(self, data: bytes, now: float) -> bytes:
        if self._buf:  # a head trickling in is searched once, not once per read
            start = max(0, len(self._buf) - 3)
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:  # the common case, a whole head in one read: searched where it lies, not copied
            start, buf = 0, data
        found = _HEAD_END.search(buf, start)
        if found is None:
            if buf is data:
                self._buf += data
            if len(self._buf) > MAX_HEAD_BYTES:
                raise WireError("malformed_http", f"the status line and headers passed {MAX_HEAD_BYTES:,} bytes")
            return b""
        if found.start() > MAX_HEAD_BYTES:
            raise WireError("malformed_http", f"the status line and headers passed {MAX_HEAD_BYTES:,} bytes")
        head, rest = bytes(buf[: found.start()]), bytes(buf[found.end():])
        self._buf.clear()
        status, minor, headers = _parse_head(head)
        if 100 <= status < 200:
            self._skipped += 1
            if status == 101 or self._skipped > MAX_INFORMATIONAL:
                raise WireError("malformed_http", f"informational response {status} where an answer was expected")
            return rest
        self._framing(status, minor, headers)
        assert self._sink is not None
        self._sink.head(status, now)
        if self._state == _DONE:
            self._complete(rest)
            return b""
        return rest

    def _framing(self, status: int, minor: int, headers: Mapping[str, str]) -> None:
        connection = headers.get("connection", "").lower()
        self._keep = "close" not in connection and (minor == 1 or "keep-alive" in connection)
        encoding = headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if status in _NO_BODY:
            self._state = _DONE
        elif encoding:
            if not encoding.rstrip().endswith("chunked"):
                self._state, self._keep = _CLOSE, False
            else:
                self._state = _CHUNK_SIZE
        elif length is not None:
            self._left = _content_length(length)
            self._state = _LENGTH if self._left else _DONE
        else:
            self._state, self._keep = _CLOSE, False

    def _chunked(self, view: bytes, pieces: list[bytes], now: float) -> bytes:
        if self._state == _CHUNK_SIZE and not self._buf:
            view = self._whole_chunks(view, pieces)
            if not view or self._state != _CHUNK_SIZE:
                return view
        if self._state == _CHUNK_DATA:
            take = view[: self._left]
            pieces.append(take)
            self._left -= len(take)
            if not self._left:
                self._state = _CHUNK_END
            return view[len(take):]
        line, rest = self._line(view)
        if line is None:
            return b""
        if self._state == _CHUNK_END:
            if line:
                raise WireError("malformed_http", "a chunk was longer than its size said")
            self._state = _CHUNK_SIZE
        elif self._state == _CHUNK_SIZE:
            size = _chunk_size(line)
            self._state, self._left = (_CHUNK_DATA, size) if size else (_TRAILER, 0)
        elif not line:  # _TRAILER: the blank line ends the message
            self._flush(pieces, now)
            self._complete(rest)
            return b""
        return rest

    def _whole_chunks(self, view: bytes, pieces: list[bytes]) -> bytes:
        """The common case in one pass: every chunk of this read that is complete (a bare hex size, CRLF, that
        many bytes, CRLF) is taken without a state change. Split on CRLF, a chunk is a size part followed by a
        data part of exactly that length; at the first part that is not (data holding a CRLF, a size with
        extensions or bare LFs, the last chunk, a partial one) the rest goes the long way.

        The sizes are checked all at once first, against each data part's length written as lowercase hex, in
        C loops (map, list equality): what every server sends, 14 → 4 µs for a 32-token response. Any other
        spelling of a size (capitals, leading zeros) is checked chunk by chunk, and accepted the same."""
        parts = view.split(b"\r\n")
        pairs = (len(parts) - 1) // 2  # a data part needs a part after it: its closing CRLF is in the read
        sizes, datas = parts[0:2 * pairs:2], parts[1:2 * pairs:2]
        lengths = list(map(len, datas))
        if 0 in lengths:  # the last chunk, or data shorter than its size: the long way from there
            pairs = lengths.index(0)
            del sizes[pairs:], datas[pairs:], lengths[pairs:]
        if list(map(_LOWER_HEX, lengths)) != sizes:
            pairs = self._sized_prefix(sizes, lengths)
            del datas[pairs:]
        if not pairs:
            return view
        pieces += datas
        return view[sum(map(len, sizes[:pairs])) + sum(lengths[:pairs]) + 4 * pairs:]

    @staticmethod
    def _sized_prefix(sizes: list[bytes], lengths: list[int]) -> int:
        """How many leading (size, data) parts agree, sizes in any spelling of bare hex."""
        hex_digits = _HEX.fullmatch
        for i, (size, length) in enumerate(zip(sizes, lengths, strict=True)):
            if hex_digits(size) is None or int(size, 16) != length:  # not int()'s test alone: it takes "0x", "_"
                return i
        return len(sizes)

    def _line(self, view: bytes) -> tuple[bytes | None, bytes]:
        """One CRLF- (or LF-) terminated line, assembled across reads."""
        cut = view.find(b"\n")
        if cut < 0:
            self._buf += view
            if len(self._buf) > MAX_CHUNK_LINE_BYTES:
                raise WireError("malformed_http", "a chunk-size line passed 4 KiB")
            return None, b""
        if self._buf:
            self._buf += view[:cut]
            line = bytes(self._buf)
            self._buf.clear()
        else:
            line = view[:cut]
        return line.rstrip(b"\r"), view[cut + 1:]

    def _complete(self, rest: bytes) -> None:
        self._state = _DONE
        self.reusable = self._keep and not rest and not self.closed
        self._resolve()

    def _ended(self) -> None:
        """The peer closed its side: the end of a close-delimited body, else a dropped response."""
        if self._sink is None:
            self.reusable = False
            return
        if self._state == _CLOSE:
            self._keep = False
            self._complete(b"")
        elif self._state == _HEAD and self._buf and not _STATUS.match(bytes(self._buf[:16])):
            self._fail(WireError("malformed_http", "the reply is not HTTP"))
        else:
            what = "before the response's head" if self._state == _HEAD and not self._seen else "before the body ended"
            self._fail(WireError("dropped_stream", f"the server closed the connection {what}"))

    def _fail(self, exc: BaseException) -> None:
        done = self._done
        self.abort()
        if done is not None and not done.done():
            done.set_exception(exc)

    def _resolve(self) -> None:
        done, self._sink, self._done = self._done, None, None
        if done is not None and not done.done():
            done.set_result(None)


@functools.lru_cache(maxsize=64)
def _parse_head(head: bytes) -> tuple[int, int, Mapping[str, str]]:
    """Status, HTTP minor version and headers (lowercase names; the caller only reads them). A server sends
    the same head to request after request (a Date header changes once a second), so heads are cached."""
    lines = head.rstrip(b"\r").replace(b"\r\n", b"\n").split(b"\n")
    status = _STATUS.fullmatch(lines[0])
    if status is None:
        raise WireError("malformed_http", f"the reply is not HTTP: {lines[0][:40]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or name[:1] in b" \t":
            raise WireError("malformed_http", f"a header line is not 'name: value': {line[:40]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        if key == "content-length" and key in headers and headers[key] != text:
            raise WireError("malformed_http", "two different Content-Length headers")
        headers[key] = f"{headers[key]}, {text}" if key in headers and key != "content-length" else text
    return int(status.group(2)), int(status.group(1)), headers


def _content_length(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise WireError("malformed_http", f"Content-Length {text[:20]!r} is not a number of bytes")
    return int(text)


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip() if b";" in line else line.strip()
    if not _HEX.fullmatch(size):
        raise WireError("malformed_http", f"chunk size {size[:20]!r} is not a hexadecimal number")
    return int(size, 16)


class Pool:
    """Idle keep-alive connections to one target, reused last-in first-out; none is ever shared by two
    requests at once. Opening one is bounded by `connect_timeout_s`."""

    def __init__(self, target: Target, connect_timeout_s: float, tls: ssl.SSLContext | None = None) -> None:
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.tls = tls if tls is not None or not target.tls else ssl.create_default_context()
        self.idle: list[Connection] = []
        self.every: set[Connection] = set()
        self.opened = 0

    def take_idle(self) -> Connection | None:
        """The most recently released connection that is still open, or None."""
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable and not conn.closed:
                return conn
            self.every.discard(conn)
        return None

    async def acquire(self) -> Connection:
        return self.take_idle() or await self.connect()

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        t = self.target
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(Connection, t.host, t.port, ssl=self.tls,
                                                       server_hostname=t.host if self.tls else None)
        except TimeoutError:
            raise
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise WireError("connect", f"{type(exc).__name__}: {exc}") from None
        self.opened += 1
        self.every.add(conn)
        return conn

    def release(self, conn: Connection) -> None:
        if conn.reusable and not conn.closed:
            self.idle.append(conn)
        else:
            conn.abort()
            self.every.discard(conn)

    def close(self) -> None:
        for conn in self.every:
            conn.abort()
        self.every.clear()
        self.idle.clear()

