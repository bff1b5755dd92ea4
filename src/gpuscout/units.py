"""Unit constants and parsing. SI inside; conversion for display lives in `report`."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from gpuscout.errors import SpecError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4
MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0

_SECOND_UNITS = {"s": 1.0, "sec": 1.0, "m": MINUTE_S, "min": MINUTE_S, "h": HOUR_S, "hr": HOUR_S, "d": DAY_S}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_duration_s(text: str) -> float:
    """'2.5h' -> 9000.0, '90m' -> 5400.0, '30' -> 30.0 seconds."""
    match = _QUANTITY.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or (unit and unit not in _SECOND_UNITS):
        raise SpecError(
            f"Cannot read {text!r} as a duration.",
            "A duration is a number with an optional unit (s, m, h, d).",
            "Write it like '12h', '90m' or '3600s'.",
        )
    return float(match.group(1)) * _SECOND_UNITS[unit or "s"]


def iso_time(text: str) -> datetime | None:
    """An ISO 8601 date or time, taken as UTC when it names no zone; None when `text` is not one."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def parse_time_s(text: str, flag: str) -> float:
    """ISO 8601 time → epoch seconds; a time without a zone is taken as UTC."""
    when = iso_time(text)
    if when is None:
        raise SpecError(f"{flag} {text!r} is not an ISO 8601 time.",
                        "gpuscout reads times as ISO 8601, e.g. 2025-06-01T12:00:00Z.",
                        "Use e.g. 2025-06-01T12:00:00Z (a time without a zone is taken as UTC).")
    return when.timestamp()
