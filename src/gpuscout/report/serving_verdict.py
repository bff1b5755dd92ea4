"""Where a serving row's SLO verdict came from, and what one replica holds, in words for `pick`.

A serving offer's verdict is simulated at the job's load (queueing counted), measured by a `load`
result, or, where the simulation cannot run, the speed model's single-request estimate (no
queueing). The screens say which, so a verdict that leaves queueing out is never mistaken for one
that counts it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.text import Text

from gpuscout.cost.pick_row import PickRow
from gpuscout.estimator.serving.replica import ReplicaCapacity
from gpuscout.report.numbers import sig

SOURCE_WORDS = {"simulated": "simulated at the job's load (queueing counted)",
                "measured": "measured by a load result",
                "single-request estimate": "a single-request estimate (no queueing)"}


def slo_legend(rows: Sequence[PickRow]) -> str | None:
    """'every ranked offer meets the latency SLO at its band's slow end: simulated at the job's load
    (queueing counted)'; with several sources, how many rows each; None when no ranked row has an SLO."""
    met = [r for r in rows if r.slo_met and r.excluded is None]
    if not met:
        return None
    counts = Counter(r.slo_source or "single-request estimate" for r in met)
    head = "every ranked offer meets the latency SLO at its band's slow end"
    if len(counts) == 1:
        return f"{head}: {SOURCE_WORDS.get(next(iter(counts)), next(iter(counts)))}"
    parts = [f"{SOURCE_WORDS.get(source, source)} for {n}" for source, n in counts.most_common()]
    return f"{head}: {'; '.join(parts)}"


def capacity_words(row: PickRow) -> str:
    """'holds 14 users a replica at the SLO', '× 2 instances (7 users a replica)' (the users need more
    replicas than one instance has), '3 replicas: 4.10 req/s each at the SLO' (a target rate), or ''."""
    if row.slo_source != "simulated" or row.excluded is not None:
        return ""
    held, rate = row.metrics.get("users_held_per_replica"), row.metrics.get("requests_per_s_held_per_replica")
    if rate is not None:
        needed = row.metrics.get("replicas_needed")
        if needed is None:
            return ""
        many = "s" if needed > 1 else ""
        return f"{needed:.0f} replica{many}: {sig(rate)} req/s each at the SLO"
    if held is not None:
        users = f"{held:.0f} user{'s' if held != 1 else ''}"
        instances = row.instances
        if instances > 1:
            return f"× {instances:.0f} instances ({users} a replica)"
        least = "≥ " if row.metrics.get("users_held_per_replica_at_least") else ""
        return f"holds {least}{users} a replica at the SLO"
    return ""


def verdict_lines(row: PickRow) -> list[str]:
    """The SLO verdict of one row in full, for --explain."""
    if row.slo_source is None:
        return []
    lines = [f"SLO verdict: {SOURCE_WORDS.get(row.slo_source, row.slo_source)}"]
    m = row.metrics
    if row.slo_source == "simulated" and "ttft_p95_s_slow_end" in m:
        users = m.get("users_per_replica")
        load = f"{users:.0f} users a replica" if users is not None else "the job's rate"
        lines.append(f"  at {load}, the band's slow end: P95 TTFT {sig(m['ttft_p95_s_slow_end'])} s, "
                     f"P95 TPOT {sig(m.get('tpot_p95_s_slow_end', 0.0))} s")
        words = capacity_words(row)
        if words:
            lines.append(f"  {words}")
    if row.slo_note:
        lines.append(f"  {row.slo_note}")
    return lines


def capacity_line(gpu_sku: str, cap: ReplicaCapacity | str) -> Text:
    """`estimate`'s capacity line for one GPU: users one replica holds at the SLO (the slow end to plan
    with, the expected beside it, per GPU), or, without an SLO, its saturated throughput."""
    if isinstance(cap, str):
        return Text(f"Capacity on {gpu_sku}: not simulated ({cap}); the speed above is a single request's",
                    style="yellow")
    replica = f"one replica = {cap.gpus} × {cap.gpu_sku}" if cap.gpus > 1 else f"one {cap.gpu_sku}"
    if cap.users_held_slow is not None and cap.users_held is not None:
        per_gpu = f", {sig(cap.users_held_slow / cap.gpus)} per GPU" if cap.gpus > 1 else ""
        return Text(f"Capacity at the SLO (simulated, {replica}): {cap.users_held_slow} users at the band's slow "
                    f"end{per_gpu} ({cap.users_held} at the expected speed); "
                    f"{sig(cap.output_tokens_per_s_slow)}–{sig(cap.output_tokens_per_s)} output tokens/s",
                    style="bold")
    per_gpu = f", {sig(cap.output_tokens_per_s / cap.gpus)} per GPU" if cap.gpus > 1 else ""
    return Text(f"Saturated throughput (simulated, {replica}, {cap.saturated_users} users, no SLO): "
                f"{sig(cap.output_tokens_per_s)} output tokens/s{per_gpu} "
                f"({sig(cap.output_tokens_per_s_slow)} at the band's slow end)", style="bold")
