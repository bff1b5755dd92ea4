"""The load client's HTTP/1.1 wire (loadgen/wire.py) against raw servers: framing, keep-alive, errors.

Every response is read in pieces of every size (byte by byte included), so the parser's state across
reads is exercised, and the bytes the sink receives must be exactly the body the server framed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.loadgen.wire import Connection, Pool, Target, WireError


class Sink:
    def __init__(self) -> None:
        self.status: int | None = None
        self.data = b""

    def head(self, status: int, now: float) -> None:
        self.status = status

    def body(self, data: bytes, now: float) -> None:
        self.data += data


@contextlib.asynccontextmanager
async def server(replies: list[bytes], step: int) -> AsyncIterator[tuple[int, list[int]]]:
    """A server answering the n-th request on a connection with replies[n], `step` bytes a write, then
    closing it; it counts the connections it accepted."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            for reply in replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if
                                   ln.lower().startswith(b"content-length")), b"0"))
                await reader.readexactly(length)
                for i in range(0, len(reply), step):
                    writer.write(reply[i:i + step])
                    await writer.drain()
                    await asyncio.sleep(0)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], accepted
    finally:
        srv.close()


async def exchange(pool: Pool, sink: Sink) -> None:
    conn = await pool.acquire()
    _, done = conn.exchange(pool.target.request("POST", {"content-type": "application/json"}, b"{}"), sink)
    try:
        await asyncio.wait_for(done, 5)
    finally:
        pool.release(conn)


CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n"
           b"5\r\nworld\r\n0\r\nX-Trailer: 1\r\n\r\n")
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
@pytest.mark.parametrize("reply", [CHUNKED, LENGTH, b"HTTP/1.1 100 Continue\r\n\r\n" + LENGTH],
                         ids=["chunked", "length", "continue"])
def test_bodies_arrive_whole_whatever_the_reads_and_the_connection_is_kept(reply: bytes, step: int) -> None:
    async def main() -> None:
        async with server([reply, reply], step) as (port, accepted):
            pool = Pool(Target.parse(f"http://127.0.0.1:{port}/v1/chat/completions"), 5)
            for _ in range(2):
                sink = Sink()
                await exchange(pool, sink)
                assert (sink.status, sink.data) == (200, b"hello world")
            assert len(accepted) == 1, "a kept-alive connection carried both requests"
            pool.close()

    asyncio.run(main())


def test_connection_close_and_close_delimited_bodies_open_a_new_connection() -> None:
    reply = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"

    async def main() -> None:
        async with server([reply], 4) as (port, accepted):
            pool = Pool(Target.parse(f"http://127.0.0.1:{port}/v1/completions"), 5)
            for _ in range(2):
                sink = Sink()
                await exchange(pool, sink)
                assert sink.data == b"until the end"
            assert len(accepted) == 2
            pool.close()

    asyncio.run(main())


@pytest.mark.parametrize(("reply", "kind"), [
    (b"HELLO\r\n\r\n", "malformed_http"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed_http"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", "dropped_stream"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", "dropped_stream"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", "malformed_http"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "malformed_http"),
    (b"", "dropped_stream"),
    # sizes int(…, 16) would take but HTTP does not, each followed by exactly that many bytes
    *((b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n",
       "malformed_http") for size in (b"0x5", b"+5", b"0_5")),
])
def test_what_is_not_http_is_an_error_kind(reply: bytes, kind: str) -> None:
    async def main() -> None:
        async with server([reply], 1 << 20) as (port, _):
            pool = Pool(Target.parse(f"http://127.0.0.1:{port}/v1/completions"), 5)
            with pytest.raises(WireError) as caught:
                await exchange(pool, Sink())
            assert caught.value.kind == kind
            pool.close()

    asyncio.run(main())


def test_a_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        srv.close()
        await srv.wait_closed()
        with pytest.raises(WireError) as caught:
            await Pool(Target.parse(f"http://127.0.0.1:{port}/"), 5).connect()
        assert caught.value.kind == "connect"

    asyncio.run(main())


def test_the_request_is_one_write_with_its_host_and_length() -> None:
    target = Target.parse("https://[::1]:8443/v1/chat/completions?api-version=2")
    assert (target.host, target.port, target.tls, target.authority) == ("::1", 8443, True, "[::1]:8443")
    raw = target.request("POST", {"content-type": "application/json"}, b'{"a":1}')
    head, body = raw.split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1/chat/completions?api-version=2 HTTP/1.1"
    assert b"host: [::1]:8443" in head and b"content-length: 7" in head and body == b'{"a":1}'
    assert Target.parse("http://h/v1").authority == "h"


SIZE_SPELLINGS = st.sampled_from(["{:x}", "{:X}", "0{:x}", "{:x};ext=1", "{:x} "])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40) | st.sampled_from([b"\r\n", b"a\r\nb", b"\r"]),
                          SIZE_SPELLINGS), max_size=12),
       st.integers(min_value=1, max_value=64))
def test_chunked_bodies_arrive_exact_whatever_the_size_spelling_and_the_reads(
        chunks: list[tuple[bytes, str]], step: int) -> None:
    """Connection._whole_chunks checks every size of a read at once where they are lowercase hex and chunk by
    chunk otherwise: each spelling, data holding CRLFs, and reads of any size give the body the server framed."""
    body = b"".join(data for data, _ in chunks)
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
        spelling.format(len(data)).encode() + b"\r\n" + data + b"\r\n" for data, spelling in chunks) + b"0\r\n\r\n"

    async def main() -> None:
        conn = Connection()
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        sink = Sink()
        _, done = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", sink)
        for i in range(0, len(reply), step):
            conn.data_received(reply[i:i + step])
        await asyncio.wait_for(done, 1)
        assert (sink.data, conn.reusable) == (body, True)
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        sink = Sink()
        _, done = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", sink)
        conn.data_received(reply)  # the whole reply in one read: the all-at-once check
        await asyncio.wait_for(done, 1)
        assert sink.data == body

    asyncio.run(main())


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass
