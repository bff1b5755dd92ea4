"""Shared fixtures: GPUs and model shapes that many tests use."""

from __future__ import annotations

import pytest

from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape


@pytest.fixture(scope="session")
def llama8b() -> ModelShape:
    return load_llm_preset("llama-3-8b")


@pytest.fixture(scope="session")
def h100() -> Gpu:
    return find_gpu("h100")


@pytest.fixture(scope="session")
def rtx4090() -> Gpu:
    return find_gpu("rtx-4090")
