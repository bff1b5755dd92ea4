"""The price sheet every box reads: the candidates' offers written as a TOML sheet when the trial's own
sheet is not one.

`doctor` and `bench` on the box read a TOML price sheet. A trial whose offers came from a SkyPilot catalog
(`--offers …/vms.csv`, the exact way to pin the skypilot engine's candidates) would otherwise send the box
a file its gpuscout cannot read as a sheet, and every doctor would fail before measuring anything. The
candidates' offers are written out as they were read (every field that differs from its default), so the
box prices and checks exactly what the trial priced; the round trip is tested field for field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.hardware.sheet_toml import sheet_toml as _sheet_toml

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
    said = f"The trial's candidates, written by gpuscout trial from {origin}." if origin else \
        "The trial's candidates, written by gpuscout trial."
    return _sheet_toml(offers, rates, header=[said])
