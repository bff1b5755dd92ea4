"""A local OpenAI-compatible server with injected timing and faults, for the load tests.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE), so its own overhead is tiny and faults are exact:
* timing: the first content chunk leaves `ttft_s` after the request body arrived, token k at
  ttft_s + k·token_delay_s (absolute deadlines, so TPOT is exact on average); `tokens_per_chunk`
  tokens per SSE chunk; the output length is the request's max_tokens.
* faults, chosen by a marker in the prompt so they are deterministic: `FAULT=500` (HTTP 500),
  `FAULT=hang` (never answers), `FAULT=drop` (closes the connection after one content chunk),
  `FAULT=malformed` (one `data:` line that is not JSON); hostile ones (tests/loadgen/test_hostile_server.py):
  `FAULT=string_delta` (one chunk's `delta`, or the reply's `message`, is a string), `FAULT=endless500`
  (HTTP 500 whose body never ends), `FAULT=hugeline` (one 3 MiB SSE line), `FAULT=headers_then_hang`
  (the headers, then nothing), `FAULT=stall` (one content chunk, then nothing), `FAULT=echo` (HTTP 500
  echoing the request line and every header back: credentials included).
* lying counts for every request: `usage_completion` replaces `usage.completion_tokens` (any JSON value);
  `stop_after` stops the output after that many tokens although max_tokens (and ignore_eos) asked for more.
* `reject_extras`: answer `reject_status` (400, or 422 as FastAPI servers do) to requests carrying
  ignore_eos/min_tokens (servers that forbid unknown fields); `seen` keeps every request's body and
  Authorization header for the tests.
* `/metrics`: Prometheus text with vLLM's names (running requests, prefix-cache queries and hits in
  tokens, generated tokens …), from what the server did; `prefix_cache=True` keeps a block prefix cache
  (`cache_block` words a block, the prompt = every message joined) and reports the hit as
  `usage.prompt_tokens_details.cached_tokens`, recorded per request (`Served.cached_tokens`).
* `/v1/images/generations`: `n` images of base64 bytes after `image_delay_s` each (`Served.images`).
* `records`: what the server actually did per request (`Served`: received, each content write, end), on
  the client's clock, so a test can hold the client's measurement against the server's own timeline
  instead of against the injected delays (which a starved server misses). `GET /_records` returns them
  as a JSON list, for a server in another process.

Run standalone (for benchmarks): `python tests/loadgen/fake_openai.py --ttft 0 --token-delay 0`
prints `PORT <n>` and serves until interrupted; `serve_in_process` does that for a test.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from threaded_server import asyncio_server_in_thread


@dataclass
class FakeConfig:
    ttft_s: float = 0.0
    token_delay_s: float = 0.0
    tokens_per_chunk: int = 1
    reject_extras: bool = False
    reject_status: int = 400  # what a refusal of the extras answers: 400, or 422 as FastAPI's request models do
    api_key: str | None = None  # when set, other keys get 401
    usage_completion: Any = None  # when not None: the usage.completion_tokens reported, whatever was sent
    stop_after: int | None = None  # send at most this many tokens (a server that does not honour ignore_eos)
    prefix_cache: bool = False  # report cached_tokens from a block prefix cache
    cache_block: int = 16  # words per cache block
    image_delay_s: float = 0.0  # per generated image
    prefill_s_per_token: float = 0.0  # added to TTFT for each prompt word not found in the prefix cache
    no_usage: bool = False  # never send usage (llama-cpp-python's server ignores include_usage)
    max_running: int | None = None  # serve this many at once; the rest wait (a server that can saturate)
    metrics_page: str | None = None  # served at /metrics instead of the honest page (a broken or hostile exporter)
    images_returned: int | None = None  # images in every answer, whatever `n` asked (a server that lies)
    metrics_status: int = 200  # the /metrics page's HTTP status (its body is the page all the same)


@dataclass(slots=True)
class Served:
    """What the server did for one POST, in time.perf_counter() seconds: the load client's clock (in another
    process too on Linux, where it is CLOCK_MONOTONIC, one clock for the whole host).

    Writes are stamped just before the bytes are handed to the socket, the receipt just after the body
    was read: causality then guarantees client send ≤ received_s and writes_s[i] ≤ the client's arrival i.
    """

    prompt: str  # unique per request in the timing tests: the key that pairs a record with the client's
    path: str
    received_s: float  # request head and body read
    status: int = 200
    writes_s: list[float] = field(default_factory=list)  # each content write: SSE chunk, or the whole JSON body
    tokens: list[int] = field(default_factory=list)  # tokens in each of those writes
    end_s: float | None = None  # the last byte drained; None when it never finished (hang, drop)
    prompt_tokens: int = 0  # words of the whole prompt (every message)
    cached_tokens: int = 0  # of them, found in the prefix cache
    images: int = 0


@dataclass
class FakeServer:
    config: FakeConfig
    port: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)
    records: list[Served] = field(default_factory=list)
    blocks: set[tuple[str, ...]] = field(default_factory=set)  # cached prefixes, block-aligned
    running: int = 0
    scrapes: int = 0
    scrape_auth: list[str | None] = field(default_factory=list)  # the authorization header of each scrape
    gate: asyncio.Semaphore | None = None

    def metrics_text(self) -> str:
        """What vLLM's /metrics would say about what this server did (its names, its types)."""
        done = [r for r in self.records if r.end_s is not None and r.status == 200]
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{model_name="m"}} {self.running}',
            "# TYPE vllm:num_requests_waiting gauge", 'vllm:num_requests_waiting{model_name="m"} 0',
            "# TYPE vllm:kv_cache_usage_perc gauge", f'vllm:kv_cache_usage_perc{{model_name="m"}} {self.running / 64}',
            "# TYPE vllm:prefix_cache_queries counter",
            f'vllm:prefix_cache_queries_total{{model_name="m"}} {sum(r.prompt_tokens for r in self.records)}',
            "# TYPE vllm:prefix_cache_hits counter",
            f'vllm:prefix_cache_hits_total{{model_name="m"}} {sum(r.cached_tokens for r in self.records)}',
            "# TYPE vllm:num_preemptions counter", 'vllm:num_preemptions_total{model_name="m"} 0',
            "# TYPE vllm:generation_tokens counter",
            f'vllm:generation_tokens_total{{model_name="m"}} {sum(sum(r.tokens) for r in done)}',
            'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3',
        ]
        return "\n".join(lines) + "\n"

    def cache(self, words: list[str]) -> int:
        """Words of `words` found in the block prefix cache; the prompt's blocks are cached after."""
        size = self.config.cache_block
        hit = 0
        for end in range(size, len(words) + 1, size):
            key = tuple(words[:end])
            if key in self.blocks and hit == end - size:
                hit = end
            self.blocks.add(key)
        return hit

    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"


async def _handle(server: FakeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            received = time.perf_counter()
            keep = await _respond(server, writer, method, path, headers, body, received)
            if not keep:
                return
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _respond(server: FakeServer, writer: asyncio.StreamWriter, method: str, path: str,
                   headers: dict[str, str], body: bytes, received: float) -> bool:
    if method == "GET" and path == "/_records":
        return await _plain(writer, 200, [asdict(r) for r in server.records])
    if method == "GET" and path.split("?", 1)[0] in ("/v1/models", "/models"):  # peers check the server first
        return await _plain(writer, 200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    if method == "GET" and path == "/health":
        return await _plain(writer, 200, {"status": "ok"})
    if method == "GET" and path == "/metrics":
        server.scrapes += 1
        server.scrape_auth.append(headers.get("authorization"))
        page = server.config.metrics_page
        return await _text(writer, server.metrics_text() if page is None else page, server.config.metrics_status)
    route = path.split("?", 1)[0]
    if method == "POST" and route == "/v1/images/generations":
        return await _images(server, writer, json.loads(body), path, received)
    if method != "POST" or route not in ("/v1/chat/completions", "/v1/completions"):
        return await _plain(writer, 404, {"error": f"no route {method} {route}"})
    if server.config.max_running is not None:
        if server.gate is None:
            server.gate = asyncio.Semaphore(server.config.max_running)
        async with server.gate:
            return await _running(server, writer, path, headers, body, received, route)
    return await _running(server, writer, path, headers, body, received, route)


async def _running(server: FakeServer, writer: asyncio.StreamWriter, path: str, headers: dict[str, str],
                   body: bytes, received: float, route: str) -> bool:
    server.running += 1
    try:  # the injected delays run from now: a request that waited for a slot starts late, as on a full server
        return await _complete(server, writer, path, headers, body, received, route, time.perf_counter())
    finally:
        server.running -= 1


async def _complete(server: FakeServer, writer: asyncio.StreamWriter, path: str, headers: dict[str, str],
                    body: bytes, received: float, route: str, started: float) -> bool:
    cfg = server.config
    method = "POST"
    req = json.loads(body)
    server.seen.append({"path": route, "target": path, "body": req, "authorization": headers.get("authorization")})
    chat = route.endswith("chat/completions")
    prompt = _message_text(req["messages"][-1]["content"]) if chat else req["prompt"]
    whole = " ".join(_message_text(m["content"]) for m in req["messages"]) if chat else req["prompt"]
    served = Served(prompt, path, received, prompt_tokens=len(whole.split()))
    if cfg.prefix_cache:
        served.cached_tokens = server.cache(whole.split())
    server.records.append(served)
    if cfg.api_key and headers.get("authorization") != f"Bearer {cfg.api_key}":
        return await _refuse(writer, served, 401, "bad key")
    if cfg.reject_extras and ("ignore_eos" in req or "min_tokens" in req):
        return await _refuse(writer, served, cfg.reject_status, "unknown field ignore_eos")
    fault = prompt.split("FAULT=", 1)[1].split()[0] if "FAULT=" in prompt else None
    if fault == "500":
        return await _refuse(writer, served, 500, "injected failure")
    if fault == "hang":
        await asyncio.sleep(3600)
    if fault == "echo":
        echoed = {"error": {"message": f"cannot serve {method} {path}", "headers": headers}}
        return await _refuse(writer, served, 500, json.dumps(echoed))
    if fault == "endless500":
        writer.write(b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        block = b"%x\r\n%s\r\n" % (65536, b"E" * 65536)
        for _ in range(8192):  # 512 MiB at most, whatever the client does
            writer.write(block)
            await writer.drain()
        return False
    n = int(req.get("max_tokens", 16))
    sent = n if cfg.stop_after is None else min(n, cfg.stop_after)
    completion = sent if cfg.usage_completion is None else cfg.usage_completion
    usage: dict[str, Any] = {"prompt_tokens": served.prompt_tokens, "completion_tokens": completion,
                             "total_tokens": served.prompt_tokens + sent}
    if cfg.prefix_cache:
        usage["prompt_tokens_details"] = {"cached_tokens": served.cached_tokens}
    # Deadlines on the loop's clock (what asyncio.sleep counts in), from the moment the body was read.
    arrived = asyncio.get_running_loop().time() - (time.perf_counter() - started)
    arrived += cfg.prefill_s_per_token * (served.prompt_tokens - served.cached_tokens)  # prefill of what was not cached
    if not req.get("stream"):
        await _until(arrived + cfg.ttft_s + (sent - 1) * cfg.token_delay_s)
        text = "tok " * sent
        message: Any = text if fault == "string_delta" else {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message} if chat else {"index": 0, "text": text}
        keep = await _plain(writer, 200, {"id": "x", "choices": [choice], "usage": usage}, served, sent)
        served.end_s = time.perf_counter()
        return keep
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    if fault == "headers_then_hang":
        await writer.drain()
        await asyncio.sleep(3600)
    if chat:  # a role-only first chunk: no content, so it must not start the clock
        _event(writer, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, chat=chat)
    if fault == "string_delta":  # a string where the delta object should be: no content, no crash
        _event(writer, {"choices": [{"index": 0, "delta": "tok "}]}, chat=chat)
    if fault == "hugeline":
        _chunk(writer, b"data: " + b"x" * (3 << 20) + b"\n\n")
    k = 0
    while k < sent:
        take = min(cfg.tokens_per_chunk, sent - k)
        await _until(arrived + cfg.ttft_s + (k + take - 1) * cfg.token_delay_s)
        text = "tok " * take
        _event(writer, {"choices": [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]},
               served, take, chat=chat)
        k += take
        if fault == "drop":
            await writer.drain()
            writer.transport.abort()
            return False
        if fault == "stall":
            await writer.drain()
            await asyncio.sleep(3600)
        if fault == "malformed" and k == take:
            _chunk(writer, b"data: {not json\n\n")
    if (req.get("stream_options") or {}).get("include_usage") and not cfg.no_usage:
        _event(writer, {"choices": [], "usage": usage}, chat=chat)
    _chunk(writer, b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    served.end_s = time.perf_counter()
    return True


def _message_text(content: Any) -> str:
    """A message's text: a string, or OpenAI's list of parts (the peers send those)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


async def _until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _event(writer: asyncio.StreamWriter, obj: dict[str, Any], served: Served | None = None, tokens: int = 0, *,
           chat: bool = True) -> None:
    """One SSE event, with OpenAI's envelope (the peers dispatch on "object"); with `served`, a content
    write recorded there (`tokens` tokens)."""
    envelope = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0, "model": "m"}
    _chunk(writer, b"data: " + json.dumps(envelope | obj).encode() + b"\n\n", served, tokens)


def _chunk(writer: asyncio.StreamWriter, data: bytes, served: Served | None = None, tokens: int = 0) -> None:
    framed = b"%x\r\n%s\r\n" % (len(data), data)
    _stamp(served, tokens)
    writer.write(framed)


def _stamp(served: Served | None, tokens: int) -> None:
    """Record a content write; called after encoding and right before write(), so nothing runs in between."""
    if served is not None:
        served.writes_s.append(time.perf_counter())
        served.tokens.append(tokens)


async def _images(server: FakeServer, writer: asyncio.StreamWriter, req: dict[str, Any], path: str,
                  received: float) -> bool:
    """An image generation: `n` images, `image_delay_s` each, as base64 JSON."""
    served = Served(str(req.get("prompt", "")), path, received)
    server.records.append(served)
    n = int(req.get("n", 1)) if server.config.images_returned is None else server.config.images_returned
    await asyncio.sleep(server.config.image_delay_s * n)
    served.images = n
    image = base64.b64encode(b"\x89PNG" + bytes(2048)).decode()
    keep = await _plain(writer, 200, {"created": 0, "data": [{"b64_json": image} for _ in range(n)]}, served, 0)
    served.end_s = time.perf_counter()
    return keep


async def _text(writer: asyncio.StreamWriter, text: str, status: int = 200) -> bool:
    data = text.encode()
    writer.write(b"HTTP/1.1 %d OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n%s" % (
        status, len(data), data))
    await writer.drain()
    return True


async def _refuse(writer: asyncio.StreamWriter, served: Served, status: int, error: Any) -> bool:
    served.status = status
    keep = await _plain(writer, status, {"error": error})
    served.end_s = time.perf_counter()
    return keep


async def _plain(writer: asyncio.StreamWriter, status: int, obj: dict[str, Any] | list[Any],
                 served: Served | None = None, tokens: int = 0) -> bool:
    data = json.dumps(obj).encode()
    framed = b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status, len(data), data)
    _stamp(served, tokens)
    writer.write(framed)
    await writer.drain()
    return True


@contextlib.contextmanager
def serve_in_thread(config: FakeConfig | None = None, tls: ssl.SSLContext | None = None) -> Iterator[FakeServer]:
    """Run the server on 127.0.0.1 (a free port) in a background thread; stop it cleanly on exit.
    With `tls` (a server-side context) it speaks HTTPS."""
    server = FakeServer(config or FakeConfig(), tls=tls is not None)
    with asyncio_server_in_thread(lambda r, w: _handle(server, r, w), "fake-openai", ssl=tls) as port:
        server.port = port
        yield server


@dataclass(frozen=True)
class FakeProcess:
    """A fake server in its own process: its URL, and its records on demand."""

    url: str

    def records(self) -> list[Served]:
        """What the server did so far (`GET /_records`), times on the client's clock (CLOCK_MONOTONIC)."""
        import httpx  # here, not at the top: the server process itself never needs it

        resp = httpx.get(f"{self.url}/_records", timeout=10, trust_env=False)
        resp.raise_for_status()
        return [Served(**obj) for obj in resp.json()]


@contextlib.contextmanager
def serve_in_process(ttft_s: float, token_delay_s: float, *extra: str) -> Iterator[FakeProcess]:
    """Run the server in a subprocess (no GIL shared with the client, as a real server); always stop it.
    `extra`: more command-line options (--prefix-cache, --image-delay S)."""
    proc = subprocess.Popen([sys.executable, __file__, "--ttft", str(ttft_s), "--token-delay", str(token_delay_s),
                             *extra], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "PORT <n>" once it listens
        yield FakeProcess(f"http://127.0.0.1:{int(line.split()[1])}")
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttft", type=float, default=0.0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--prefix-cache", action="store_true")
    parser.add_argument("--image-delay", type=float, default=0.0)
    parser.add_argument("--prefill-per-token", type=float, default=0.0)
    parser.add_argument("--max-running", type=int, default=None)
    args = parser.parse_args()
    config = FakeConfig(args.ttft, args.token_delay, args.tokens_per_chunk, prefix_cache=args.prefix_cache,
                        image_delay_s=args.image_delay, prefill_s_per_token=args.prefill_per_token,
                        max_running=args.max_running)
    with serve_in_thread(config) as server:
        print(f"PORT {server.port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
