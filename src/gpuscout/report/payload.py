"""`--json`: each command's result as plain JSON data (numbers stay numbers, in SI units).

The shapes are stable for scripts: every key a previous release printed is still printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscout.cost.billing import JobCost
from gpuscout.cost.calculator import BilledCost, PlainCost
from gpuscout.cost.load_cost import LoadCost
from gpuscout.cost.pick import PickResult
from gpuscout.documents.beside import load_beside
from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.screen import Screening
from gpuscout.estimator.serving.replica import ReplicaCapacity
from gpuscout.hardware.catalog import Gpu
from gpuscout.hardware.currency import DisplayCurrency, ExchangeRate, from_usd
from gpuscout.hardware.offers import Offer
from gpuscout.loadgen.search import SearchResult
from gpuscout.report.load_prediction import prediction_errors
from gpuscout.report.unvouched import unvouched_payload
from gpuscout.results.beside import EstimateBeside
from gpuscout.results.schema import BenchResult
from gpuscout.trace.llm import TraceResult
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.job import Job, Slo
from gpuscout.workload.model import Model
from gpuscout.workload.video import VideoModelShape


def estimate_payload(job: Job, screening: Screening, trace: TraceResult | None = None,
                     trace_analytic: MemoryBreakdown | None = None,
                     capacities: Sequence[tuple[str, ReplicaCapacity | str]] = ()) -> dict[str, Any]:
    payload: dict[str, Any] = {"job": job.model_dump(), "screening": screening.model_dump()}
    if capacities:  # a serving job: what one replica holds, simulated, per named GPU (or why not)
        payload["capacity"] = {sku: cap if isinstance(cap, str) else cap.model_dump() for sku, cap in capacities}
    if trace is not None and trace_analytic is not None:
        payload |= {"trace": trace.model_dump(), "trace_analytic": trace_analytic.model_dump()}
    return payload


def pick_payload(job: Job, result: PickResult, notes: Sequence[str]) -> dict[str, Any]:
    """The ranking; each row's `_usd` amounts stay in USD, and `in_currency` gives them in the
    display currency (`pick.currency`, with the rate it used) (docs/cost.md §3)."""
    pick = result.model_dump(mode="json")
    for row, dumped in zip(result.rows, pick["rows"], strict=True):
        dumped["in_currency"] = _in_currency(row.total_usd, row.total_p95_usd, row.unit_costs_usd, result.currency)
        dumped["in_currency"] |= {"total_low": _conv(row.total_low_usd, result.currency),
                                  "total_high": _conv(row.total_high_usd, result.currency)}
    if result.trial is not None:  # the trial advice's amounts in the display currency too
        trial = result.trial
        pick["trial"]["in_currency"] = {"currency": result.currency.code,
                                        "stake": _conv(trial.stake_usd, result.currency),
                                        "trial": from_usd(trial.trial_usd, result.currency),
                                        "trials": [from_usd(t.total_usd, result.currency) for t in trial.trials]}
    return {"job": job.model_dump(), "pick": pick, "offers_notes": list(notes),
            "unvouched": unvouched_payload(result.rows)}  # placeholders, unknown interruption risk


def _conv(usd: float | None, shown: DisplayCurrency) -> float | None:
    return None if usd is None else from_usd(usd, shown)


def _in_currency(total_usd: float | None, p95_usd: float | None, units_usd: dict[str, float],
                 shown: DisplayCurrency) -> dict[str, Any]:
    def conv(usd: float | None) -> float | None:
        return None if usd is None else from_usd(usd, shown)

    return {"currency": shown.code, "total": conv(total_usd), "total_p95": conv(p95_usd),
            "unit_costs": {k.removeprefix("usd_"): from_usd(v, shown) for k, v in units_usd.items()}}


def bill_payload(offer: Offer, bill: JobCost, rates: Sequence[ExchangeRate] = ()) -> dict[str, Any]:
    return {"offer": offer.model_dump(mode="json"), "bill": bill.model_dump(), "total": bill.total,
            "currency": bill.currency, "exchange_rates": [r.model_dump(mode="json") for r in rates]}


def calculator_payload(plain: PlainCost, billed: BilledCost | None,
                       shown: DisplayCurrency | None = None) -> dict[str, Any]:
    """The USD figures as before, and with a display currency its code, rate and the totals in it."""
    payload = {**plain.model_dump(), "billed": billed.model_dump() if billed else None}
    if shown is not None:
        payload["currency"] = shown.model_dump(mode="json")
        payload["total"] = from_usd(plain.total_usd, shown)
        payload["billed_total"] = from_usd(billed.total_usd, shown) if billed else None
    return payload


def bench_payload(result: BenchResult, beside: EstimateBeside | None) -> dict[str, Any]:
    """The result as `-o` writes it, plus "estimate": gpuscout's estimate beside it (null off a GPU)."""
    return {**result.model_dump(mode="json"), "estimate": beside.model_dump(mode="json") if beside else None}


def load_payload(result: BenchResult, costs: Sequence[LoadCost], search: SearchResult | None,
                 slo: Slo | None = None) -> dict[str, Any]:
    """The result, its costs and search, and the SLO it was judged against (`gpuscout report` draws its lines):
    what `-o` writes too (`documents.beside`); and the simulator's prediction beside the measurement."""
    payload: dict[str, Any] = {**result.model_dump(mode="json"), **load_beside(result.cases, costs, search, slo)}
    errors = prediction_errors(result)
    if errors:  # the simulator's prediction beside the measurement, per level and metric
        payload["prediction_errors"] = errors
    return payload


def model_payload(shape: Model, weights: dict[str, int],
                  kv_by_dtype: dict[str, int]) -> dict[str, Any]:
    if isinstance(shape, ImageModelShape):
        return {"kind": "image", **shape.model_dump(), "params_total": shape.params_total}
    if isinstance(shape, VideoModelShape):
        return {"kind": "video", **shape.model_dump(), "params_total": shape.params_total}
    return {"kind": "llm", "params_total": shape.params_total, "params_active": shape.params_active,
            "kv_cache_bytes_per_token": kv_by_dtype["bf16"], "kv_cache_bytes_per_token_by_dtype": kv_by_dtype,
            "weight_bytes_by_format": weights, "shape": shape.model_dump()}


def catalog_payload(gpus: Sequence[Gpu]) -> list[dict[str, Any]]:
    return [g.model_dump() for g in gpus]
