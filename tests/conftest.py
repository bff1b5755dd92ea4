"""Shared fixtures: GPUs and model shapes that many tests use."""

from __future__ import annotations

import pytest

from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape


@pytest.fixture(autouse=True)
def _no_user_calibration(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """estimate and pick read ~/.config/gpuscout/calibration.toml when it exists: every test gets an
    empty config folder of its own, so a developer's calibration never changes a test's numbers."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))


@pytest.fixture(scope="session")
def llama8b() -> ModelShape:
    return load_llm_preset("llama-3-8b")


@pytest.fixture(scope="session")
def h100() -> Gpu:
    return find_gpu("h100")


@pytest.fixture(scope="session")
def rtx4090() -> Gpu:
    return find_gpu("rtx-4090")
