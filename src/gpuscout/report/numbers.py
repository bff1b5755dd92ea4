"""The one number formatter: every figure on a screen or in Markdown goes through these functions.

Rules (docs/design.md §4): bytes in IEC units (GiB = 2^30 bytes), transfer rates in SI units
(GB/s = 10^9 bytes/s, as vendors and network tools quote them), durations in the unit a person
would say, money with cents — and more digits only below a cent, so nothing prints as "$0.00"
that is not zero — and about three significant digits everywhere, with thousands grouped and
never an exponent or a raw float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuscout.hardware.currency import currency_sign  # one symbol table for screens and sentences
from gpuscout.units import DAY_S, HOUR_S

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
_IEC = (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
_SI_RATE = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))
_COUNT = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))


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


def exact(n: int) -> str:
    """A count that must keep every digit (parameters, tokens, a largest batch): 8,030,261,248."""
    return f"{n:,}"


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
    if value < 0:  # a difference of durations; one sign, then the size (seconds() sends large ones here)
        return f"-{duration(-value)}"
    if value < 120:
        return f"{value:.0f} s" if value >= 1 else seconds(value)
    if value < 2 * HOUR_S:
        return f"{value / 60:.0f} min"
    if value < 3 * DAY_S:
        return f"{value / HOUR_S:.1f} h"
    return f"{value / DAY_S:,.1f} d"


def duration_band(low: float, high: float) -> str:
    """A range of durations with the unit once when both ends share it: '3.3–7.0 h', '82 min–2.9 h'."""
    a, b = duration(low), duration(high)
    if " " in a and " " in b and a.split(" ")[-1] == b.split(" ")[-1]:
        return f"{a.rsplit(' ', 1)[0]}–{b}"
    return f"{a}–{b}"


def money(amount: float | None, currency: str = "USD") -> str:
    """'$1,234.56', 'CN¥88.14', 'CHF 12.00'; below a cent two significant digits, so it never reads
    '$0.00': '$0.0036'."""
    if amount is None:
        return "-"
    if not math.isfinite(amount):
        return "n/a"
    prefix = currency_sign(currency)
    if amount != 0 and abs(amount) < 0.01:
        text = f"{abs(amount):.{1 - math.floor(math.log10(abs(amount)))}f}"
    else:
        text = f"{abs(amount):,.2f}"
    return f"{'-' if amount < 0 else ''}{prefix}{text}"


def money_band(low: float, high: float | None, currency: str = "USD") -> str:
    """A band of amounts with the sign once and about three significant digits (a band is an
    estimate, its cents are noise): '$3.43–7.28', 'CN¥24.5–52.0'; an open high end reads '$3.43–?'."""
    prefix = currency_sign(currency)
    if high is not None and sig(low) == sig(high):  # a bill the minimum fixes has no spread to show
        return f"{prefix}{sig(low)}"
    return f"{prefix}{sig(low)}–{'?' if high is None else sig(high)}"


def age(days: float) -> str:
    """How old an observation is, as a person says it: '0 d', '3 d', '364 d', '2.3 y'."""
    if not math.isfinite(days):
        return "n/a"
    return f"{max(days, 0):.0f} d" if days < 365 else f"{days / 365.25:.1f} y"


def money_in(amount_usd: float | None, currency: str = "USD", usd_per_unit: float = 1.0) -> str:
    """A USD amount shown in `currency`, one unit of which is worth `usd_per_unit` USD."""
    return money(None if amount_usd is None else amount_usd / usd_per_unit, currency)


def percent(fraction: float, decimals: int = 0) -> str:
    """0.123 → '12%'."""
    return f"{fraction:.{decimals}%}" if math.isfinite(fraction) else "n/a"


def ratio(value: float | None) -> str:
    """A ratio of two measurements: '1.07×' ('n/a' when there is none, e.g. against zero)."""
    return f"{value:.2f}×" if value is not None and math.isfinite(value) else "n/a"


def ratio_band(low: float, high: float) -> str:
    """A confidence interval of a ratio: '1.99–2.01×'; ends beyond 0.01× and 100× (two runs of wild
    samples give Student's t intervals like 0.00–71480×) read '<0.01' and '>100'."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "n/a"
    lo = "<0.01" if low < 0.01 else f"{low:.2f}"
    hi = ">100" if high > 100 else f"{high:.2f}"
    return f"{lo}–{hi}×"


def value_in(value: float, unit: str) -> str:
    """A measured value in the unit its metric records (bytes, bytes/s, s, FLOP/s, or a plain unit)."""
    match unit:
        case "bytes" | "B":
            return size(value)
        case "bytes/s" | "B/s":
            return rate(value)
        case "FLOP/s":
            return flops(value)
        case "s":
            return seconds(value)
        case "fraction":
            return percent(value, 1)
        case "":
            return sig(value)
    return f"{sig(value)} {unit}"


def quantity(name: str, value: float) -> str:
    """A value whose name carries its unit (docs/design.md §4.2): step_s → '39.0 s', mfu → '34.1%'."""
    suffixes = (("_bytes_per_s", rate), ("_flops_per_s", flops), ("_per_s", lambda v: f"{sig(v)}/s"),
                ("_bytes", size), ("_s", seconds), ("_tflops", lambda v: f"{sig(v)} TFLOP/s"),
                ("_fraction", lambda v: percent(v, 1)))
    if name == "mfu":
        return percent(value, 1)
    if name.startswith("s_per_"):  # seconds per unit of work: s_per_image
        return seconds(value)
    for suffix, show in suffixes:
        if name.endswith(suffix):
            return show(value)
    return sig(value)


def common_unit(values: Sequence[float], unit: str) -> tuple[str, float]:
    """One display unit for a column of values recorded in `unit`, and the factor to divide by.

    A column reads best in one unit that suits its largest value: latencies of 0.0235 and 0.0567 s
    both in ms, sizes in GiB. Units the module does not scale are kept as they are.
    """
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    match unit:
        case "s":
            return ("µs", 1e-6) if top < 1e-3 else ("ms", 1e-3) if top < 1 else ("s", 1.0)
        case "bytes" | "B":
            return next(((u, float(s)) for u, s in _IEC if top >= s), ("B", 1.0))
        case "bytes/s" | "B/s":
            return next(((u, s) for u, s in _SI_RATE if top >= s), ("B/s", 1.0))
        case "fraction":
            return "%", 0.01
        case "FLOP/s":
            return ("TFLOP/s", 1e12) if top >= 1e12 else ("GFLOP/s", 1e9)
    return unit, 1.0


def in_unit(value: float | None, factor: float) -> str:
    """A bare figure in the unit `common_unit` chose (the header names the unit); '—' when missing."""
    return "—" if value is None else sig(value / factor)
