"""A near-zero-latency OpenAI-compatible server for measuring load-test *clients*.

Plain asyncio protocol, no framework: it parses just enough HTTP/1.1 (keep-alive, Content-Length
bodies), pulls ``max_tokens``, ``stream`` and ``include_usage`` out of the body with byte regexes, and
writes a response whose bytes were built once per (endpoint, stream, max_tokens, usage) and cached.
Every response is written in one ``transport.write`` as soon as the request body is complete, so the
server's own time per request is a few microseconds; what a client measures beyond that is the client
(plus the loopback socket).

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (SSE streaming or JSON), ``GET
/v1/models``, ``GET /health``. Streaming uses chunked transfer encoding like real servers, one SSE event
per output token, ``usage`` before ``[DONE]`` when ``stream_options.include_usage`` is true.

Run: ``python benchmarks/zero_latency_server.py --port 0`` prints ``PORT <n>`` on stdout once it listens,
then serves until killed (SIGTERM/SIGINT) or until ``--max-seconds`` pass. With ``--stats-file`` it
writes ``{"requests": n, "server_time_us_p50": ..., "server_time_us_p95": ...}`` on exit (the time from
a complete request in the buffer to the response handed to the kernel).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import sys
import time

_MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')
_STREAM = re.compile(rb'"stream"\s*:\s*true')
_USAGE = re.compile(rb'"include_usage"\s*:\s*true')
_PROMPT_LEN = 16  # usage.prompt_tokens reported (the server does not tokenize)

_cache: dict[tuple[bool, bool, int, bool], bytes] = {}
_server_times: list[float] = []


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _build(chat: bool, stream: bool, n: int, usage: bool) -> bytes:
    created = 1_700_000_000
    rid = "cmpl-zero"
    usage_obj = {"prompt_tokens": _PROMPT_LEN, "completion_tokens": n, "total_tokens": _PROMPT_LEN + n}
    if not stream:
        if chat:
            body_obj: dict[str, object] = {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": "tiny",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "x" * n}, "finish_reason": "length"}
                ],
                "usage": usage_obj,
            }
        else:
            body_obj = {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": "tiny",
                "choices": [{"index": 0, "text": "x" * n, "finish_reason": "length"}],
                "usage": usage_obj,
            }
        body = json.dumps(body_obj, separators=(",", ":")).encode()
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: keep-alive\r\n\r\n%s" % (len(body), body)
        )
    events: list[bytes] = []
    for i in range(n):
        if chat:
            delta: dict[str, object] = {"content": "x"} if i else {"role": "assistant", "content": "x"}
            obj: dict[str, object] = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": "tiny",
                "choices": [{"index": 0, "delta": delta, "finish_reason": "length" if i == n - 1 else None}],
            }
        else:
            obj = {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": "tiny",
                "choices": [{"index": 0, "text": "x", "finish_reason": "length" if i == n - 1 else None}],
            }
        events.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    if usage:
        obj = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": "tiny",
            "choices": [],
            "usage": usage_obj,
        }
        events.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    )
    return head + b"".join(_chunked(e) for e in events) + b"0\r\n\r\n"


def _simple(status: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
        % (status, len(body), body)
    )


_MODELS = _simple(
    b"200 OK",
    b'{"object":"list","data":[{"id":"tiny","object":"model","created":1700000000,"owned_by":"gpuscout"}]}',
)
_HEALTH = _simple(b"200 OK", b'{"status":"ok"}')
_NOT_FOUND = _simple(b"404 Not Found", b'{"error":{"message":"not found"}}')


class _Http(asyncio.Protocol):
    __slots__ = ("buf", "transport")

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t0 = time.perf_counter()
        buf = self.buf + data if self.buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            length = 0
            cl = head.lower().find(b"content-length:")
            if cl >= 0:
                eol = head.find(b"\r\n", cl)
                length = int(head[cl + 15 : eol if eol >= 0 else len(head)])
            total = end + 4 + length
            if len(buf) < total:
                break
            body = buf[end + 4 : total]
            buf = buf[total:]
            self.transport.write(self._respond(head, body))  # type: ignore[union-attr]
            _server_times.append(time.perf_counter() - t0)
        self.buf = buf

    @staticmethod
    def _respond(head: bytes, body: bytes) -> bytes:
        line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
        parts = line.split(b" ")
        method, path = parts[0], parts[1].split(b"?")[0] if len(parts) > 1 else b"/"
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            m = _MAX_TOKENS.search(body)
            n = max(1, int(m.group(1))) if m else 16
            key = (
                path == b"/v1/chat/completions",
                _STREAM.search(body) is not None,
                n,
                _USAGE.search(body) is not None,
            )
            resp = _cache.get(key)
            if resp is None:
                resp = _cache[key] = _build(*key)
            return resp
        if method == b"GET" and path == b"/v1/models":
            return _MODELS
        if method == b"GET" and path in (b"/health", b"/"):
            return _HEALTH
        return _NOT_FOUND


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


async def _main(host: str, port: int, max_seconds: float, stats_file: str | None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max_seconds)
    server.close()
    if stats_file:
        us = [t * 1e6 for t in _server_times]
        with open(stats_file, "w") as f:
            json.dump(
                {
                    "requests": len(us),
                    "server_time_us_p50": _percentile(us, 50),
                    "server_time_us_p95": _percentile(us, 95),
                },
                f,
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long regardless")
    ap.add_argument("--stats-file", default=None)
    args = ap.parse_args(argv)
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_main(args.host, args.port, args.max_seconds, args.stats_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
