"""The network probe as one case of a result: `gpuscout doctor --url URL` (docs/doctor.md §4.4).

Round trip and download throughput from this machine to a URL the user gives: the network probe
(`loadgen.probe`) with the URL as its own download target. A URL that does not answer is a failed
case with the reason, so the doctor marks the check failed and goes on.
"""

from __future__ import annotations

import asyncio
import time

from gpuscout.errors import GpuscoutError
from gpuscout.loadgen.probe import ProbeResult, probe
from gpuscout.redact import redact_url
from gpuscout.results.schema import Case, Failure, Metric, Scalar
from gpuscout.stats import summarize

NAME = "network"


def network_case(url: str, *, repeats: int = 5, timeout_s: float = 5.0) -> Case:
    """Probe `url` (round trips, then downloads of it); a refusal, a timeout or a bad URL is a failed case."""
    start = time.perf_counter()
    shown = redact_url(url)
    params: dict[str, Scalar] = {"url": shown, "repeats": repeats}
    try:
        result = asyncio.run(probe(url, repeats=repeats, download_url=url, timeout_s=timeout_s))
    except GpuscoutError as exc:
        return _failed(params, exc.what + " " + exc.why, time.perf_counter() - start)
    except (OSError, TimeoutError) as exc:
        return _failed(params, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
    metrics, errors = probe_metrics(result)
    if not metrics:
        return _failed(params, "; ".join(errors) or "no measurement succeeded", time.perf_counter() - start)
    notes = tuple(f"some attempts failed: {e}" for e in errors[:3])
    return Case(name=NAME, params=params, metrics=tuple(metrics), notes=notes, wall_s=time.perf_counter() - start)


def probe_metrics(result: ProbeResult) -> tuple[list[Metric], list[str]]:
    """One metric per measure that succeeded at least once; the errors of the others."""
    metrics, errors = [], []
    for m in result.measures:
        errors += [f"{m.name}: {e}" for e in m.errors[:1]]
        if not m.samples:
            continue
        summary = summarize(list(m.samples))
        metrics.append(Metric(name=m.name, unit=m.unit, value=summary.mean, samples=m.samples, summary=summary,
                              higher_is_better=m.unit != "s", note=m.note))
    return metrics, errors


def _failed(params: dict[str, Scalar], message: str, wall_s: float) -> Case:
    failure = Failure(case=NAME, kind="unreachable", message=message[:2000], size={})
    return Case(name=NAME, params=params, failure=failure, wall_s=wall_s)
