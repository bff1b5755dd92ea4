"""Reading the user's files: one place that turns OS and TOML errors into what / why / to fix."""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from gpuscout.errors import SpecError


def read_user_text(path: Path, what: str, fix: str) -> str:
    """The file's UTF-8 text; a missing, unreadable or non-UTF-8 file is a SpecError naming `what`."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"Cannot read the {what} {path}.", getattr(exc, "strerror", None) or str(exc), fix) from None


def read_user_toml(path: Path, what: str, fix: str) -> dict[str, Any]:
    """The file parsed as TOML; a syntax error points at its line and column."""
    text = read_user_text(path, what, fix)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(
            f"{path} is not valid TOML: {exc}.",
            "The TOML parser stopped at the line and column shown.",
            "Fix the syntax at that line (quotes around strings, '=' between key and value, "
            "dates as YYYY-MM-DD without quotes).",
        ) from None


def write_atomic(path: Path, text: str) -> None:
    """Write `text` so that readers see the old file or the whole new one, never a part.

    A temporary file in the same folder is written, flushed and fsync'd, then renamed over `path`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
