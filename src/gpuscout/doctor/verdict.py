"""The doctor's verdict: each measurement against its expected band, and keep / return / inconclusive.

A band (`hardware.bands`) spans what healthy machines of the SKU were published to deliver. A
measurement's position in it is a percentile: 0 at the band's low end, 100 at its high end, below 0
under it. A measurement at or above the low end passes; below it but above low × `fail_below` it is a
warning; further below, it fails. The verdict (docs/doctor.md §4):

    return        any finding fails: the box is not what was paid for, or is broken
    inconclusive  no failure, but a warning, or a check that could not run: measure again or ask
    keep          everything judged passed (checks with no published band are reported, not judged)

Exit codes follow, so a script can act on the verdict: 0 keep, 3 return, 4 inconclusive (1 stays a
user error, 2 a usage error, 128 + N a signal).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.hardware.bands import Band
from gpuscout.results.schema import DoctorArea, DoctorFinding, DoctorOutcome, DoctorStatus

EXIT_CODES: dict[DoctorOutcome, int] = {"keep": 0, "return": 3, "inconclusive": 4}

# Display units for the finding lines (results keep SI): the unit's name and its scale.
_SHOWN = {"FLOP/s": ("TFLOP/s", 1e12), "bytes/s": ("GB/s", 1e9), "s": ("s", 1.0)}


def shown(value: float, unit: str) -> str:
    """"148 TFLOP/s", "25.1 GB/s", "28.7 GFLOP/s": three significant figures in the unit people read."""
    name, scale = _SHOWN.get(unit, (unit, 1.0))
    if unit == "FLOP/s" and abs(value) < 1e12:
        name, scale = "GFLOP/s", 1e9
    elif unit == "bytes/s" and abs(value) < 1e9:
        name, scale = "MB/s", 1e6
    v = value / scale
    text = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return f"{text} {name}".strip()


def band_text(low: float, high: float | None, unit: str) -> str:
    if high is None:
        return f"at least {shown(low, unit)}"
    lo, hi = shown(low, unit), shown(high, unit)
    lo_value, _, lo_unit = lo.partition(" ")
    return f"{lo_value}–{hi}" if hi.endswith(" " + lo_unit) else f"{lo} – {hi}"


def position(value: float, low: float, high: float | None) -> float | None:
    """The value's percentile in the band: 0 at its low end, 100 at its high end (None for floors)."""
    if high is None or high <= low:
        return None
    return (value - low) / (high - low) * 100


def status_in(value: float, low: float, fail_below: float) -> DoctorStatus:
    if value >= low:
        return "pass"
    return "warn" if value >= low * fail_below else "fail"


def judge(check: str, area: DoctorArea, value: float, unit: str, band: Band, *, gpu: int | None = None,
          scale: float = 1.0, allowance: float = 0.0, what: str = "") -> DoctorFinding:
    """`value` against `band` (scaled by `scale`, its low end lowered by `allowance`), as one finding line."""
    low = band.low * scale * (1 - allowance)
    high = band.high * scale if band.high is not None else None
    status = status_in(value, low, band.fail_below)
    pct = position(value, low, high)
    where = f"{check}" + (f", GPU {gpu}" if gpu is not None else "")
    expected = band_text(low, high, unit)
    if status == "pass":
        place = (f"{pct:.0f}th percentile of its band ({expected})" if pct is not None
                 else f"above its floor ({expected})")
        message = f"{where}: {shown(value, unit)}, {place}"
    else:
        message = f"{where}: {what}{shown(value, unit)}, {value / low:.0%} of expected ({expected})"
    return DoctorFinding(check=check, area=area, status=status, message=message, gpu=gpu, value=value, unit=unit,
                         band_low=low, band_high=high, percentile=pct, source=", ".join(band.sources))


def info(check: str, area: DoctorArea, message: str, *, gpu: int | None = None, value: float | None = None,
         unit: str = "") -> DoctorFinding:
    return DoctorFinding(check=check, area=area, status="info", message=message, gpu=gpu, value=value, unit=unit)


def finding(check: str, area: DoctorArea, status: DoctorStatus, message: str, *, gpu: int | None = None,
            value: float | None = None, unit: str = "", source: str = "") -> DoctorFinding:
    return DoctorFinding(check=check, area=area, status=status, message=message, gpu=gpu, value=value, unit=unit,
                         source=source)


def not_checked(findings: Sequence[DoctorFinding]) -> list[str]:
    """The checks that could not run or did not finish ("error" findings), each named once, in order."""
    return list(dict.fromkeys(f.check + (f" (GPU {f.gpu})" if f.gpu is not None else "")
                              for f in findings if f.status == "error"))


def decide(findings: Sequence[DoctorFinding]) -> tuple[DoctorOutcome, str]:
    """The outcome and one sentence saying why (the finding lines carry the detail)."""
    count = {s: [f for f in findings if f.status == s] for s in ("pass", "warn", "fail", "info", "error")}
    if count["fail"]:
        first = count["fail"][0].message
        more = f" (and {len(count['fail']) - 1} more)" if len(count["fail"]) > 1 else ""
        return "return", f"Return it: {first}{more}."
    if count["warn"] or count["error"]:
        doubts = [*count["warn"], *count["error"]]
        return "inconclusive", (f"Inconclusive: {doubts[0].message}"
                                + (f" (and {len(doubts) - 1} more)" if len(doubts) > 1 else "")
                                + ". Nothing failed outright; re-run doctor, or ask the provider.")
    if not count["pass"]:
        return "inconclusive", ("Inconclusive: nothing could be judged against a published band here "
                                f"({len(count['info'])} readings reported).")
    unjudged = f"; {len(count['info'])} readings reported without a band" if count["info"] else ""
    return "keep", f"Keep it: {len(count['pass'])} checks within their expected bands{unjudged}."
