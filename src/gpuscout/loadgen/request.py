"""The bytes of each request: OpenAI-compatible JSON behind an HTTP/1.1 head, built once and reused.

A prompt's request (head and body, with or without the pinning extras) is encoded the first time it
is sent and kept, so a request costs no encoding when it is sent again; a conversation turn, whose
history is its own, is encoded once per send. Bodies:

* chat: {"model", "messages": [{"role": "user", "content": …}] (or the conversation so far),
  "max_tokens", "stream"}; completions: {"prompt": …} instead of messages (a conversation is joined
  into one prompt, turn after turn).
* pinning extras (vLLM, SGLang, llama.cpp read them): "ignore_eos": true and "min_tokens", and for a
  stream "stream_options": {"include_usage": true}; a server that answers 400 to them gets the
  request again without (`client._send`).
* images (/v1/images/generations): {"model", "prompt", "n": 1, "response_format": "b64_json"} and the
  user's extra fields (e.g. "size"); nothing to pin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from gpuscout.loadgen.exchange import IMAGES_ASKED, Live
from gpuscout.loadgen.record import PromptLike
from gpuscout.loadgen.wire import Target

EXTRA_FIELDS = ("ignore_eos", "min_tokens", "stream_options")


class Bodies:
    """Encoded requests by (prompt, extras), and whether the server still takes the extras."""

    def __init__(self, target: Target, headers: dict[str, str], model: str, endpoint: str, stream: bool,
                 prompts: Sequence[PromptLike], extra_body: dict[str, Any]) -> None:
        self.target, self.headers, self.model = target, headers, model
        self.chat, self.images, self.stream = endpoint == "chat", endpoint == "images", stream
        self.prompts, self.extra_body = prompts, extra_body
        self.cache: dict[tuple[int, bool], bytes] = {}
        self.extras_on = not self.images
        self.pins = not self.images
        self.extra_names = EXTRA_FIELDS if stream else EXTRA_FIELDS[:2]

    def request(self, live: Live, extras: bool) -> bytes:
        if live.messages is not None:
            return self._encode(self._body(live.prompt, extras, live.messages))
        key = (live.prompt, extras)
        cached = self.cache.get(key)
        if cached is None:
            cached = self.cache[key] = self._encode(self._body(live.prompt, extras, None))
        return cached

    def _encode(self, body: dict[str, Any]) -> bytes:
        # msgspec: compact UTF-8 JSON, 0.5 µs a body against json.dumps's 7; a unique prompt is encoded in the run
        return self.target.request("POST", self.headers, msgspec.json.encode(body))

    def _body(self, index: int, extras: bool, messages: list[dict[str, str]] | None) -> dict[str, Any]:
        prompt = self.prompts[index]
        if self.images:
            return {"model": self.model, "prompt": prompt.text, "n": IMAGES_ASKED, "response_format": "b64_json"} \
                | self.extra_body
        body: dict[str, Any] = {"model": self.model, "max_tokens": prompt.output_tokens, "stream": self.stream}
        if self.chat:
            body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt.text}]
        else:
            body["prompt"] = "\n".join(m["content"] for m in messages) if messages is not None else prompt.text
        if extras:
            body |= {"ignore_eos": True, "min_tokens": prompt.output_tokens}
            if self.stream:
                body["stream_options"] = {"include_usage": True}
        return body | self.extra_body
