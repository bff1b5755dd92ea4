"""A price sheet written as TOML: offers (and exchange rates) that `load_price_sheet` reads back to the same values.

Every field that differs from its default is written, so a sheet written here and read back prices
exactly what was written; the trial's boxes and `gpuscout offers pull` both write sheets with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer


def sheet_toml(offers: Sequence[Offer], rates: Sequence[ExchangeRate] = (), *, header: Sequence[str] = ()) -> str:
    """Offers (and exchange rates) as a TOML price sheet, under `header` (comment lines, without the '#')."""
    lines = [f"# {line}".rstrip() for line in header]
    for offer in offers:
        lines += ["", "[[offer]]", *_table(offer.model_dump(exclude_defaults=True, exclude_none=True), "offer")]
    for rate in rates:
        lines += ["", "[[exchange_rate]]", *_table(rate.model_dump(exclude_none=True), "exchange_rate")]
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(fields: Mapping[str, Any], name: str) -> list[str]:
    """key = value lines, then each list of tables as [[name.key]] blocks (TOML wants them after the keys)."""
    lines, nested = [], []
    for key, value in fields.items():
        if isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value):
            for item in value:
                nested += ["", f"[[{name}.{key}]]", *_table(item, f"{name}.{key}")]
        else:
            lines.append(f"{key} = {_value(value)}")
    return lines + nested


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # offers refuse these; a sheet must never hold one
            raise ValueError(f"not a finite number: {value}")
        return repr(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _string(text: str) -> str:
    """A TOML basic string: quote and backslash escaped, and the control characters TOML forbids raw
    (U+0000–U+001F and U+007F) as \\uXXXX."""
    out = []
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
