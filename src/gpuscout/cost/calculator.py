"""`gpuscout cost`: the plain calculator, and how the real bill differs from the plain product."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpuscout.cost.billed_time import round_bill
from gpuscout.errors import SpecError

HOUR_S = 3600.0


class PlainCost(BaseModel):
    """total = price × GPUs × hours + storage + transfer + retries, in USD."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_gpu_hour: float
    gpus: int
    hours: float
    compute_usd: float
    storage_usd: float
    transfer_usd: float
    retry_usd: float
    total_usd: float


class BilledCost(BaseModel):
    """The same run under billing rules: startup and idle tail billed, minimum, rounding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    increment_s: float
    min_billed_s: float
    startup_s: float
    idle_tail_s: float
    billed_hours: float
    compute_usd: float
    total_usd: float
    difference_usd: float  # billed total − plain total


def checked_hours(hours: float | None) -> float:
    """The run's hours, refused when missing or not positive."""
    return _positive("hours", hours)


def plain_cost(usd_per_gpu_hour: float | None, gpus: int, hours: float, *, storage_usd: float = 0.0,
               transfer_usd: float = 0.0, retry_usd: float = 0.0) -> PlainCost:
    """price × GPUs × hours + extras; every input is checked (what / why / to fix)."""
    price = _positive("usd-per-gpu-hour", usd_per_gpu_hour)
    _positive("gpus", gpus)
    for name, value in (("storage-usd", storage_usd), ("transfer-usd", transfer_usd), ("retry-usd", retry_usd)):
        if value < 0:
            raise SpecError(f"--{name} {value} is negative.", "Costs are amounts of money spent.",
                            f"Pass --{name} ≥ 0.")
    compute = price * gpus * hours
    return PlainCost(usd_per_gpu_hour=price, gpus=gpus, hours=hours, compute_usd=compute,
                     storage_usd=storage_usd, transfer_usd=transfer_usd, retry_usd=retry_usd,
                     total_usd=compute + storage_usd + transfer_usd + retry_usd)


def billed_cost(plain: PlainCost, *, increment_s: float = 1.0, min_billed_s: float = 0.0,
                startup_s: float = 0.0, idle_tail_s: float = 0.0) -> BilledCost:
    """The plain run as a provider bills it: one start, with startup and idle tail paid for."""
    billed_s = round_bill(startup_s + plain.hours * HOUR_S + idle_tail_s, increment_s, min_billed_s)
    compute = plain.usd_per_gpu_hour * plain.gpus * billed_s / HOUR_S
    total = compute + plain.storage_usd + plain.transfer_usd + plain.retry_usd
    return BilledCost(increment_s=increment_s, min_billed_s=min_billed_s, startup_s=startup_s,
                      idle_tail_s=idle_tail_s, billed_hours=billed_s / HOUR_S, compute_usd=compute,
                      total_usd=total, difference_usd=total - plain.total_usd)


def _positive(flag: str, value: float | None) -> float:
    if value is None or not value > 0:
        raise SpecError(f"--{flag} is {'missing' if value is None else value}.",
                        f"The calculator needs a positive {flag}.", f"Pass --{flag} with a value above zero.")
    return float(value)
