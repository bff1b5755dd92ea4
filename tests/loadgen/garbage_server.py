"""A hostile OpenAI-compatible server for fuzzing the load client: every request gets a generated fault.

Shared by the hypothesis tests (tests/loadgen/test_fuzz_load.py) and the long run
(benchmarks/fuzz_load.py). Raw asyncio HTTP/1.1, so it can send what no real server library would:
broken framing, endless bodies, huge lines, lying `usage`, hangs, secrets echoed back.

A run is described by a `Scenario` drawn from `random.Random(f"{seed}-{run}")` (`scenario(seed, run)`);
each prompt the client sends reads `fz RUN P`, so the server finds the scenario and draws request P's
details from `random.Random(f"{seed}-{run}-{P}")`: the same run always gets the same bytes. The
scenario also says what an honest client must conclude (`must_invalid`: the run cannot be `valid`;
`forbid`: error kinds that would misdescribe what the server did, e.g. `timeout` for a 500 whose body
never ends; `honest`: nothing is wrong, so the run should be valid).

Standalone: `python tests/loadgen/garbage_server.py --seed 0` prints `PORT <n>` and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from threaded_server import asyncio_server_in_thread

FAMILIES = ("honest", "shapes", "usage", "framing", "http", "size", "time", "secrets")
WEIGHTS = (3, 2, 2, 2, 2, 1, 1, 1)
USAGE_LIES = ("negative", "huge", "huge_float", "zero", "fewer_than_chunks", "short", "nan", "fraction",
              "absurd_vs_chars", "string", "bool", "list")
IMPOSSIBLE_USAGE = frozenset(USAGE_LIES[:9])  # numbers no honest server reports: the run cannot be valid
FRAMING = ("random_bytes", "random_raw", "bad_chunk_size", "truncated", "no_done", "close_delimited",
           "length_too_long", "nul_bytes", "bare_cr", "byte_by_byte")
HTTP = ("not_http", "status_999", "huge_header", "many_headers", "endless_500", "echo_500", "status_429",
        "status_302", "status_400", "html_200", "status_204", "continue_100")
SIZE = ("huge_line", "endless_line", "endless_content", "endless_plain", "huge_error_body", "many_tiny_chunks")
TIME = ("hang_before_headers", "hang_after_headers", "stall_mid_stream", "trickle", "slow_headers")
SECRETS = ("echo_500", "echo_stream_error", "echo_401", "echo_redirect")
VARIANTS: dict[str, tuple[str, ...]] = {
    "honest": ("plain", "chunky", "reasoning", "crlf", "comments", "split"), "shapes": ("mixed",),
    "usage": USAGE_LIES, "framing": FRAMING, "http": HTTP, "size": SIZE, "time": TIME, "secrets": SECRETS}
HANGS = frozenset({"hang_before_headers", "hang_after_headers", "stall_mid_stream"})
ENDLESS_CAP_BYTES = 256 * 2**20  # an endless body stops here, whatever the client does (safety for the server)
ENDLESS_CAP_S = 30.0

# JSON shapes an OpenAI stream chunk should not have; each must be survivable.
ODD_CHUNKS: tuple[Any, ...] = (
    {"choices": [{"delta": "tok "}]}, {"choices": [{"delta": ["tok"]}]}, {"choices": [{"delta": 5}]},
    {"choices": [{"delta": None}]}, {"choices": [{"delta": {"content": ["tok"]}}]},
    {"choices": [{"delta": {"content": 5}}]}, {"choices": [{"delta": {"content": {"x": 1}}}]},
    {"choices": "tok"}, {"choices": {"0": {}}}, {"choices": [None]}, {"choices": ["tok"]}, {"choices": []},
    {"choices": None}, {"choices": [{"text": ["x"]}]}, {"choices": [{"text": 5}]}, [1, 2, 3], "tok", 5, None, True,
    {"error": "boom"}, {"error": {"message": "boom", "code": 500}}, {"error": []}, {"error": 0}, {"usage": "x"},
    {"usage": [1]}, {"usage": 5}, {"usage": {"completion_tokens": -5}}, {"choices": [{"message": "tok"}]}, {},
    {"choices": [{"delta": {"content": "tok ", "reasoning_content": 5}}]}, {"choices": [{"delta": {"role": 7}}]},
    {"choices": [{"delta": {"reasoning": "think "}}]}, {"choices": [{"index": "x", "delta": {"content": None}}]},
)
ODD_BODIES: tuple[Any, ...] = (
    {"choices": [{"message": "tok"}]}, {"choices": [{"message": ["tok"]}]}, {"choices": [{"message": None}]},
    {"choices": [{"message": {"content": 5}}]}, {"choices": "x"}, {"choices": [None]}, [1], "tok", 5, None,
    {"error": {"message": "nope"}}, {"choices": [{"text": {"a": 1}}]}, {"usage": "x", "choices": []},
)


@dataclass(frozen=True)
class Scenario:
    """One fuzz run: what the server does, the load shape the client uses, and what it must conclude."""

    run: int
    family: str
    variant: str  # "mixed": drawn per request
    concurrency: int | None
    rate: float | None
    requests: int | None
    duration_s: float | None
    stream: bool
    endpoint: str
    output_tokens: int
    timeout_s: float
    creds: bool  # the URL carries user:password@ and ?api_key=
    must_invalid: bool
    honest: bool
    forbid: frozenset[str] = frozenset()

    @property
    def time_bound_s(self) -> float:
        """How long the run may take before it counts as a hang (the client's limits, generously)."""
        slack = 2.5
        if self.duration_s is not None:
            return self.duration_s + 1.5  # a level ends at its duration, in-flight requests or not
        n = self.requests or 1
        if self.rate is not None:
            return n / self.rate + 2 * (self.timeout_s + 0.5) + slack
        rounds = -(-n // (self.concurrency or 1))
        return rounds * 2 * (self.timeout_s + 0.5) + slack  # 2 ×: a 400 is retried once without the extras


def scenario(seed: int, run: int, family: str | None = None) -> Scenario:
    rng = random.Random(f"{seed}-{run}")
    fam = family or rng.choices(FAMILIES, WEIGHTS)[0]
    variant = rng.choice(VARIANTS[fam])
    stream = rng.random() < 0.75
    if fam == "size" and variant == "endless_plain":
        stream = False
    if fam == "size" and variant in ("huge_line", "endless_line", "endless_content", "many_tiny_chunks"):
        stream = True
    if fam == "honest" and variant != "plain":
        stream = True
    if fam == "honest" and variant == "plain":
        stream = False
    timed = fam == "time"
    duration = round(rng.uniform(0.6, 1.4), 2) if (timed and rng.random() < 0.6) or rng.random() < 0.1 else None
    concurrency: int | None = rng.randint(1, 4)
    rate = None
    if duration is None and fam == "honest" and rng.random() < 0.25:
        concurrency, rate = None, float(rng.choice((5, 10, 20)))
    requests = None if duration is not None else rng.randint(2, 6)
    if variant in HANGS and requests is not None:
        concurrency = requests  # every request in flight at once: one timeout per run, not one per request
    creds = fam == "secrets" or rng.random() < 0.3
    # Fewer tokens than content chunks shows only in a stream: a non-streamed reply is one chunk.
    impossible = fam == "usage" and variant in IMPOSSIBLE_USAGE and (stream or variant != "fewer_than_chunks")
    every_fails = (fam in ("http", "size", "secrets") and variant != "continue_100") or variant in HANGS
    forbid: set[str] = set()
    if variant in ("endless_500", "huge_error_body"):
        forbid.add("timeout")  # the status said what happened; the body not ending must not change it
    if variant in ("endless_line", "endless_content", "endless_plain", "many_tiny_chunks"):
        forbid.add("timeout")  # the server sent far too much, promptly: that is the error, not slowness
    return Scenario(run=run, family=fam, variant=variant, concurrency=concurrency, rate=rate, requests=requests,
                    duration_s=duration, stream=stream, endpoint=rng.choice(("chat", "chat", "completions")),
                    output_tokens=rng.randint(2, 16), timeout_s=3.0 if timed else 2.0, creds=creds,
                    must_invalid=impossible or every_fails, honest=fam == "honest", forbid=frozenset(forbid))


# ------------------------------------------------------------------------------------ the server

@dataclass
class Request:
    line: str  # the request line, as sent (path and query included)
    headers: dict[str, str]
    body: dict[str, Any]
    chat: bool

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def max_tokens(self) -> int:
        n = self.body.get("max_tokens")
        return n if isinstance(n, int) and 0 < n < 10_000 else 16

    @property
    def wants_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage")) or not self.stream

    @property
    def prompt(self) -> str:
        if self.chat:
            messages = self.body.get("messages") or [{}]
            return str(messages[-1].get("content", ""))
        return str(self.body.get("prompt", ""))


# A custom responder (the hypothesis tests): request → the exact bytes to send, then close.
Responder = Callable[[Request], bytes]


@dataclass
class GarbageServer:
    seed: int
    port: int = 0
    responder: Responder | None = None  # when set, replaces the scenarios
    only: str | None = None  # every scenario from this family (benchmarks/fuzz_load.py --only)
    served: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _handle(server: GarbageServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            req = Request(lines[0], headers, body if isinstance(body, dict) else {}, "chat/completions" in lines[0])
            server.served += 1
            if server.responder is not None:
                writer.write(server.responder(req))
                await writer.drain()
                return
            if not await _respond(server, req, reader, writer):
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.transport.abort()


async def _respond(server: GarbageServer, req: Request, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> bool:
    """Answer one request as its scenario says; False when the connection is done."""
    found = re.search(r"fz (\d+) (\d+)", req.prompt)
    run, p = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    sc = scenario(server.seed, run, server.only)
    rng = random.Random(f"{server.seed}-{run}-{p}")
    out = _Out(writer, rng)
    n = req.max_tokens
    fam, variant = sc.family, sc.variant
    if fam == "honest":
        return await _honest(out, req, variant)
    if fam == "shapes":
        return await _shapes(out, req)
    if fam == "usage":
        return await _usage_lie(out, req, variant)
    if fam == "framing":
        return await _framing(out, req, variant)
    if fam == "http":
        return await _http(out, req, variant, reader)
    if fam == "size":
        return await _size(out, req, variant)
    if fam == "time":
        return await _time(out, req, variant, reader)
    return await _secrets(out, req, variant, n)


class _Out:
    def __init__(self, writer: asyncio.StreamWriter, rng: random.Random) -> None:
        self.writer = writer
        self.rng = rng

    async def send(self, data: bytes, *, split: bool = False) -> None:
        if not split:
            self.writer.write(data)
            await self.writer.drain()
            return
        i = 0
        while i < len(data):
            step = self.rng.randint(1, 40)
            self.writer.write(data[i:i + step])
            await self.writer.drain()
            await asyncio.sleep(0)
            i += step

    async def chunk(self, data: bytes) -> None:
        await self.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def event(self, obj: Any, sep: bytes = b"\n") -> None:
        await self.chunk(b"data: " + json.dumps(obj).encode() + sep + sep)

    async def sse_head(self) -> None:
        await self.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

    async def end(self) -> None:
        await self.chunk(b"data: [DONE]\n\n")
        await self.send(b"0\r\n\r\n")

    async def json(self, status: int, obj: Any, extra: str = "") -> None:
        data = json.dumps(obj).encode()
        await self.send(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
            status, len(data), extra.encode(), data))


def _piece(req: Request, text: str, key: str = "content") -> dict[str, Any]:
    choice = {"index": 0, "delta": {key: text}} if req.chat else {"index": 0, "text": text}
    return {"id": "fz", "choices": [choice]}


def _usage(n: int, prompt: int = 4) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}


def _plain_body(req: Request, text: str, usage: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}} if req.chat else {"index": 0, "text": text}
    return {"id": "fz", "choices": [choice], "usage": usage}


async def _honest(out: _Out, req: Request, variant: str) -> bool:
    n = req.max_tokens
    if not req.stream:
        await out.json(200, _plain_body(req, "tok " * n, _usage(n)))
        return True
    sep = b"\r\n" if variant == "crlf" else b"\n"
    frames: list[bytes] = []
    if req.chat:
        frames.append(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}).encode())
    k = 0
    while k < n:
        take = min(out.rng.randint(1, 3) if variant == "chunky" else 1, n - k)
        key = "reasoning_content" if variant == "reasoning" and k < n // 2 else "content"
        if variant == "comments":
            frames.append(b": keep-alive")
            frames.append(b"event: message")
        frames.append(b"data: " + json.dumps(_piece(req, "tok " * take, key)).encode())
        k += take
    if req.wants_usage:
        frames.append(b"data: " + json.dumps({"choices": [], "usage": _usage(n)}).encode())
    frames.append(b"data: [DONE]")
    payload = b"".join(f + sep + sep for f in frames)
    await out.sse_head()
    if variant == "split":
        body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in _cut(payload, out.rng))
        await out.send(body + b"0\r\n\r\n", split=True)
    else:
        for f in frames:
            await out.chunk(f + sep + sep)
        await out.send(b"0\r\n\r\n")
    return True


def _cut(data: bytes, rng: random.Random) -> list[bytes]:
    pieces, i = [], 0
    while i < len(data):
        step = rng.randint(1, 30)
        pieces.append(data[i:i + step])
        i += step
    return pieces


async def _shapes(out: _Out, req: Request) -> bool:
    n, rng = req.max_tokens, out.rng
    if not req.stream:
        await out.json(200, rng.choice(ODD_BODIES) if rng.random() < 0.8 else _plain_body(req, "tok " * n, _usage(n)))
        return True
    await out.sse_head()
    for _ in range(n):
        await out.event(rng.choice(ODD_CHUNKS) if rng.random() < 0.5 else _piece(req, "tok "))
    if req.wants_usage:
        await out.event({"choices": [], "usage": _usage(n)})
    await out.end()
    return True


def _lie(variant: str, n: int, chunks: int, chars: int) -> Any:
    return {"negative": -1471, "huge": 10**11, "huge_float": 1.3e11, "zero": 0,
            "fewer_than_chunks": max(chunks // 2, 1), "short": max(n // 5, 1), "nan": float("nan"),
            "fraction": n + 0.5, "absurd_vs_chars": 50 * chars + 100,
            "string": str(n), "bool": True, "list": [n]}[variant]


async def _usage_lie(out: _Out, req: Request, variant: str) -> bool:
    """A well-formed answer whose `usage.completion_tokens` lies (`short`: the text really is short)."""
    n = req.max_tokens
    sent = max(n // 5, 1) if variant == "short" else n
    if variant == "fewer_than_chunks":
        sent = max(n, 4)
    text = "tok " * sent
    lie = _lie(variant, n, sent, len(text))
    if variant == "absurd_vs_chars":
        lie = min(lie, 90 * n)  # absurd for the text, yet under 100 × max_tokens: only the text shows it
    usage = {"prompt_tokens": 4, "completion_tokens": lie, "total_tokens": 4}
    if not req.stream:
        body = json.dumps(_plain_body(req, text, usage), allow_nan=True).encode()
        await out.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body), body))
        return True
    await out.sse_head()
    for _ in range(sent):
        await out.event(_piece(req, "tok "))
    await out.chunk(b"data: " + json.dumps({"choices": [], "usage": usage}, allow_nan=True).encode() + b"\n\n")
    await out.end()
    return True


async def _framing(out: _Out, req: Request, variant: str) -> bool:
    rng, n = out.rng, req.max_tokens
    valid = b"".join(b"data: " + json.dumps(_piece(req, "tok ")).encode() + b"\n\n" for _ in range(n))
    valid += b"data: " + json.dumps({"choices": [], "usage": _usage(n)}).encode() + b"\n\ndata: [DONE]\n\n"
    if variant == "random_bytes":
        await out.sse_head()
        for _ in range(rng.randint(1, 20)):
            await out.chunk(rng.randbytes(rng.randint(1, 3000)))
        await out.send(b"0\r\n\r\n")
        return True
    if variant == "random_raw":
        junk = rng.randbytes(rng.randint(0, 5000))
        await out.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(junk), junk))
        return True
    if variant == "bad_chunk_size":
        await out.sse_head()
        await out.send(b"zz\r\n" + valid[:50] + b"\r\n")
        return False
    if variant == "truncated":
        await out.sse_head()
        await out.chunk(valid[: rng.randint(1, max(2, len(valid) - 1))])
        return False
    if variant == "no_done":
        await out.sse_head()
        await out.chunk(valid.replace(b"data: [DONE]\n\n", b""))
        await out.send(b"0\r\n\r\n")
        return True
    if variant == "close_delimited":
        await out.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + valid)
        return False
    if variant == "length_too_long":
        await out.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
            len(valid) + 5000, valid))
        return False
    if variant == "nul_bytes":
        await out.sse_head()
        await out.chunk(b"data: {\"choices\": [{\"delta\": {\"content\": \"\x00\xff\xfe\"}}]}\n\n" + valid)
        await out.send(b"0\r\n\r\n")
        return True
    if variant == "bare_cr":
        await out.sse_head()
        await out.chunk(valid.replace(b"\n", b"\r"))
        await out.send(b"0\r\n\r\n")
        return True
    # byte_by_byte: a valid stream, one byte a write
    await out.sse_head()
    for i in range(len(valid)):
        await out.chunk(valid[i:i + 1])
    await out.send(b"0\r\n\r\n")
    return True


async def _endless(out: _Out, head: bytes, piece: bytes) -> bool:
    """`head`, then `piece` chunk after chunk until the client leaves (or the server's own safety cap)."""
    await out.send(head)
    framed = b"%x\r\n%s\r\n" % (len(piece), piece)
    sent, start = 0, asyncio.get_running_loop().time()
    while sent < ENDLESS_CAP_BYTES and asyncio.get_running_loop().time() - start < ENDLESS_CAP_S:
        out.writer.write(framed)
        await out.writer.drain()
        sent += len(framed)
    return False


async def _http(out: _Out, req: Request, variant: str, reader: asyncio.StreamReader) -> bool:
    if variant == "not_http":
        await out.send(b"HELLO THERE\r\n\r\n")
        return False
    if variant == "status_999":
        await out.send(b"HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nhi")
        return True
    if variant == "huge_header":
        await out.send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 300_000 + b"\r\nContent-Length: 0\r\n\r\n")
        return False
    if variant == "many_headers":
        await out.send(b"HTTP/1.1 200 OK\r\n" + b"X-H: v\r\n" * 20_000 + b"Content-Length: 0\r\n\r\n")
        return False
    if variant == "endless_500":
        return await _endless(out, b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n", b"E" * 65536)
    if variant == "echo_500":
        await out.json(500, {"error": {"message": f"bad request {req.line}", "headers": req.headers}})
        return True
    if variant == "status_429":
        await out.json(429, {"error": "slow down"}, "Retry-After: 1\r\n")
        return True
    if variant == "status_302":
        await out.json(302, {}, "Location: http://127.0.0.1:9/elsewhere\r\n")
        return True
    if variant == "status_400":
        await out.json(400, {"error": "bad"})
        return True
    if variant == "html_200":
        page = b"<html><body>" + b"hello " * 100 + b"</body></html>"
        await out.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (
            len(page), page))
        return True
    if variant == "status_204":
        await out.send(b"HTTP/1.1 204 No Content\r\n\r\n")
        return True
    # continue_100: an informational response first, then an honest answer
    await out.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    return await _honest(out, req, "plain" if not req.stream else "chunky")


async def _size(out: _Out, req: Request, variant: str) -> bool:
    n = req.max_tokens
    if variant == "huge_line":
        await out.sse_head()
        await out.event(_piece(req, "tok "))
        await out.chunk(b"data: " + b"x" * (3 * 2**20) + b"\n\n")
        for _ in range(n - 1):
            await out.event(_piece(req, "tok "))
        await out.end()
        return True
    if variant == "endless_line":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        return await _endless(out, head + b"7\r\ndata: {\r\n", b"x" * 512)
    if variant == "endless_content":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        return await _endless(out, head, b"data: " + json.dumps(_piece(req, "tok ")).encode() + b"\n\n")
    if variant == "endless_plain":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        return await _endless(out, head + b"18\r\n{\"choices\": [{\"text\": \"\r\n", b"x" * 65536)
    if variant == "huge_error_body":
        body = b"E" * (20 * 2**20)
        await out.send(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body))
        await out.send(body)
        return True
    # many_tiny_chunks: 200,000 one-character content chunks for a handful of tokens
    await out.sse_head()
    one = b"data: " + json.dumps(_piece(req, "x")).encode() + b"\n\n"
    for _ in range(200):
        await out.chunk(one * 1000)
    await out.event({"choices": [], "usage": _usage(n)})
    await out.end()
    return True


async def _hang(reader: asyncio.StreamReader) -> bool:
    """Say nothing more; return when the client gives up and closes (so no socket is left behind)."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass
    return False


async def _time(out: _Out, req: Request, variant: str, reader: asyncio.StreamReader) -> bool:
    if variant == "hang_before_headers":
        return await _hang(reader)
    if variant == "hang_after_headers":
        if req.stream:
            await out.sse_head()
        else:
            await out.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        return await _hang(reader)
    if variant == "stall_mid_stream":
        await out.sse_head()
        for _ in range(2):
            await out.event(_piece(req, "tok "))
        return await _hang(reader)
    if variant == "slow_headers":
        await asyncio.sleep(0.3)
        return await _honest(out, req, "plain" if not req.stream else "chunky")
    # trickle: honest, one token every 0.15 s
    n = req.max_tokens
    if not req.stream:
        await asyncio.sleep(0.15 * n)
        return await _honest(out, req, "plain")
    await out.sse_head()
    for _ in range(n):
        await asyncio.sleep(0.15)
        await out.event(_piece(req, "tok "))
    if req.wants_usage:
        await out.event({"choices": [], "usage": _usage(n)})
    await out.end()
    return True


async def _secrets(out: _Out, req: Request, variant: str, n: int) -> bool:
    echo = f"{req.line} authorization={req.headers.get('authorization')} host={req.headers.get('host')}"
    if variant == "echo_500":
        await out.json(500, {"error": {"message": f"failed: {echo}"}})
        return True
    if variant == "echo_401":
        await out.json(401, {"error": f"invalid credentials {echo}"})
        return True
    if variant == "echo_redirect":
        await out.json(302, {"error": echo}, f"Location: {echo.split()[1]}\r\n")
        return True
    await out.sse_head()
    await out.event(_piece(req, "tok "))
    await out.event({"error": {"message": f"engine failure while serving {echo}"}})
    await out.end()
    return True


# ------------------------------------------------------------------------------------ running it

@contextlib.contextmanager
def serve_in_thread(seed: int = 0, responder: Responder | None = None,
                    only: str | None = None) -> Iterator[GarbageServer]:
    """The server on 127.0.0.1 (a free port) in a background thread; every connection is cut on exit."""
    server = GarbageServer(seed, responder=responder, only=only)
    with asyncio_server_in_thread(lambda r, w: _handle(server, r, w), "garbage-server", limit=2**20) as port:
        server.port = port
        yield server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    with serve_in_thread(args.seed, only=args.only) as server:
        print(f"PORT {server.port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
