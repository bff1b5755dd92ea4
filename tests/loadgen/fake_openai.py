"""A local OpenAI-compatible server with injected timing and faults, for the load tests.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE), so its own overhead is tiny and faults are exact:
* timing: the first content chunk leaves `ttft_s` after the request body arrived, token k at
  ttft_s + k·token_delay_s (absolute deadlines, so TPOT is exact on average); `tokens_per_chunk`
  tokens per SSE chunk; the output length is the request's max_tokens.
* faults, chosen by a marker in the prompt so they are deterministic: `FAULT=500` (HTTP 500),
  `FAULT=hang` (never answers), `FAULT=drop` (closes the connection after one content chunk),
  `FAULT=malformed` (one `data:` line that is not JSON).
* `reject_extras`: answer 400 to requests carrying ignore_eos/min_tokens (servers that forbid
  unknown fields); `seen` keeps every request's body and Authorization header for the tests.

Run standalone (for benchmarks): `python tests/loadgen/fake_openai.py --ttft 0 --token-delay 0`
prints `PORT <n>` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeConfig:
    ttft_s: float = 0.0
    token_delay_s: float = 0.0
    tokens_per_chunk: int = 1
    reject_extras: bool = False
    api_key: str | None = None  # when set, other keys get 401


@dataclass
class FakeServer:
    config: FakeConfig
    port: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


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
            arrived = asyncio.get_running_loop().time()
            keep = await _respond(server, writer, method, path, headers, body, arrived)
            if not keep:
                return
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _respond(server: FakeServer, writer: asyncio.StreamWriter, method: str, path: str,
                   headers: dict[str, str], body: bytes, arrived: float) -> bool:
    cfg = server.config
    if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
        return await _plain(writer, 404, {"error": f"no route {method} {path}"})
    req = json.loads(body)
    server.seen.append({"path": path, "body": req, "authorization": headers.get("authorization")})
    if cfg.api_key and headers.get("authorization") != f"Bearer {cfg.api_key}":
        return await _plain(writer, 401, {"error": "bad key"})
    if cfg.reject_extras and ("ignore_eos" in req or "min_tokens" in req):
        return await _plain(writer, 400, {"error": "unknown field ignore_eos"})
    chat = path.endswith("chat/completions")
    prompt = req["messages"][-1]["content"] if chat else req["prompt"]
    fault = prompt.split("FAULT=", 1)[1].split()[0] if "FAULT=" in prompt else None
    if fault == "500":
        return await _plain(writer, 500, {"error": "injected failure"})
    if fault == "hang":
        await asyncio.sleep(3600)
    n = int(req.get("max_tokens", 16))
    usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n, "total_tokens": len(prompt.split()) + n}
    if not req.get("stream"):
        await _until(arrived + cfg.ttft_s + (n - 1) * cfg.token_delay_s)
        text = "tok " * n
        choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
        return await _plain(writer, 200, {"id": "x", "choices": [choice], "usage": usage})
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    if chat:  # a role-only first chunk: no content, so it must not start the clock
        _event(writer, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    k = 0
    while k < n:
        take = min(cfg.tokens_per_chunk, n - k)
        await _until(arrived + cfg.ttft_s + (k + take - 1) * cfg.token_delay_s)
        text = "tok " * take
        _event(writer, {"choices": [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]})
        k += take
        if fault == "drop":
            await writer.drain()
            writer.transport.abort()
            return False
        if fault == "malformed" and k == take:
            _chunk(writer, b"data: {not json\n\n")
    if (req.get("stream_options") or {}).get("include_usage"):
        _event(writer, {"choices": [], "usage": usage})
    _chunk(writer, b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


async def _until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _event(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
    _chunk(writer, b"data: " + json.dumps(obj).encode() + b"\n\n")


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


async def _plain(writer: asyncio.StreamWriter, status: int, obj: dict[str, Any]) -> bool:
    data = json.dumps(obj).encode()
    writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (status, len(data), data))
    await writer.drain()
    return True


@contextlib.contextmanager
def serve_in_thread(config: FakeConfig | None = None) -> Iterator[FakeServer]:
    """Run the server on 127.0.0.1 (a free port) in a background thread; stop it cleanly on exit."""
    server = FakeServer(config or FakeConfig())
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    handlers: set[asyncio.Task[None]] = set()
    holder: dict[str, asyncio.Server] = {}

    async def start() -> None:
        async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                await _handle(server, r, w)
            finally:
                handlers.discard(task)

        srv = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        holder["srv"] = srv
        server.port = srv.sockets[0].getsockname()[1]
        ready.set()

    async def stop() -> None:
        holder["srv"].close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await holder["srv"].wait_closed()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()
        loop.run_until_complete(stop())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=main, name="fake-openai", daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttft", type=float, default=0.0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    args = parser.parse_args()
    with serve_in_thread(FakeConfig(args.ttft, args.token_delay, args.tokens_per_chunk)) as server:
        print(f"PORT {server.port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
