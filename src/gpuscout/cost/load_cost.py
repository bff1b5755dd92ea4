"""What serving costs at the throughput a load test measured (docs/measurement.md §1, docs/cost.md §5.3).

    usd_per_1m_output_tokens  = usd_per_s / output_tokens_per_s × 1e6
    usd_per_request           = usd_per_s / requests_per_s
    usd_per_1m_goodput_tokens = usd_per_s / goodput_output_tokens_per_s × 1e6

    usd_per_1000_images       = usd_per_s / images_per_s × 1000              (image generations)
    prefix_saving_usd_per_1m_output_tokens = usd_per_1m_output_tokens of the control run (same
        lengths, no shared prefix: `load --prefix-control`) − that of the shared-prefix run

where usd_per_s is the instance's hourly price (after discount, converted to USD) / 3600: the
server is billed for every second whether or not it is busy, so this is the price at the measured
load, not at some better-packed one. Goodput tokens are the output tokens of requests that met every
SLO; when the case has no `goodput_output_tokens_per_s` metric they are estimated as goodput_rps ×
the mean output tokens per request (output_tokens_per_s / requests_per_s), exact for a fixed output
length.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import ExchangeRate, to_usd
from gpuscout.hardware.offers import Offer, instance_price_per_hour
from gpuscout.results.schema import Case
from gpuscout.units import HOUR_S

GOODPUT_TOKENS_METRIC = "goodput_output_tokens_per_s"
CONTROL_SUFFIX = ", no shared prefix"  # the name `load --prefix-control` gives a level's control case


class LoadCost(Frozen):
    usd_per_hour: float
    price_source: str  # the offer id, or "--usd-per-hour"
    usd_per_1m_output_tokens: float | None  # None when nothing was produced
    usd_per_request: float | None
    usd_per_1m_goodput_tokens: float | None  # None without an SLO or when no request met it
    notes: tuple[str, ...] = ()
    usd_per_1000_images: float | None = None  # image generations
    # What the prefix cache saved: the control run's $/1M output tokens − this run's (--prefix-control).
    prefix_saving_usd_per_1m_output_tokens: float | None = None
    prefix_cache_hit_rate: float | None = None  # the hit rate behind that saving (server cached_tokens or /metrics)


def offer_usd_per_hour(offer: Offer, rates: Sequence[ExchangeRate] = ()) -> float:
    """The whole instance's hourly price after discount, in USD."""
    return to_usd(instance_price_per_hour(offer), offer.currency, rates)


def price_load(case: Case, usd_per_hour: float, *, price_source: str = "--usd-per-hour") -> LoadCost:
    """$/1M output tokens, $/request and $/1M goodput tokens of `case` at `usd_per_hour`."""
    if not usd_per_hour > 0:
        raise SpecError(f"The hourly price is {usd_per_hour}.", "Cost per token needs a positive price.",
                        "Pass --usd-per-hour with a value above zero, or an offer.")
    usd_per_s = usd_per_hour / HOUR_S
    values = {metric.name: metric.value for metric in case.metrics}
    notes: list[str] = []
    tokens_per_s = values.get("output_tokens_per_s")
    requests_per_s = values.get("requests_per_s")
    goodput_tokens_per_s, note = _goodput_tokens_per_s(values)
    notes += [note] if note else []
    images = values.get("images_per_s")
    if images is not None:
        notes = [n for n in notes if not n.startswith("no goodput")]
    return LoadCost(usd_per_hour=usd_per_hour, price_source=price_source,
                    usd_per_1m_output_tokens=_per(usd_per_s, tokens_per_s, 1e6),
                    usd_per_request=_per(usd_per_s, requests_per_s, 1.0),
                    usd_per_1m_goodput_tokens=_per(usd_per_s, goodput_tokens_per_s, 1e6), notes=tuple(notes),
                    usd_per_1000_images=_per(usd_per_s, images, 1000.0) if images is not None else None)


def price_load_cases(cases: Sequence[Case], usd_per_hour: float, *, price_source: str = "--usd-per-hour",
                     example: bool = False) -> tuple[LoadCost, ...]:
    """Every case priced, and each shared-prefix case's saving against its control case (same level)."""
    costs = [price_load(c, usd_per_hour, price_source=price_source) for c in cases]
    if example:
        costs = [c.model_copy(update={"notes": (*c.notes, f"{price_source} is an example price, not a quote")})
                 for c in costs]
    by_name = {case.name: cost for case, cost in zip(cases, costs, strict=True)}
    priced = []
    for case, cost in zip(cases, costs, strict=True):
        control = by_name.get(case.name + CONTROL_SUFFIX)
        values = {m.name: m.value for m in case.metrics}
        hit = values.get("prefix_cache_hit_rate", values.get("server_prefix_cache_hit_rate"))
        if control is not None and control.usd_per_1m_output_tokens and cost.usd_per_1m_output_tokens:
            cost = cost.model_copy(update={
                "prefix_saving_usd_per_1m_output_tokens": control.usd_per_1m_output_tokens
                - cost.usd_per_1m_output_tokens, "prefix_cache_hit_rate": hit})
        elif hit is not None:
            cost = cost.model_copy(update={"prefix_cache_hit_rate": hit})
        priced.append(cost)
    return tuple(priced)


def price_load_cases_on_offer(cases: Sequence[Case], offer: Offer,
                              rates: Sequence[ExchangeRate] = ()) -> tuple[LoadCost, ...]:
    return price_load_cases(cases, offer_usd_per_hour(offer, rates), price_source=offer.id, example=offer.example)


def _goodput_tokens_per_s(values: dict[str, float]) -> tuple[float | None, str]:
    if GOODPUT_TOKENS_METRIC in values:
        return values[GOODPUT_TOKENS_METRIC], ""
    goodput, tokens, requests = (values.get(k) for k in ("goodput_rps", "output_tokens_per_s", "requests_per_s"))
    if goodput is None or not tokens or not requests:
        return None, "no goodput measured (no SLO given, or no completed requests): $/1M goodput tokens not priced"
    return goodput * tokens / requests, ("goodput tokens estimated as goodput_rps × mean output tokens per request "
                                         "(exact for a fixed output length)")


def _per(usd_per_s: float, rate: float | None, scale: float) -> float | None:
    """usd_per_s / rate × scale; None when nothing was produced (the cost per unit is unbounded)."""
    if rate is None or rate <= 0:
        return None
    return usd_per_s / rate * scale
