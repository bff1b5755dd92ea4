"""Fixtures: the fake OpenAI-compatible server (tests/loadgen/fake_openai.py), in a thread or a process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai import FakeConfig, FakeServer, serve_in_thread

FAKE = Path(__file__).parent / "fake_openai.py"


@pytest.fixture
def fake_server() -> Callable[..., AbstractContextManager[FakeServer]]:
    """`with fake_server(ttft_s=…, token_delay_s=…) as srv:` — a server in a background thread."""

    def start(**config: object) -> AbstractContextManager[FakeServer]:
        return serve_in_thread(FakeConfig(**config))  # type: ignore[arg-type]

    return start


@pytest.fixture
def fake_process() -> Iterator[Callable[..., str]]:
    """A server in its own process (no GIL shared with the client), for timing accuracy; returns its URL."""
    procs: list[subprocess.Popen[str]] = []

    def start(ttft_s: float, token_delay_s: float) -> str:
        proc = subprocess.Popen([sys.executable, str(FAKE), "--ttft", str(ttft_s), "--token-delay", str(token_delay_s)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        return f"http://127.0.0.1:{int(line.split()[1])}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
