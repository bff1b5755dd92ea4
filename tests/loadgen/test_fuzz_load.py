"""Fault injection, bounded: generated garbage into the SSE parser and from a server into the load client.

The only outcomes allowed are a result (errors counted by kind, every number finite) or a clean
GpuscoutError. `benchmarks/fuzz_load.py` runs the long version: 1,000+ whole `load` runs against
tests/loadgen/garbage_server.py, counting crashes, hangs and silent nonsense.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from garbage_server import ODD_CHUNKS, GarbageServer, Request, serve_in_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscout.errors import GpuscoutError
from gpuscout.loadgen import sse
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.sse import (
    LineSplitter,
    MalformedSseError,
    OversizeLineError,
    SseEvent,
    parse_line,
    parse_lines,
    parse_object,
    parse_payload,
    parse_payloads,
    parse_read,
    read_usage,
)
from gpuscout.loadgen.workload import Prompt, Workload

FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
KNOWN_KINDS = re.compile(r"^(http_\d{3}|timeout|connect|dropped_stream|malformed_http|malformed_sse|malformed_response|"
                         r"stream_error|oversize_line|oversize_body|http|cancelled_at_deadline)$")
KEYS = st.sampled_from(["choices", "delta", "message", "content", "text", "usage", "error", "reasoning_content",
                        "completion_tokens", "prompt_tokens", "completion_tokens_details", "reasoning_tokens",
                        "role", "index", "x", "reasoning", "timings", "predicted_n", "prompt_n", "cache_n"])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(max_size=5), inner,
                                                                                max_size=5),
                    max_leaves=25)


# ------------------------------------------------------------------------------------ the parser

@FUZZ
@given(st.binary(max_size=300) | st.builds(lambda b: b"data: " + b, st.binary(max_size=300)))
def test_parse_line_takes_any_bytes(line: bytes) -> None:
    try:
        event = parse_line(line, chat=True)
    except MalformedSseError:
        return
    assert isinstance(event, SseEvent) and (event.text is None or isinstance(event.text, str))


CHUNKISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                        max_leaves=20)
OPENAI_CHUNK = st.builds(lambda delta, extra: {"choices": [{"index": 0, "delta": delta}], **extra},
                         st.dictionaries(KEYS, CHUNKISH, max_size=3), st.dictionaries(KEYS, CHUNKISH, max_size=2))


@FUZZ
@given(st.dictionaries(KEYS, CHUNKISH, max_size=5) | OPENAI_CHUNK, st.booleans(),
       st.sampled_from([None, 2**70, "\ud800", float("nan")]))
def test_the_fast_parse_reads_every_chunk_as_the_general_path_does(obj: dict[str, Any], chat: bool,
                                                                  odd: object) -> None:
    """msgspec reads the fields OpenAI's types allow; whatever it refuses goes to json.loads + parse_object.
    Either way the event must be the one the general path gives (repr: NaN is not equal to itself)."""
    if odd is not None:
        obj = {**obj, "usage": {"completion_tokens": odd}}
    line = b"data: " + json.dumps(obj).encode()
    assert repr(parse_line(line, chat=chat)) == repr(parse_object(json.loads(line[6:]), chat=chat, delta=True))


PAYLOAD = (st.builds(lambda o: json.dumps(o).encode(), st.dictionaries(KEYS, CHUNKISH, max_size=4) | OPENAI_CHUNK)
           | st.sampled_from([b'{"a":[', b'1]}', b'{}{}', b'{"a":"}', b'{"}', b'{', b'}', b'{} x', b'{"x":NaN}',
                              b'{"choices":[{"delta":{"content":"\xff"}}]}', b'{"a":[{}', b'{}]}', b'[]']))


@FUZZ
@given(st.lists(PAYLOAD, max_size=8), st.booleans())
def test_a_read_of_many_payloads_gives_what_each_gives_alone(payloads: list[bytes], chat: bool) -> None:
    """One decode over a read's payloads (sse.parse_payloads) against one parse each: the same events in the
    same order and the same malformed count, for real chunks and for pieces of objects built to merge."""
    assert repr(parse_payloads(payloads, chat=chat)) == repr(one_by_one(payloads, parse_payload, chat))


def one_by_one(items: list[bytes], parse: Callable[..., SseEvent], chat: bool) -> sse.Read:
    """What a read's payloads or lines give parsed one at a time: the reference the batch parsers must match."""
    texts, usage, errors, bad = [], None, [], 0
    for item in items:
        try:
            event = parse(item, chat=chat)
        except MalformedSseError:
            bad += 1
            continue
        texts += [event.text] if event.text else []
        usage = event.usage if event.usage is not None else usage
        errors += [event.error] if event.error else []
    return sse.Read(texts, usage, errors, bad)


LINE = (st.builds(lambda p: b"data: " + p, PAYLOAD)
        | st.sampled_from([b"", b"\r", b"data: [DONE]", b"data:[DONE]", b": keep-alive", b"event: x", b"data:",
                           b"data: {} ", b"data:{}", b"data:  {}", b"data: {}\r", b"id: 1", b"data: {}}",
                           b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}"]))


@FUZZ
@given(st.lists(LINE, max_size=10), st.booleans())
def test_a_read_of_many_lines_gives_what_each_line_gives_alone(lines: list[bytes], chat: bool) -> None:
    """sse.parse_lines (one count-and-replace over a read's lines when they look like what servers send)
    against parse_line on each: the same events in the same order and the same malformed count."""
    assert repr(parse_lines(lines, chat=chat)) == repr(one_by_one(lines, parse_line, chat))


@FUZZ
@given(st.lists(st.tuples(LINE, st.sampled_from([b"\n\n", b"\n", b"\r\n\r\n", b""])), max_size=8), st.booleans(),
       st.binary(max_size=3))
def test_a_whole_read_gives_what_its_lines_give(events: list[tuple[bytes, bytes]], chat: bool, pending: bytes) -> None:
    """sse.parse_read (one count-and-replace over a read of whole `data: {…}` events) against splitting the
    read into lines first: the same events, and the same line left pending for the next read."""
    data = b"".join(line + end for line, end in events)
    fast, slow = LineSplitter(), LineSplitter()
    if pending:  # a line begun by the read before
        fast.feed(pending)
        slow.feed(pending)
    try:
        expected = parse_lines(slow.feed(data), chat=chat)
    except OversizeLineError:
        return
    assert repr(parse_read(fast, data, chat=chat)) == repr(expected)
    assert fast.feed(b"\n") == slow.feed(b"\n")


def test_a_read_of_whole_events_is_counted_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"".join(b"data: " + chunk + b"\n\n" for chunk in REAL_CHUNKS[1:4]) + b"data: [DONE]\n\n"
    assert sse._whole_events(data) == (b"\n".join(REAL_CHUNKS[1:4]), 3)
    assert sse._whole_events(b"data: [DONE]\n\n") == (b"", 0)
    for odd in (data[:-1], b"data: {}\n" + data, b": ping\n\n" + data, data.replace(b"data: {", b"data:{", 1),
                b"data: {}\n\nx}\n\n", b"data: {} \n\n", b"data: {}\r\n\r\n",
                b"data: {}\n\nab",  # a line still to come: whole events decode, but "ab" must stay pending
                b'data: {"a":[\n\ndata: {}]} {}\n\n'):  # two objects across two lines, each line malformed
        assert sse._whole_events(odd) is None, odd
    monkeypatch.setattr(LineSplitter, "feed", None)  # the fast path never splits
    assert parse_read(LineSplitter(), data, chat=True).texts == [" tok", "think"]


def test_what_servers_send_takes_the_one_buffer_path() -> None:
    lines = [b"data: " + REAL_CHUNKS[1], b"", b"data: " + REAL_CHUNKS[3], b"", b"data: [DONE]", b""]
    assert sse._canonical(lines) == (b"\n" + REAL_CHUNKS[1] + b"\n" + REAL_CHUNKS[3], 2)
    for odd in (b": keep-alive", b"data:" + REAL_CHUNKS[1], b"data: [DONE]", b"data: {} x", b"\r"):
        assert sse._canonical([*lines[:2], odd, *lines[2:]]) is None, odd
    assert sse._canonical([b'data: {"a":[', b'data: {}]} {}']) is None  # one object across two lines


# What real servers stream (shapes from vLLM, SGLang, TGI and llama.cpp's server): all on the fast path.
REAL_CHUNKS = (
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
    b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null,'
    b'"stop_reason":null}],"usage":null}',
    b'{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think","content":null}}]}',
    b'{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}',
    b'{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1,"id":"c","model":"m",'
    b'"object":"chat.completion.chunk","timings":{"prompt_n":4,"cache_n":60,"predicted_n":16}}',
)


@pytest.mark.parametrize("payload", REAL_CHUNKS)
def test_real_servers_chunks_take_the_fast_path(payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = parse_object(json.loads(payload), chat=True, delta=True)

    def refused(*_: object) -> None:
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(sse, "_general", refused)
    assert parse_line(b"data: " + payload, chat=True) == expected


@FUZZ
@given(JSON, st.booleans(), st.booleans())
def test_parse_object_and_read_usage_take_any_json(obj: Any, chat: bool, delta: bool) -> None:
    event = parse_object(obj, chat=chat, delta=delta)
    assert event.text is None or isinstance(event.text, str)
    assert event.error is None or isinstance(event.error, str)
    usage = read_usage(event.usage)
    for n in (usage.completion, usage.prompt):
        assert n is None or (isinstance(n, int) and n >= 0)
    usage = read_usage(obj)
    assert usage.completion is None or usage.completion >= 0


@FUZZ
@given(st.lists(st.binary(max_size=40) | st.sampled_from([b"\n", b"\r\n", b"data: x\n"]), max_size=40),
       st.integers(min_value=1, max_value=64))
def test_line_splitter_matches_split_or_refuses_a_long_line(pieces: list[bytes], cap: int) -> None:
    splitter = LineSplitter(cap=cap)
    got: list[bytes] = []
    whole = b"".join(pieces)
    expected = whole.split(b"\n")
    tail = expected.pop()
    try:
        for piece in pieces:
            got += splitter.feed(piece)
    except OversizeLineError:
        assert any(len(line) > cap for line in [*expected, tail])
        return
    assert got == expected and all(len(line) <= cap for line in got)


# ------------------------------------------------------------------------------------ the client

PIECE = st.one_of(
    st.sampled_from(ODD_CHUNKS).map(lambda o: b"data: " + json.dumps(o).encode() + b"\n\n"),
    st.just(b'data: {"choices": [{"delta": {"content": "tok "}, "text": "tok "}]}\n\n'),
    JSON.map(lambda u: b'data: {"choices": [], "usage": {"completion_tokens": ' + json.dumps(u).encode() + b"}}\n\n"),
    st.binary(max_size=120),
    st.sampled_from([b"data: [DONE]\n\n", b": keep-alive\n", b"event: x\n", b"\r\n", b"data:\n", b"data: {\n",
                     b"data: " + b"[" * 5000 + b"\n", b"data: " + b"x" * ((1 << 20) + 10) + b"\n"]),
)
STATUS = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 500 Err",
                          b"HTTP/1.1 429 Slow", b"HTTP/1.1 400 Bad", b"HTTP/1.0 200 OK", b"HTTP/1.1 999 X",
                          b"HTTP/1.1 204 No", b"GARBAGE", b""])
FRAMING = st.sampled_from(["chunked", "length", "close", "length_too_long", "bad_chunk"])


def response(status: bytes, framing: str, body: bytes) -> bytes:
    if framing == "chunked":
        return status + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) \
            if body else status + b"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    if framing == "length":
        return status + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    if framing == "length_too_long":
        return status + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body) + 100, body)
    if framing == "bad_chunk":
        return status + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + body
    return status + b"\r\nConnection: close\r\n\r\n" + body


@pytest.fixture(scope="module")
def garbage() -> Iterator[GarbageServer]:
    with serve_in_thread() as server:
        yield server


@FUZZ
@given(STATUS, FRAMING, st.lists(PIECE, max_size=12).map(b"".join), st.booleans(), st.booleans())
def test_the_client_survives_any_stream(garbage: GarbageServer, status: bytes, framing: str, body: bytes,
                                        stream: bool, chat: bool) -> None:
    reply = response(status, framing, body)

    def respond(req: Request) -> bytes:
        return reply

    garbage.responder = respond
    work = Workload(prompts=(Prompt(text="fz", prompt_tokens=1, output_tokens=8),), source="synthetic", seed=0,
                    tokenizer=None, description="fuzz")
    start = time.perf_counter()
    try:
        run = run_load_sync(garbage.url, "m", work, LoadShape(kind="concurrency", concurrency=1, requests=2),
                            endpoint="chat" if chat else "completions", stream=stream, timeout_s=2)
    except GpuscoutError:
        return
    assert time.perf_counter() - start < 15
    for record in run.records:
        if record.error is not None:
            assert KNOWN_KINDS.match(record.error.split(":", 1)[0]), record.error
    case = summarize_load(run, slo=None, percentile_needed=50)
    for m in case.metrics:
        assert all(math.isfinite(v) for v in (m.value, *m.samples)), m.name
    throughput = {m.name: m.value for m in case.metrics}["output_tokens_per_s"]
    assert throughput >= 0 and ("valid" not in case.notes or throughput > 0)
