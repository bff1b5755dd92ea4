"""Fixtures: the fake OpenAI-compatible server (tests/loadgen/fake_openai.py), in a thread or a process."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai import FakeConfig, FakeProcess, FakeServer, serve_in_process, serve_in_thread


@pytest.fixture
def fake_server() -> Callable[..., AbstractContextManager[FakeServer]]:
    """`with fake_server(ttft_s=…, token_delay_s=…) as srv:` — a server in a background thread."""

    def start(**config: object) -> AbstractContextManager[FakeServer]:
        return serve_in_thread(FakeConfig(**config))  # type: ignore[arg-type]

    return start


@pytest.fixture
def fake_process() -> Iterator[Callable[[float, float], FakeProcess]]:
    """`fake_process(ttft_s, token_delay_s)` — a server in its own process (`.url`, `.records()`), stopped after."""
    with contextlib.ExitStack() as stack:
        yield lambda ttft_s, token_delay_s: stack.enter_context(serve_in_process(ttft_s, token_delay_s))
