"""Merging independent runs of one case into one record: every sample kept by run.

`bench --runs N` and `load --runs N` run each case N times, each in a fresh process (or a fresh
client), interleaved with the other cases. `merge_runs` turns the N records into one `Case`:
per metric the samples of every run (`Metric.runs`), the pooled samples and summary, the mean of
the run means as the value, and the between-run coefficient of variation; the highest peak
memory of any run; the telemetry of every run; and the runs that failed while others finished.
A metric measured once per run (a load level's throughput) becomes one sample per run, so its
interval comes from the variation between runs.

Shared vocabulary like `results.schema`: the bench and the load generator both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuscout.results.schema import Case, Metric, PeakMemory, RunSamples
from gpuscout.stats import between_run_cv, run_mean, summarize


def merge_runs(runs: Sequence[Case]) -> Case:
    """One case from its runs (in run order); a case with one run comes back as it was."""
    if len(runs) == 1:
        return runs[0]
    finished = [c for c in runs if c.failure is None]
    failed = tuple(c.failure for c in runs if c.failure is not None)
    telemetry = tuple(t for c in runs for t in c.telemetry)
    wall = sum(c.wall_s for c in runs)
    if not finished:
        return runs[0].model_copy(update={"runs": len(runs), "failed_runs": failed[1:], "telemetry": telemetry,
                                          "wall_s": wall})
    first = finished[0]
    notes = list(dict.fromkeys(n for c in finished for n in c.notes))
    if failed:
        notes.append(f"{len(failed)} of {len(runs)} runs failed ({', '.join(f.kind for f in failed)}); the "
                     f"metrics come from the {len(finished)} that finished")
    return first.model_copy(update={
        "metrics": merge_metrics(finished), "peak_memory": highest_peak(c.peak_memory for c in finished),
        "runs": len(runs), "failed_runs": failed, "telemetry": telemetry, "wall_s": wall, "notes": tuple(notes)})


def merge_metrics(runs: Sequence[Case]) -> tuple[Metric, ...]:
    """Each metric of the first run, merged with the same metric of the others (where they have it)."""
    merged = []
    for metric in runs[0].metrics:
        same = [m for c in runs for m in c.metrics if (m.name, m.extrapolated) == (metric.name, metric.extrapolated)]
        merged.append(merge_metric(same))
    return tuple(merged)


def merge_metric(per_run: Sequence[Metric]) -> Metric:
    """One metric from its runs: per-run samples (a single reading is one sample), pooled summary."""
    groups = [m.samples if m.samples else (m.value,) for m in per_run]
    pooled = [v for g in groups for v in g]
    runs = tuple(RunSamples(samples=tuple(g), summary=summarize(g)) for g in groups)
    return per_run[0].model_copy(update={"value": run_mean(groups), "samples": tuple(pooled),
                                         "summary": summarize(pooled), "runs": runs,
                                         "between_run_cv": between_run_cv(groups)})


def highest_peak(peaks: Iterable[PeakMemory]) -> PeakMemory:
    """Field by field, the highest peak any run reached: memory must fit in the worst run."""
    peaks = list(peaks)
    fields: dict[str, int | None] = {}
    for name in PeakMemory.model_fields:
        values = [getattr(p, name) for p in peaks if getattr(p, name) is not None]
        fields[name] = max(values) if values else None
    return PeakMemory(**fields)


def metric_runs(metric: Metric) -> list[list[float]]:
    """The metric's samples grouped by run: one group when it ran once (or a single reading)."""
    if metric.runs:
        return [list(r.samples) for r in metric.runs]
    return [list(metric.samples) if metric.samples else [metric.value]]
