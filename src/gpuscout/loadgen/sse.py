"""Server-sent events of an OpenAI-compatible stream: split bytes into lines, read one `data:` line.

Cheap on purpose (the client must not become the bottleneck, docs/measurement.md §5): bytes are
split on newlines without decoding, and each `data:` payload is parsed with `json.loads` exactly once;
no model validation per chunk. Only choices with non-empty text count as content (vLLM counts any
non-empty `choices`, LLMPerf only non-empty content; gpuscout follows LLMPerf so role-only and
usage-only chunks never start or extend the clock).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class SseEvent(NamedTuple):
    text: str | None  # content of this chunk; None/"" when it carries none
    usage: dict[str, Any] | None
    done: bool  # the `[DONE]` sentinel
    error: str | None  # an error object sent inside the stream


EMPTY = SseEvent(None, None, False, None)
DONE = SseEvent(None, None, True, None)


class MalformedSseError(ValueError):
    """A `data:` line whose payload is not a JSON object."""


def split_lines(pending: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines in pending + data, and the unfinished remainder to keep for the next read."""
    lines = (pending + data).split(b"\n") if pending else data.split(b"\n")
    return lines, lines.pop()


def parse_line(line: bytes, *, chat: bool) -> SseEvent:
    """One SSE line → event. Comments, `event:` lines and blank separators carry nothing."""
    if not line.startswith(b"data:"):
        return EMPTY
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return DONE
    try:
        obj = json.loads(payload)
    except ValueError:
        raise MalformedSseError(payload[:80].decode("utf-8", "replace")) from None
    if not isinstance(obj, dict):
        raise MalformedSseError(payload[:80].decode("utf-8", "replace"))
    return parse_object(obj, chat=chat, delta=True)


def parse_object(obj: dict[str, Any], *, chat: bool, delta: bool) -> SseEvent:
    """Text, usage and error of one response object (a stream chunk, or a whole non-streamed reply)."""
    text = None
    choices = obj.get("choices")
    if choices and isinstance(choices, list) and isinstance(choices[0], dict):
        first = choices[0]
        if chat:
            part = first.get("delta" if delta else "message") or {}
            # Reasoning models stream their thinking first; it is generated output, so it counts.
            text = part.get("content") or part.get("reasoning_content") or part.get("reasoning")
        else:
            text = first.get("text")
    error = obj.get("error")
    usage = obj.get("usage")
    return SseEvent(text if isinstance(text, str) else None, usage if isinstance(usage, dict) else None, False,
                    str(error)[:200] if error else None)
