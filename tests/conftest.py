"""Shared fixtures: GPUs and model shapes that many tests use."""

from __future__ import annotations

import functools
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuscout.hardware.catalog import Gpu, find_gpu
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape

SRC = Path(__file__).parent.parent / "src"


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C handled as Python does for an interactive start. A suite started in the background by a
    non-interactive shell inherits SIGINT ignored, and so would every subprocess a test starts: the
    Ctrl-C tests then fail with exit code 0, for a reason that is not in the code. Setting the handler
    here also means children start with the default disposition (exec resets handled signals, not
    ignored ones)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The same for a suite started under `nohup` (SIGHUP ignored) or by a runner that ignores SIGTERM:
    # gpuscout keeps a stop signal it was started ignoring ignored (nohup's promise, tested in
    # tests/test_interrupts.py), so the SIGHUP and SIGTERM tests need the default disposition. Beside a
    # CPU hog started with nohup, every SIGHUP test failed with exit code 0 for that reason alone.
    for sig in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _no_user_folders(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """estimate and pick read ~/.config/gpuscout/calibration.toml when it exists, and bench, load and pick
    record their runs in ~/.local/share/gpuscout/results.sqlite: every test gets empty config and data
    folders of its own, so a developer's calibration never changes a test's numbers and no test writes
    to the developer's store. A subprocess started with an environment of its own (most CLI tests pass
    only PATH and COLUMNS) gets the same two folders, unless the test sets them itself, and imports the
    gpuscout under test."""
    folders = {"XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("xdg-config")),
               "XDG_DATA_HOME": str(tmp_path_factory.mktemp("xdg-data")),
               # the gpuscout under test, not whichever one is installed (a worktree beside an editable install)
               "PYTHONPATH": str(SRC)}
    for name, folder in folders.items():
        monkeypatch.setenv(name, folder)
    monkeypatch.delenv("GPUSCOUT_STORE", raising=False)
    original = subprocess.Popen.__init__

    @functools.wraps(original)
    def isolated(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        if kwargs.get("env") is not None:
            kwargs["env"] = {**folders, **kwargs["env"]}
        original(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", isolated)


@pytest.fixture(scope="session")
def llama8b() -> ModelShape:
    return load_llm_preset("llama-3-8b")


@pytest.fixture(scope="session")
def h100() -> Gpu:
    return find_gpu("h100")


@pytest.fixture(scope="session")
def rtx4090() -> Gpu:
    return find_gpu("rtx-4090")
