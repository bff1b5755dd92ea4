"""Fixtures: the fake OpenAI-compatible server (tests/loadgen/fake_openai.py), in a thread or a process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai import FakeConfig, FakeServer, Served, serve_in_thread

FAKE = Path(__file__).parent / "fake_openai.py"


@dataclass(frozen=True)
class FakeProcess:
    """A fake server running in its own process: its URL, and its per-request records on demand."""

    url: str

    def records(self) -> list[Served]:
        """What the server did so far (`GET /_records`), times on the client's clock (CLOCK_MONOTONIC)."""
        resp = httpx.get(f"{self.url}/_records", timeout=10, trust_env=False)
        resp.raise_for_status()
        return [Served(**obj) for obj in resp.json()]


@contextlib.contextmanager
def serve_in_process(ttft_s: float, token_delay_s: float) -> Iterator[FakeProcess]:
    """Start the server in a subprocess (no GIL shared with the client); always stop it."""
    proc = subprocess.Popen([sys.executable, str(FAKE), "--ttft", str(ttft_s), "--token-delay", str(token_delay_s)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "PORT <n>" once it listens
        yield FakeProcess(f"http://127.0.0.1:{int(line.split()[1])}")
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def fake_server() -> Callable[..., AbstractContextManager[FakeServer]]:
    """`with fake_server(ttft_s=…, token_delay_s=…) as srv:` — a server in a background thread."""

    def start(**config: object) -> AbstractContextManager[FakeServer]:
        return serve_in_thread(FakeConfig(**config))  # type: ignore[arg-type]

    return start


@pytest.fixture
def fake_process() -> Iterator[Callable[..., FakeProcess]]:
    """`fake_process(ttft_s, token_delay_s)` — a server in its own process, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda ttft_s, token_delay_s: stack.enter_context(serve_in_process(ttft_s, token_delay_s))
