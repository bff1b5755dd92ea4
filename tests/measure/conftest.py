"""Fixtures of the bench tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One torch thread, here and in spawned cases: other test processes share this machine's cores,
    and competing OpenMP threads slow tiny CPU steps many times over (correctness is tested, not speed)."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
