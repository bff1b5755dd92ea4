"""A streaming chat server that also records when the kernel received each request (SO_TIMESTAMPNS).

tests/loadgen/fake_openai.py stamps a request when its event loop has parsed it, so a request that
waits in the socket buffer while the loop is busy shows that wait in the client's "request leg".
At concurrency 64 with equal output lengths, 64 requests arrive together and that wait is most of
the leg (benchmarks/RESULTS.md). This server asks Linux for the receive time of each request's bytes
(`SO_TIMESTAMPNS` on the TCP socket, read with `recvmsg`): the time the bytes reached the socket, a
clock the kernel keeps, before any queue of the server's own. Linux only.

It is one thread on `selectors`: per request, the first token `--ttft` after the request is parsed,
then a token every `--token-delay`, `max_tokens` tokens, as SSE chunks in chunked encoding
(vLLM's shapes), then usage and `[DONE]`. `GET /_records` returns, per request, the prompt (the
first message's content), `kernel_s` (receive time), `received_s` (parsed) and `writes_s` (each
chunk written), all on `time.perf_counter()`: CLOCK_MONOTONIC, one clock for the host's processes.

Run: `python benchmarks/stamping_server.py --ttft 0.05 --token-delay 0.01` prints `PORT <n>`, then
serves until killed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import re
import selectors
import socket
import struct
import time
from dataclasses import dataclass, field

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python does not export it
ANCILLARY = socket.CMSG_SPACE(16)  # one struct timespec
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)


@dataclass
class Record:
    prompt: str
    kernel_s: float
    received_s: float
    writes_s: list[float] = field(default_factory=list)


@dataclass
class Conn:
    sock: socket.socket
    buf: bytearray = field(default_factory=bytearray)
    out: bytearray = field(default_factory=bytearray)
    kernel_s: float = 0.0  # receive time of the newest bytes read, on perf_counter


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(obj: object) -> bytes:
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Server:
    def __init__(self, ttft_s: float, token_s: float) -> None:
        self.ttft_s, self.token_s = ttft_s, token_s
        self.sel = selectors.DefaultSelector()
        self.timers: list[tuple[float, int, Conn, Record, int, int]] = []  # (due, seq, conn, record, i, n)
        self.seq = 0
        self.records: list[Record] = []

    def listen(self) -> int:
        lsock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        lsock.setblocking(False)
        self.sel.register(lsock, selectors.EVENT_READ, None)
        return int(lsock.getsockname()[1])

    def serve(self) -> None:
        while True:
            timeout = max(0.0, self.timers[0][0] - time.perf_counter()) if self.timers else None
            for key, mask in self.sel.select(timeout):
                if key.data is None:
                    self.accept(key.fileobj)  # type: ignore[arg-type]
                elif mask & selectors.EVENT_READ:
                    self.read(key.data)
                if key.data is not None and mask & selectors.EVENT_WRITE:
                    self.flush(key.data)
            now = time.perf_counter()
            while self.timers and self.timers[0][0] <= now:
                _, _, conn, record, i, n = heapq.heappop(self.timers)
                self.token(conn, record, i, n)

    def accept(self, lsock: socket.socket) -> None:
        sock, _ = lsock.accept()
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sel.register(sock, selectors.EVENT_READ, Conn(sock))

    def read(self, conn: Conn) -> None:
        try:
            data, ancillary, _, _ = conn.sock.recvmsg(1 << 16, ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(conn.sock)
            conn.sock.close()
            return
        # The kernel's receive time is on CLOCK_REALTIME: moved to perf_counter by the two clocks' offset read
        # now, so a slewing wall clock costs nothing over the run.
        offset = time.time() - time.perf_counter()
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                conn.kernel_s = sec + nsec / 1e9 - offset
        conn.buf += data
        self.requests(conn)

    def requests(self, conn: Conn) -> None:
        while (end := conn.buf.find(b"\r\n\r\n")) >= 0:
            head = bytes(conn.buf[:end])
            length = _LENGTH.search(head)
            size = int(length.group(1)) if length else 0
            if len(conn.buf) < end + 4 + size:
                return
            body = bytes(conn.buf[end + 4:end + 4 + size])
            del conn.buf[:end + 4 + size]
            received = time.perf_counter()
            if head.startswith(b"GET /_records"):
                self.send(conn, self.answer([r.__dict__ for r in self.records]))
                continue
            request = json.loads(body)
            record = Record(str(request["messages"][0]["content"]), conn.kernel_s, received)
            self.records.append(record)
            self.send(conn, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            self.later(received + self.ttft_s, conn, record, 0, int(request.get("max_tokens", 16)))

    def answer(self, obj: object) -> bytes:
        body = json.dumps(obj).encode()
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    def later(self, due: float, conn: Conn, record: Record, i: int, n: int) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (due, self.seq, conn, record, i, n))

    def token(self, conn: Conn, record: Record, i: int, n: int) -> None:
        delta = {"role": "assistant", "content": "tok "} if i == 0 else {"content": "tok "}
        data = event({"id": "c", "object": "chat.completion.chunk", "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        if i + 1 == n:
            data += event({"id": "c", "choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": n,
                                                              "total_tokens": 16 + n}})
            data += chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        record.writes_s.append(time.perf_counter())
        self.send(conn, data)
        if i + 1 < n:
            self.later(record.received_s + self.ttft_s + (i + 1) * self.token_s, conn, record, i + 1, n)

    def send(self, conn: Conn, data: bytes) -> None:
        if conn.sock.fileno() < 0:
            return
        conn.out += data
        self.flush(conn)

    def flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            conn.out.clear()
            return
        del conn.out[:sent]
        self.sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0), conn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--token-delay", type=float, default=0.01)
    args = ap.parse_args()
    server = Server(args.ttft, args.token_delay)
    print(f"PORT {server.listen()}", flush=True)
    server.serve()


if __name__ == "__main__":
    main()
