"""Reading the user's files: one place that turns OS and TOML errors into what / why / to fix."""

from __future__ import annotations

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
