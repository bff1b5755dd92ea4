"""An asyncio server on 127.0.0.1 in a background thread, shared by the test servers (`fake_openai`,
`garbage_server`): a free port, every connection's handler cancelled and awaited on exit."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.contextmanager
def asyncio_server_in_thread(handle: Handler, name: str, **options: Any) -> Iterator[int]:
    """Serve `handle` on a free port of 127.0.0.1 from its own event loop and thread; yields the port.
    `options` go to `asyncio.start_server` (ssl, limit)."""
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
                await handle(r, w)
            finally:
                handlers.discard(task)

        holder["srv"] = await asyncio.start_server(on_connect, "127.0.0.1", 0, **options)
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

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield holder["srv"].sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
