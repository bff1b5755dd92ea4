"""Server-sent events of an OpenAI-compatible stream: split bytes into lines, read one `data:` line.

Cheap on purpose (the client must not become the bottleneck, docs/measurement.md §5): a read of whole
`data: {…}` events, what servers write, is recognised by counting and turned into one buffer of payloads
by one replace (`parse_read`); other reads are split on newlines without decoding (`parse_lines`). The
payloads are decoded by one msgspec call into the few fields the client reads (text, usage, error),
skipping the rest unbuilt: 37 µs for a 32-token response where a standard-library parse of each event
took 198 µs. A payload that does not fit those fields' types (any JSON shape may come) is read again by
the general path, `json.loads`'s own scanner and `parse_object`, which decides; so the event is the same
either way (tests/loadgen/test_fuzz_load.py checks it on generated JSON).

Only choices with non-empty text count as content (vLLM counts any non-empty `choices`, LLMPerf
only non-empty content; gpuscout follows LLMPerf so role-only and usage-only chunks never start or
extend the clock).

Hostile input never raises anything but `MalformedSseError` / `OversizeLineError` (docs/measurement.md
§2.5): any JSON shape is read (a `delta` or `message` that is not an object, or content that is not
a string, carries no content: an OpenAI client reading `delta.content` would find none either);
lines are assembled in linear time and capped at `MAX_LINE_BYTES`; `usage` numbers are checked by
`read_usage` once per request, not per chunk.
"""

from __future__ import annotations

import json
import json.scanner
import math
from typing import Any, NamedTuple

import msgspec

MAX_LINE_BYTES = 1 << 20  # one SSE line; a real chunk is a few hundred bytes (a few KiB with logprobs)
# The general path: json.loads's C scanner without the wrappers around it (the same parser, NaN and
# Infinity included), for the payloads msgspec's typed decode refuses.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: a decoder is what it takes


class SseEvent(NamedTuple):
    text: str | None  # content of this chunk; None/"" when it carries none
    usage: object | None  # the raw `usage` value when present (read_usage checks it)
    done: bool  # the `[DONE]` sentinel
    error: str | None  # an error object sent inside the stream


EMPTY = SseEvent(None, None, False, None)
DONE = SseEvent(None, None, True, None)


_ABSENT = msgspec.Raw(b"")
_NULL = msgspec.Raw(b"null")


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: str | None = None


class _Chunk(msgspec.Struct):
    """The fields of a stream chunk the client reads; the rest of the object is skipped, not built. usage,
    timings and error stay raw JSON: one chunk a request carries them, and `json.loads` reads them as the
    general path would (numbers of any size, the same objects)."""

    choices: list[_Choice] | None = None
    usage: msgspec.Raw = _ABSENT
    timings: msgspec.Raw = _ABSENT
    error: msgspec.Raw = _ABSENT


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_any = msgspec.json.Decoder().decode
_decode_chunks = msgspec.json.Decoder(_Chunk).decode_lines  # whitespace-separated objects, in order


class MalformedSseError(ValueError):
    """A `data:` line whose payload is not a JSON object."""


class OversizeLineError(ValueError):
    """A line longer than the cap: the server is not sending SSE chunks (or is hostile)."""


class LineSplitter:
    """Complete lines of a byte stream, fed read by read: linear time, at most `cap` bytes buffered.

    A line that spans reads is appended to one buffer and only the new bytes are searched for the
    newline, so a long line costs its length once (re-joining `pending + data` on every read, as
    before, cost its length squared over the read size). The common case, reads holding whole
    lines, is one `bytes.split`.
    """

    __slots__ = ("_partial", "cap")

    def __init__(self, cap: int = MAX_LINE_BYTES) -> None:
        self._partial = bytearray()
        self.cap = cap

    @property
    def idle(self) -> bool:
        """No line is pending: the next read starts a line."""
        return not self._partial

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` completes (without their b"\\n"); raises OversizeLineError past the cap."""
        if self._partial:
            cut = data.find(b"\n")
            if cut < 0:
                if len(self._partial) + len(data) > self.cap:
                    raise OversizeLineError(f"an SSE line passed {self.cap} bytes")
                self._partial += data
                return []
            self._partial += data[:cut]
            first = bytes(self._partial)
            self._partial.clear()
            if len(first) > self.cap:
                raise OversizeLineError(f"an SSE line passed {self.cap} bytes")
            lines = data[cut + 1:].split(b"\n")
            lines[0:0] = [first]
        else:
            lines = data.split(b"\n")
        rest = lines.pop()
        if len(data) > self.cap and any(len(line) > self.cap for line in lines):
            raise OversizeLineError(f"an SSE line passed {self.cap} bytes")
        if rest:
            if len(rest) > self.cap:
                raise OversizeLineError(f"an SSE line passed {self.cap} bytes")
            self._partial += rest
        return lines


def parse_line(line: bytes, *, chat: bool) -> SseEvent:
    """One SSE line (a trailing CR is whitespace here) → event. Comments, `event:` lines and blank separators
    carry nothing."""
    if not line.startswith(b"data:"):
        return EMPTY
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return DONE
    return parse_payload(payload, chat=chat)


def parse_payload(payload: bytes, *, chat: bool) -> SseEvent:
    """One `data:` payload (stripped, not `[DONE]`) → event; raises MalformedSseError."""
    try:
        text = payload.decode()  # strict UTF-8, as json.loads: the fast path may not accept more
    except ValueError:
        raise MalformedSseError(payload[:80].decode("utf-8", "replace")) from None
    try:
        return _event(_decode_chunk(text), chat)
    except (ValueError, RecursionError):  # msgspec.DecodeError and ValidationError are ValueErrors
        return _general(text, payload, chat)


class Read(NamedTuple):
    """What one read's payloads carried: texts of the content events in order, the last `usage` (None when
    none), the error texts sent inside the stream, and how many payloads were malformed."""

    texts: list[str]
    usage: object | None
    errors: list[str]
    malformed: int


def parse_read(splitter: LineSplitter, data: bytes, *, chat: bool) -> Read:
    """The events one read of a stream completes, its lines split by `splitter`; as `parse_lines` gives them.

    A read of whole `data: {…}` events (and a last `data: [DONE]`), what servers write, is checked by counting
    and made one payload buffer by one replace, without splitting it into lines (`_whole_events`)."""
    if splitter.idle and len(data) <= splitter.cap:
        whole = _whole_events(data)
        if whole is not None:
            read = _decoded(*whole, chat) if whole[1] else Read([], None, [], 0)
            if read is not None:
                return read
    return parse_lines(splitter.feed(data), chat=chat)


_DONE_EVENT = b"data: [DONE]\n\n"
_BETWEEN = b"}\n\ndata: {"  # one event's end, the blank line, the next one's start


def _whole_events(data: bytes) -> tuple[bytes, int] | None:
    """The payloads of a read made only of `data: {…}\\n\\n` events (a last `data: [DONE]` left out),
    newline-separated, and how many; else None.

    The read starts with "data: {" and ends with "}\\n\\n"; if it holds 2E newlines and the replace shrinks
    it by E − 1 separators "}\\n\\ndata: {" (non-overlapping, two newlines each), every newline is in one of
    them or at the end: E lines `data: {…}`, each followed by a blank line, and nothing else. Two scans
    (a count, a replace), where counting each part took four: 11 → 6 µs for a 32-token response."""
    if data.endswith(_DONE_EVENT):
        data = data[:-len(_DONE_EVENT)]
        if not data:
            return b"", 0
    if not (data.startswith(b"data: {") and data.endswith(b"}\n\n")):
        return None
    newlines = data.count(b"\n")
    body = data[6:-2]
    blob = body.replace(_BETWEEN, b"}\n{")
    events = newlines // 2
    if newlines % 2 or len(body) - len(blob) != (len(_BETWEEN) - 3) * (events - 1):
        return None
    return blob, events


def parse_lines(lines: list[bytes], *, chat: bool) -> Read:
    """The events of one read's complete SSE lines (`LineSplitter.feed`), as `parse_line` gives them one by one.

    What servers send, `data: {…}` lines and blank separators with one `data: [DONE]` at the end, is checked
    and turned into one payload buffer by counting and replacing in C (`_canonical`); anything else goes
    line by line through `parse_payloads`. The same events either way (tests/loadgen/test_fuzz_load.py)."""
    canonical = _canonical(lines)
    read = _decoded(*canonical, chat) if canonical is not None else None
    if read is not None:
        return read
    payloads = [p for line in lines if line.startswith(b"data:") and (p := line[5:].strip()) != b"[DONE]"]
    return parse_payloads(payloads, chat=chat)


def _canonical(lines: list[bytes]) -> tuple[bytes, int] | None:
    """The payloads of `lines`, newline-separated, and how many, when every line is blank or `data: {…}`
    (nothing after the "}") except a last `data: [DONE]`; else None.

    Joined after a newline, "\ndata: {" can only stand at a line's start and "}\n" only at a line's end (no
    line holds a newline), so counting them counts the lines that begin and end that way; each payload is
    then exactly what `parse_line` strips out of its line, and `parse_payloads`'s argument (one object per
    payload when the decode finds as many objects as payloads) holds for the buffer."""
    kept = list(filter(None, lines))  # blank lines only separate events
    if kept and kept[-1] == b"data: [DONE]":
        kept.pop()
    count = len(kept)
    if count < 2:
        return None
    blob = b"\n" + b"\n".join(kept)
    if blob.count(b"\ndata: {") != count or blob.count(b"}\n") != count - 1 or not blob.endswith(b"}"):
        return None
    return blob.replace(b"\ndata: ", b"\n"), count


def parse_payloads(payloads: list[bytes], *, chat: bool) -> Read:
    """The events of one read's `data:` payloads (stripped, `[DONE]` left out), as `parse_payload` gives them.

    Several at once are decoded by one msgspec call over the payloads joined by newlines, when each starts
    with "{" and ends with "}" and the call finds exactly as many objects as there are payloads. That is
    exactly when each payload is one object by itself: between two payloads stands "}\n{", which inside
    any object or array is a syntax error, and a string cannot hold a raw newline, so no object can span
    two payloads, and with no spanning a count equal to the payloads' leaves one object each. Anything
    else is read payload by payload, where each malformed one is counted.
    """
    if len(payloads) > 1 and all(p.startswith(b"{") and p.endswith(b"}") for p in payloads):
        read = _decoded(b"\n".join(payloads), len(payloads), chat)
        if read is not None:
            return read
    return _read_each(payloads, chat)


def _decoded(blob: bytes, count: int, chat: bool) -> Read | None:
    """The events of `count` newline-separated payloads decoded by one msgspec call; None when the buffer is
    not UTF-8, does not fit the chunk's types, or holds another number of objects (the caller goes payload by
    payload, where each malformed one is counted)."""
    try:
        chunks = _decode_chunks(blob.decode())
    except (ValueError, RecursionError):
        return None
    return _read_chunks(chunks, chat) if len(chunks) == count else None


def _read_chunks(chunks: list[_Chunk], chat: bool) -> Read:
    """`_event` over decoded chunks, inlined for the common chunk (text only): once per token of a stream."""
    texts: list[str] = []
    errors: list[str] = []
    usage: object | None = None
    for chunk in chunks:
        u, t, e = chunk.usage, chunk.timings, chunk.error
        if (u and u != _NULL) or (t and t != _NULL) or (e and e != _NULL):  # _has_extras, inlined
            usage = _take(_event(chunk, chat), texts, errors, usage)
            continue
        if chunk.choices:
            first = chunk.choices[0]
            if chat:
                part = first.delta
                content = (part.content or part.reasoning_content or part.reasoning) if part is not None else None
            else:
                content = first.text
            if content:
                texts.append(content)
    return Read(texts, usage, errors, 0)


def _read_each(payloads: list[bytes], chat: bool) -> Read:
    texts: list[str] = []
    errors: list[str] = []
    usage: object | None = None
    malformed = 0
    for payload in payloads:
        try:
            usage = _take(parse_payload(payload, chat=chat), texts, errors, usage)
        except MalformedSseError:
            malformed += 1
    return Read(texts, usage, errors, malformed)


def _take(event: SseEvent, texts: list[str], errors: list[str], usage: object | None) -> object | None:
    """Add one event to a read's texts and errors; the usage the read now has (the last one sent)."""
    if event.text:
        texts.append(event.text)
    if event.error:
        errors.append(event.error)
    return event.usage if event.usage is not None else usage


def _event(chunk: _Chunk, chat: bool) -> SseEvent:
    """`parse_object` for a chunk whose fields have OpenAI's types (what msgspec accepted); raises ValueError
    or RecursionError where `usage`, `timings` or `error` is past json.loads (the caller goes the general way)."""
    content = None
    if chunk.choices:
        first = chunk.choices[0]
        if chat:
            part = first.delta
            if part is not None:  # reasoning models stream their thinking first: generated output, counted
                content = part.content or part.reasoning_content or part.reasoning
        else:
            content = first.text
    if _has_extras(chunk):  # the last chunk or two of a stream
        return _with_extras(chunk, content)
    return SseEvent(content, None, False, None)


def _has_extras(chunk: _Chunk) -> bool:
    """usage, timings or error present and not null. With include_usage, OpenAI's API sends `"usage": null` in
    every chunk but the last; null is what the general path reads as absent for all three."""
    u, t, e = chunk.usage, chunk.timings, chunk.error
    return bool((u and u != _NULL) or (t and t != _NULL) or (e and e != _NULL))


def _with_extras(chunk: _Chunk, text: str | None) -> SseEvent:
    usage = _value(chunk.usage)
    if usage is None and chunk.timings:
        timings = _value(chunk.timings)
        if isinstance(timings, dict):
            usage = _timings_usage(timings)
    error = _value(chunk.error)
    return SseEvent(text, usage, False, _error_text(error) if error else None)


def _value(raw: msgspec.Raw) -> Any:
    """A raw field as json.loads reads it (None when absent): msgspec's untyped decode gives the same values
    (integers of any size included) at a tenth of the cost; what it refuses (NaN, 1e400, a lone surrogate)
    json.loads reads, or refuses with the error the caller expects."""
    if not raw:
        return None
    try:
        return _decode_any(raw)
    except (ValueError, RecursionError):
        return json.loads(bytes(raw))


def _general(text: str, payload: bytes, chat: bool) -> SseEvent:
    """Any JSON: json.loads's own scanner, called directly, then `parse_object`."""
    try:
        obj, end = _scan(text, 0)
    except (ValueError, RecursionError, StopIteration):  # RecursionError: [[[[… past the interpreter's limit
        raise MalformedSseError(payload[:80].decode("utf-8", "replace")) from None
    if end != len(text):  # "extra data" to json.loads
        raise MalformedSseError(payload[:80].decode("utf-8", "replace"))
    if not isinstance(obj, dict):
        raise MalformedSseError(payload[:80].decode("utf-8", "replace"))
    return parse_object(obj, chat=chat, delta=True)


def parse_object(obj: object, *, chat: bool, delta: bool) -> SseEvent:
    """Text, usage and error of one response object (a stream chunk, or a whole non-streamed reply).

    Any JSON value is accepted: what is not OpenAI's shape carries no content, and nothing raises.
    """
    if not isinstance(obj, dict):
        return EMPTY
    text = None
    choices = obj.get("choices")
    if choices and choices.__class__ is list:  # JSON values have exact types: no subclass to allow for
        first = choices[0]
        if first.__class__ is dict:
            if chat:
                part = first.get("delta" if delta else "message")
                if part.__class__ is dict:
                    # Reasoning models stream their thinking first; it is generated output, so it counts.
                    text = part.get("content")
                    if not text or text.__class__ is not str:
                        text = part.get("reasoning_content")
                        if not text or text.__class__ is not str:
                            text = part.get("reasoning")
            else:
                text = first.get("text")
    usage = obj.get("usage")
    if usage is None and "timings" in obj and isinstance(obj["timings"], dict):
        usage = _timings_usage(obj["timings"])
    if "error" not in obj:
        return SseEvent(text if text.__class__ is str else None, usage, False, None)
    error = obj["error"]
    return SseEvent(text if isinstance(text, str) else None, usage, False, _error_text(error) if error else None)


def _timings_usage(timings: dict[str, Any]) -> dict[str, Any] | None:
    """llama.cpp's server ends a stream with `timings` (predicted_n, prompt_n, cache_n) where it sends no
    `usage`: the same counts under OpenAI's names, so they are checked like any usage (`read_usage`)."""
    if "predicted_n" not in timings:
        return None
    prompt, cached = timings.get("prompt_n"), timings.get("cache_n")
    usage: dict[str, Any] = {"completion_tokens": timings["predicted_n"]}
    if isinstance(prompt, int) and isinstance(cached, int) and not isinstance(prompt, bool):
        usage |= {"prompt_tokens": prompt + cached, "prompt_tokens_details": {"cached_tokens": cached}}
    return usage


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:200]
    if isinstance(error, str):
        return error[:200]
    try:
        return str(error)[:200]
    except RecursionError:  # an object nested nearly as deep as json.loads allows
        return "an error object"


class Usage(NamedTuple):
    """The token counts of a `usage` object that can be true, and why any was ignored."""

    completion: int | None
    prompt: int | None
    reasoning: int | None  # completion_tokens_details.reasoning_tokens: hidden thinking, when reported
    ignored: str | None  # a count that is not a number (a string, a list …): ignored, noted
    impossible: str | None  # a number no count can be (negative, fractional, NaN): ignored, run invalid
    cached: int | None = None  # prompt_tokens_details.cached_tokens: prompt tokens the server took from its cache


NO_USAGE = Usage(None, None, None, None, None)


# The largest count read at all: 2^53, past which a float cannot hold a whole number exactly. Counts below it that
# are still absurd (more than max_tokens asked for) are judged against the stream by `counts`; above it a count
# (10^400 in a hostile usage) could overflow a sum or reach a result past its ±1e30, so it is impossible here.
MAX_USAGE_TOKENS = 2**53


def read_usage(raw: object) -> Usage:
    """Check a server's `usage` once per request: non-negative integers are kept, anything else is not."""
    if raw is None:
        return NO_USAGE
    if not isinstance(raw, dict):
        return Usage(None, None, None, f"usage is a JSON {_kind(raw)}, not an object", None)
    completion, c_bad, c_impossible = _count(raw, "completion_tokens")
    prompt, p_bad, p_impossible = _count(raw, "prompt_tokens")
    details = raw.get("completion_tokens_details")
    reasoning = _count(details, "reasoning_tokens")[0] if isinstance(details, dict) else None
    prompt_details = raw.get("prompt_tokens_details")
    cached = _count(prompt_details, "cached_tokens")[0] if isinstance(prompt_details, dict) else None
    if cached is not None and prompt is not None and cached > prompt:
        cached = None  # more cached than sent cannot be true: not used
    return Usage(completion, prompt, reasoning, c_bad or p_bad, c_impossible or p_impossible, cached)


def _count(obj: dict[str, Any], name: str) -> tuple[int | None, str | None, str | None]:
    """(value, why it was ignored, why it is impossible) of one count in a usage object."""
    value = obj.get(name)
    if value is None:
        return None, None, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"usage.{name} is a JSON {_kind(value)}, not a number", None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None, None, f"usage.{name} is {value!r}, not a whole number"
    if value < 0:
        return None, None, f"usage.{name} is negative ({str(value)[:24]})"
    if value > MAX_USAGE_TOKENS:
        shown = f"a {len(str(value))}-digit number" if isinstance(value, int) and value >= 10**24 else f"{value:.6g}"
        return None, None, f"usage.{name} is {shown}, more than the {MAX_USAGE_TOKENS:,} (2^53) a count may be"
    return int(value), None, None


def _kind(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(value), type(value).__name__)
