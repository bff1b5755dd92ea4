"""Steady state: over-saturation, the plateau between ramp-up and drain, and how far a percentile can be trusted.

**Over-saturation** (docs/measurement.md §2.10). An open-loop server that cannot keep up builds a
queue that grows for as long as requests keep arriving, and so does every latency measured from
the intended send; the level's numbers then describe how long it ran, not the server. GuideLLM
stops such a run when concurrency and TTFT both trend upwards (its over-saturation detector);
gpuscout asks the same two questions of the requests so far, at time T after t0 (at least
`MIN_JUDGE_S` and `MIN_FINISHED` answers in):

* is the queue growing? in flight now − in flight at T/2 > `QUEUE_GROWTH` × in flight now +
  `SLACK_REQUESTS` (a queue growing at a steady pace gains half of its length in the second half);
* is the wait growing? the median wait (first chunk − intended send) of the requests answered in
  the last quarter of the time so far > `GROWTH` × that of those answered in the first quarter +
  `SLACK_S` (when none was answered lately, the oldest request still waiting stands in for them).

Both, in two checks in a row (`monitor`), stop the level with the reason.

**Plateau.** Throughput over the whole run mixes in the ramp-up (the first requests find an empty
server) and the drain (the last ones find it emptying). The plateau runs from the first completed
request (from then on every send meets a full pipeline) to the last send (after it, nothing
replaces a finished request). Tokens are counted by their chunks' arrival inside it.

**Percentile bounds.** With n samples, the k-th smallest X(k) is above the true p-quantile with
probability P(Binomial(n, p) ≤ k − 1), whatever the distribution (an order statistic). The smallest
k giving `CONFIDENCE` is a distribution-free upper confidence bound on the percentile; when even
X(n) is not enough (n < ln(1 − c) / ln p: 59 samples for P95, 299 for P99 at 95%), the percentile
cannot be bounded from the run. MLPerf's early-stopping rule is this test, applied to the share of
queries over a latency bound (mlcommons/inference_policies, early-stopping appendix).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_JUDGE_S = 5.0
MIN_FINISHED = 20
QUEUE_GROWTH = 0.3
GROWTH = 2.0
SLACK_REQUESTS = 4
SLACK_S = 0.05
CONFIDENCE = 0.95
MIN_PLATEAU_FRACTION = 0.2  # a plateau shorter than this share of the run is not one


def oversaturated(requests: Sequence[tuple[float, float | None, float | None]], now: float, t0: float) -> str | None:
    """Why the open-loop level is over-saturated, or None. Each request: (intended, first chunk, end)."""
    elapsed = now - t0
    finished = sum(1 for _, _, end in requests if end is not None)
    if elapsed < MIN_JUDGE_S or finished < MIN_FINISHED:
        return None
    half = t0 + elapsed / 2
    in_flight_now = sum(1 for sent, _, end in requests if sent <= now and end is None)
    in_flight_half = sum(1 for sent, _, end in requests if sent <= half and (end is None or end > half))
    if in_flight_now - in_flight_half <= QUEUE_GROWTH * in_flight_now + SLACK_REQUESTS:
        return None
    early = [first - sent for sent, first, _ in requests if first is not None and first < t0 + elapsed / 4]
    late = [first - sent for sent, first, _ in requests if first is not None and first >= t0 + 3 * elapsed / 4]
    waiting = [now - sent for sent, first, _ in requests if first is None and sent <= now]
    if not late and waiting:  # nothing answered lately: the oldest request still waiting is the bound
        late = [max(waiting)]
    if not early or not late:
        return None
    early_wait, late_wait = statistics.median(early), statistics.median(late)
    if late_wait <= GROWTH * early_wait + SLACK_S:
        return None
    return (f"requests in flight grew from {in_flight_half} to {in_flight_now} in {elapsed / 2:.1f} s and the "
            f"wait for a first token from {early_wait:.3g} s to {late_wait:.3g} s: the server falls further "
            "behind for as long as requests arrive (lower the rate)")


def plateau(sends: Sequence[float], ends: Sequence[float], wall_s: float) -> tuple[float, float] | None:
    """(start, end) of the steady plateau: first completion → last send; None when too short to be one."""
    if not sends or not ends:
        return None
    start, end = min(ends), max(sends)
    if end - start < MIN_PLATEAU_FRACTION * wall_s or end <= start:
        return None
    return start, end


def upper_bound_rank(n: int, p: float, confidence: float = CONFIDENCE) -> int | None:
    """The smallest k with P(X(k) ≥ the p-quantile) ≥ confidence among n samples; None when k > n."""
    if n <= 0 or not 0 < p < 1:
        return None
    if 1 - p ** n < confidence:
        return None
    log_odds, log_pmf, cdf = math.log(p / (1 - p)), n * math.log1p(-p), 0.0
    for j in range(n):
        cdf += math.exp(log_pmf)
        if cdf >= confidence:
            return j + 1
        log_pmf += math.log((n - j) / (j + 1)) + log_odds
    return n


def samples_for_bound(p: float, confidence: float = CONFIDENCE) -> int:
    """Fewest samples whose largest can bound the p-quantile: ⌈ln(1 − c) / ln p⌉."""
    return math.ceil(math.log(1 - confidence) / math.log(p) - 1e-9)


def percentile_bound(samples: Sequence[float], q: float, confidence: float = CONFIDENCE) -> float | None:
    """The order-statistic upper confidence bound on the q-th percentile (q in 0–100), or None."""
    k = upper_bound_rank(len(samples), q / 100, confidence)
    return None if k is None else sorted(samples)[k - 1]
