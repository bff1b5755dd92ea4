"""The one number formatter: every figure on a screen or in Markdown goes through these functions.

Rules (docs/design.md §4): bytes in IEC units (GiB = 2^30 bytes), transfer rates in SI units
(GB/s = 10^9 bytes/s, as vendors and network tools quote them), durations in the unit a person
would say, money with cents — and more digits only below a cent, so nothing prints as "$0.00"
that is not zero — and about three significant digits everywhere, with thousands grouped and
never an exponent or a raw float.
"""

from __future__ import annotations

import math

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
_IEC = (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
_SI_RATE = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))
_COUNT = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))
_CURRENCY_SIGN = {"USD": "$", "EUR": "€", "GBP": "£", "CNY": "¥", "JPY": "¥"}


def sig(value: float, digits: int = 3) -> str:
    """About `digits` significant digits, thousands grouped, no exponent: 0.0123, 4.56, 1,234."""
    if not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (digits - 1) - 0.5:
        return f"{value:,.0f}"  # whole numbers keep every integer digit: 12,346, not 12,300
    rounded = float(f"{value:.{digits}g}")  # round first, so 9.996 counts as 10.0, not 9.99
    size_ = abs(rounded)
    decimals = digits - 1 - math.floor(math.log10(size_))
    return f"{rounded:,.{decimals}f}"


def gib(nbytes: float, decimals: int = 1) -> str:
    """Bytes as GiB with fixed decimals (tables of memory line up): '71.6 GiB'."""
    return f"{nbytes / GIB:,.{decimals}f} GiB"


def gib_number(nbytes: float, decimals: int = 1) -> str:
    """Bytes as a bare GiB figure, for columns whose header names the unit."""
    return f"{nbytes / GIB:,.{decimals}f}"


def size(nbytes: float) -> str:
    """Bytes in the largest IEC unit that keeps the figure ≥ 1: '512 B', '3.5 MiB', '71.6 GiB'."""
    for unit, scale in _IEC:
        if abs(nbytes) >= scale:
            return f"{sig(nbytes / scale)} {unit}"
    return f"{nbytes:,.0f} B"


def rate(bytes_per_s: float) -> str:
    """A transfer rate in SI units: '1.9 GB/s', '850 MB/s'."""
    for unit, scale in _SI_RATE:
        if abs(bytes_per_s) >= scale:
            return f"{sig(bytes_per_s / scale)} {unit}"
    return f"{sig(bytes_per_s)} B/s"


def count(n: float) -> str:
    """A large count with a suffix: 8,030,261,248 → '8.03 B'; below a thousand, as is."""
    for unit, scale in _COUNT:
        if abs(n) >= scale:
            return f"{sig(n / scale)} {unit}"
    return sig(n)


def flops(per_s: float) -> str:
    """Operations per second as TFLOP/s: '989 TFLOP/s', '0.12 TFLOP/s'."""
    return f"{sig(per_s / 1e12)} TFLOP/s"


def seconds(value: float) -> str:
    """A latency or step time, precise: '850 µs', '12.3 ms', '1.25 s', '3 min 20 s'."""
    if not math.isfinite(value):
        return "n/a"
    size_ = abs(value)
    if size_ == 0:
        return "0 s"
    if size_ < 1e-3:
        return f"{sig(value * 1e6)} µs"
    if size_ < 1:
        return f"{sig(value * 1e3)} ms"
    if size_ < 120:
        return f"{sig(value)} s"
    return duration(value)


def duration(value: float) -> str:
    """A job's length in the unit a person would say: '45 s', '12 min', '5.6 h', '2.1 d'."""
    if not math.isfinite(value):
        return "n/a"
    if value < 120:
        return f"{value:.0f} s" if value >= 1 else seconds(value)
    if value < 2 * 3600:
        return f"{value / 60:.0f} min"
    if value < 3 * 86400:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:,.1f} d"


def money(amount: float | None, currency: str = "USD") -> str:
    """'$1,234.56'; below a cent two significant digits, so it never reads '$0.00': '$0.0036'."""
    if amount is None:
        return "-"
    if not math.isfinite(amount):
        return "n/a"
    sign = _CURRENCY_SIGN.get(currency)
    prefix = sign if sign else f"{currency} "
    if amount != 0 and abs(amount) < 0.01:
        text = f"{abs(amount):.{1 - math.floor(math.log10(abs(amount)))}f}"
    else:
        text = f"{abs(amount):,.2f}"
    return f"{'-' if amount < 0 else ''}{prefix}{text}"


def percent(fraction: float, decimals: int = 0) -> str:
    """0.123 → '12%'."""
    return f"{fraction:.{decimals}%}" if math.isfinite(fraction) else "n/a"


def ratio(value: float) -> str:
    """A ratio of two measurements: '1.07×'."""
    return f"{value:.2f}×" if math.isfinite(value) else "n/a"


def value_in(value: float, unit: str) -> str:
    """A measured value in the unit its metric records (bytes, bytes/s, s, FLOP/s, or a plain unit)."""
    match unit:
        case "bytes" | "B":
            return size(value)
        case "bytes/s" | "B/s":
            return rate(value)
        case "s":
            return seconds(value)
        case "fraction":
            return percent(value, 1)
        case "":
            return sig(value)
    return f"{sig(value)} {unit}"
