"""`gpuscout probe` against a local HTTP/1.1 server started in the test (127.0.0.1 only, bounded repeats)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from gpuscout import api
from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.loadgen.probe import exchange, open_connection, parse_target, probe
from gpuscout.report.probe import probe_table

DOWNLOAD_BYTES = 1024 * 1024
UPLOAD_BYTES = 256 * 1024
REPEATS = 5


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the handler closes
    # Headers and body go out in two writes; with Nagle on, the second waits for the client's
    # delayed ACK (~40 ms on Linux) and every kept-alive round trip measures that instead.
    # Real servers (uvicorn, vLLM, llama.cpp) set TCP_NODELAY too.
    disable_nagle_algorithm = True
    drop_after_response = False  # set on a subclass: close the socket after every response, unannounced
    uploads: ClassVar[list[int]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.drop_after_response:
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path == "/download":
            self._send(200, b"x" * DOWNLOAD_BYTES)
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/missing":
            self._send(404, b"no")
        else:
            self._send(200, b"ok")

    def do_POST(self) -> None:
        size = int(self.headers["Content-Length"])
        self.uploads.append(len(self.rfile.read(size)))
        self._send(200, b"ok")


class DroppingHandler(Handler):
    drop_after_response = True


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[str]:
    yield from _serve(Handler)


@pytest.fixture
def dropping_server() -> Iterator[str]:
    yield from _serve(DroppingHandler)


def run_probe(url: str, **options: Any) -> tuple[dict[str, Any], object]:
    """The library call the command makes, and the table it renders."""
    result = api.probe(url, **options)
    return result.model_dump(mode="json"), probe_table(result)


def test_probe_measures_everything(server: str) -> None:
    Handler.uploads = []
    payload, table = run_probe(f"{server}/", repeats=REPEATS, download_url=f"{server}/download",
                               upload_url=f"{server}/upload", upload_bytes=UPLOAD_BYTES)
    json.dumps(payload)  # the payload is plain JSON
    measures = {m["name"]: m for m in payload["measures"]}
    assert list(measures) == ["tcp_connect_s", "http_fresh_s", "http_keepalive_s", "download_bytes_per_s",
                              "upload_bytes_per_s", "reconnect_s"]
    for m in measures.values():
        assert m["errors"] == [] and len(m["samples"]) == REPEATS and m["summary"]["n"] == REPEATS
        assert 0 < m["summary"]["p50"] <= m["summary"]["p95"]
    for name in ("tcp_connect_s", "http_fresh_s", "http_keepalive_s", "reconnect_s"):
        assert measures[name]["summary"]["p95"] < 1.0  # loopback: well under a second
    assert measures["download_bytes_per_s"]["summary"]["p50"] > 1e6  # 1 MiB over loopback, > 1 MB/s
    assert Handler.uploads == [UPLOAD_BYTES] * REPEATS
    assert table is not None
    _report(measures)


def _report(measures: dict[str, dict[str, object]]) -> None:
    """Print the numbers (pytest -s shows them); the note for the lead quotes them."""
    for name, m in measures.items():
        summary = m["summary"]
        assert isinstance(summary, dict)
        print(f"{name}: p50 {summary['p50']:.6g} p95 {summary['p95']:.6g}")


def test_server_that_drops_every_connection_is_survived(dropping_server: str) -> None:
    payload, _ = run_probe(dropping_server, repeats=3)
    measures = {m["name"]: m for m in payload["measures"]}
    keepalive = measures["http_keepalive_s"]
    assert keepalive["errors"] == [] and len(keepalive["samples"]) == 3
    assert "reconnect" in keepalive["note"]
    assert len(measures["reconnect_s"]["samples"]) == 3


def test_failed_transfers_are_counted_not_fatal(server: str) -> None:
    payload, _ = run_probe(server, repeats=2, download_url=f"{server}/missing")
    download = next(m for m in payload["measures"] if m["name"] == "download_bytes_per_s")
    assert download["samples"] == [] and download["summary"] is None
    assert "HTTP 404" in download["errors"][0]


def test_chunked_body_is_read_whole(server: str) -> None:
    async def fetch() -> tuple[int, int]:
        target = parse_target(f"{server}/chunked")
        conn = await open_connection(target, 5.0)
        try:
            first = await exchange(conn, target, "GET")
            second = await exchange(conn, target, "GET")  # the connection is still usable after it
            assert first == second
            return first
        finally:
            conn.close()

    assert asyncio.run(fetch()) == (200, len(b"hello chunked world"))


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host/x", "http://", "http://host:99999/", "not a url"])
def test_malformed_url_is_a_spec_error(url: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_target(url)
    assert "fix" in info.value.render().lower()


def test_defaults_and_bad_repeats() -> None:
    target = parse_target("https://example.com")
    assert (target.port, target.path) == (443, "/")
    assert parse_target("http://[::1]:81/a?b=1").path == "/a?b=1"
    with pytest.raises(SpecError):
        asyncio.run(probe("http://127.0.0.1:1/", repeats=0))


def test_nothing_listening_says_so() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(GpuscoutError, match=f"Cannot connect to 127.0.0.1:{port}"):
        run_probe(f"http://127.0.0.1:{port}/", repeats=2, timeout_s=2.0)
