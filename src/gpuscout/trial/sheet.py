"""The price sheet every box reads: the candidates' offers written as a TOML sheet when the trial's own
sheet is not one.

`doctor` and `bench` on the box read a TOML price sheet. A trial whose offers came from a SkyPilot catalog
(`--offers …/vms.csv`, the exact way to pin the skypilot engine's candidates) would otherwise send the box
a file its gpuscout cannot read as a sheet, and every doctor would fail before measuring anything. The
candidates' offers are written out as they were read (every field that differs from its default), so the
box prices and checks exactly what the trial priced; the round trip is tested field for field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer

SHEET_NAME = "trial-offers.toml"


def sheet_for_boxes(sheet_path: Path, offers: Sequence[Offer], rates: Sequence[ExchangeRate],
                    out_dir: Path) -> Path:
    """The sheet to send to the boxes: the trial's own when it is TOML, else its candidates' offers as TOML."""
    if sheet_path.suffix.lower() == ".toml":
        return sheet_path
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SHEET_NAME
    path.write_text(sheet_toml(offers, rates, origin=str(sheet_path)), encoding="utf-8")
    return path


def sheet_toml(offers: Sequence[Offer], rates: Sequence[ExchangeRate] = (), *, origin: str = "") -> str:
    """Offers (and exchange rates) as a TOML price sheet that `load_price_sheet` reads back to the same values."""
    lines = [f"# The trial's candidates, written by gpuscout trial from {origin}." if origin else
             "# The trial's candidates, written by gpuscout trial."]
    for offer in offers:
        lines += ["", "[[offer]]", *_table(offer.model_dump(exclude_defaults=True, exclude_none=True), "offer")]
    for rate in rates:
        lines += ["", "[[exchange_rate]]", *_table(rate.model_dump(exclude_none=True), "exchange_rate")]
    return "\n".join(lines) + "\n"


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
