"""Comparing results of the same job on different machines: fairness first, then ratios with CIs.

A comparison is only meaningful when every fixed variable (docs/measurement.md §1.1) is equal, so
the fixed variables, the job as run, the library, driver and CUDA versions, the region and the
billing type are diffed before anything else (`results.fairness`). The machine itself (GPU,
clocks, CPU) is what is being compared: it is listed, never flagged. Each machine also carries
what its telemetry saw that disturbs its timings (throttling, a degraded link, a shared GPU, CPU
contention), which keeps the verdict from naming a winner (`results.verdict`).

Ratios (`results.ratios`) are "advantage" figures oriented by `Metric.higher_is_better`, so a
value above 1 always means "better than the baseline" (the first result). Their 95% intervals
come from a seeded two-level bootstrap over runs and the samples within each run, and each is
judged noisy, no measurable or meaningful difference, below the noise floor, better or worse
(docs/measurement.md §1.4).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import find_gpu
from gpuscout.results.fairness import (
    Fairness,
    check_fairness,
    endpoint_parts,
    labels,
    machine_fields,
    unfair_error,
)
from gpuscout.results.ratios import CompareOptions, Ratio, noise, ratio
from gpuscout.results.schema import BenchResult, Case, Failure, Metric, PeakMemory

# Case parameters that are sizes of the work: a case whose size differs from the job's is other work.
SIZE_KEYS = frozenset({"concurrency", "micro_batch", "seq_len", "batch", "width", "height", "steps",
                       "prompt_tokens", "output_tokens", "images"})
# The metric that says how fast the whole job goes, by kind, in order of preference: the whole-job
# time (workload/jobtime.py, the figure compare --offers bills), else a throughput (older results,
# and load tests, whose throughput is measured over the whole run).
HEADLINE_METRICS = {"finetune": ("job_s", "tokens_per_s", "samples_per_s"),
                    "inference": ("job_s", "requests_per_s", "output_tokens_per_s"),
                    "image": ("job_s", "images_per_s"),
                    "load": ("output_tokens_per_s", "requests_per_s")}


class Machine(Frozen):
    label: str  # "A", "B", … in the order given; A is the baseline
    name: str  # the result's own name
    gpu: str  # "1× H100 SXM5 80GB" (catalog name), or "CPU: model"
    details: dict[str, str | int | float | bool | None]
    complete: bool
    runs: int = 1  # the most runs behind any of its cases
    # Telemetry findings that make its timings incomparable (throttling, a degraded link, a shared
    # device, CPU contention or steal), one line each with the case and run (docs/measurement.md §1.13).
    disturbances: tuple[str, ...] = ()
    telemetry_runs: int = 0  # case runs that recorded telemetry (0: none, e.g. a schema-1 result)
    # The doctor's verdict on this machine (a doctor result's own, or the one a bench result carries)
    # and its findings that did not pass, one line each (docs/doctor.md §5).
    doctor: str | None = None
    doctor_lines: tuple[str, ...] = ()


class Stat(Frozen):
    mean: float
    p50: float | None
    p95: float | None
    n: int
    runs: int = 1
    between_run_cv: float | None = None  # std of the run means / their mean (None: one run)


class MetricRow(Frozen):
    name: str
    unit: str
    higher_is_better: bool
    extrapolated: bool
    note: str
    stats: tuple[Stat, ...]
    ratios: tuple[Ratio, ...]  # per result, against the first


class MemoryCell(Frozen):
    peak: PeakMemory
    peak_bytes: int | None  # the most inclusive measured peak (NVML, else reserved, allocated, RSS)
    peak_source: str
    device_total_bytes: int | None
    headroom_bytes: int | None
    extrapolated_headroom_bytes: int | None  # for the full-depth model, when depth-sliced


class CaseRow(Frozen):
    name: str
    params: dict[str, str | int | float | bool | None]
    layers: tuple[int | None, ...]
    metrics: tuple[MetricRow, ...]
    failures: tuple[Failure | None, ...]
    memory: tuple[MemoryCell, ...]
    startup: tuple[dict[str, float], ...]


class Headline(Frozen):
    """The metric that sets how long the whole job takes, and every pairwise advantage on it."""

    case: str
    metric: str
    extrapolated: bool
    # advantage[i][j]: how many times better j is than i (same orientation as Ratio.advantage)
    advantage: tuple[tuple[Ratio, ...], ...]
    # Per machine, why its figure is too noisy to decide on ("" when it is not): the verdict names the
    # side by its label, which a pairwise ratio ("the baseline", "this side") cannot.
    noise: tuple[str, ...] = ()


class Comparison(Frozen):
    kind: str
    options: CompareOptions = CompareOptions()
    job_name: str
    machines: tuple[Machine, ...]
    fairness: Fairness
    allow_diff: bool
    cases: tuple[CaseRow, ...]
    unmatched_cases: dict[str, tuple[str, ...]]  # case name → labels of the results that have it
    headline: Headline | None


def compare_results(results: Sequence[BenchResult], *, allow_diff: bool = False,
                    options: CompareOptions | None = None) -> Comparison:
    """Side-by-side comparison; raise UnfairComparisonError when fixed variables differ, unless allowed."""
    opts = options or CompareOptions()
    check_comparable(results)
    machines = tuple(describe_machine(r, label) for r, label in zip(results, labels(len(results)), strict=True))
    fairness = check_fairness(results)
    if not fairness.fair and not allow_diff:
        raise unfair_error(fairness, [m.label for m in machines])
    names = list(dict.fromkeys(c.name for r in results for c in r.cases))
    having = {n: tuple(m.label for m, r in zip(machines, results, strict=True) if find_case(r, n)) for n in names}
    everywhere = [n for n in names if len(having[n]) == len(results)]
    unmatched = {n: labels_ for n, labels_ in having.items() if len(labels_) < len(results)}
    bench = results[0].kind != "load"
    cases = tuple(compare_case([_case(r, n) for r in results], opts, bench=bench) for n in everywhere)
    return Comparison(kind=results[0].kind, options=opts, job_name=str(results[0].job.get("name", results[0].name)),
                      machines=machines, fairness=fairness, allow_diff=allow_diff, cases=cases,
                      unmatched_cases=unmatched, headline=headline(results, opts))


def check_comparable(results: Sequence[BenchResult]) -> None:
    if len(results) < 2:
        raise SpecError(f"compare needs at least two results; got {len(results)}.",
                        "A comparison sets one machine's measurements against another's.",
                        "Pass two or more result files: gpuscout compare A.json B.json.")
    kinds = [r.kind for r in results]
    if len(set(kinds)) > 1:
        raise SpecError(f"The results are of different kinds: {', '.join(kinds)}.",
                        "A fine-tune, an inference and an image benchmark measure different work; "
                        "their numbers cannot be set against each other.",
                        "Compare results of the same job spec run with `gpuscout bench` on each machine.")


def describe_machine(result: BenchResult, label: str) -> Machine:
    fp = result.fingerprint
    details: dict[str, str | int | float | bool | None] = {
        k: v if v is None or isinstance(v, str | int | float | bool) else str(v)
        for k, v in machine_fields(result).items()}
    url = result.job.get("url")
    if fp.gpu_count and (fp.gpu_name or fp.gpu_sku) and result.fixed.device != "cpu":
        gpu = f"{fp.gpu_count}× {catalog_name(fp.gpu_sku) or fp.gpu_name}"
    elif result.kind == "load" and isinstance(url, str):  # the client's CPU is not what was measured
        gpu = endpoint_parts(url)[0]
    else:
        gpu = f"CPU: {fp.cpu_model}"
    verdict = result.doctor
    return Machine(label=label, name=result.name, gpu=gpu, details=details, complete=result.complete,
                   runs=max((c.runs for c in result.cases), default=1), disturbances=disturbances(result),
                   telemetry_runs=sum(len(c.telemetry) for c in result.cases),
                   doctor=verdict.outcome if verdict else None,
                   doctor_lines=tuple(f"{f.status}: {f.message}" for f in verdict.findings
                                      if f.status in ("fail", "warn", "error")) if verdict else ())


def disturbances(result: BenchResult) -> tuple[str, ...]:
    """The telemetry findings that make a result's timings incomparable, per case and run."""
    out = []
    for case in result.cases:
        for run, telemetry in enumerate(case.telemetry, 1):
            where = f"{case.name}" + (f", run {run}" if len(case.telemetry) > 1 else "")
            out += [f"{where}: {f.message}" for f in telemetry.findings if f.side_effect]
    return tuple(out)


def catalog_name(sku: str | None) -> str | None:
    try:
        return find_gpu(sku).name if sku else None
    except GpuscoutError:
        return None


def short_name(machine: Machine) -> str:
    """"B (H100 SXM)": the label and the GPU without its count when there is one."""
    gpu = machine.gpu.split("× ", 1)[-1] if machine.gpu.startswith(tuple("0123456789")) else machine.gpu
    return f"{machine.label} ({gpu})"


# ---------------------------------------------------------------- side by side --------------

def find_case(result: BenchResult, name: str) -> Case | None:
    return next((c for c in result.cases if c.name == name), None)


def _case(result: BenchResult, name: str) -> Case:
    case = find_case(result, name)
    if case is None:
        raise KeyError(name)
    return case


def metric_key(metric: Metric) -> tuple[str, bool]:
    return metric.name, metric.extrapolated


def compare_case(cases: Sequence[Case], options: CompareOptions, *, bench: bool) -> CaseRow:
    by_key = [{metric_key(m): m for m in c.metrics} for c in cases]
    shared = [k for k in by_key[0] if all(k in other for other in by_key[1:])]
    rows = tuple(compare_metric([m[k] for m in by_key], options, bench=bench) for k in shared)
    return CaseRow(name=cases[0].name, params=cases[0].params, layers=tuple(c.layers for c in cases), metrics=rows,
                   failures=tuple(c.failure for c in cases), memory=tuple(memory_cell(c) for c in cases),
                   startup=tuple({p.name: p.seconds for p in c.startup} for c in cases))


def compare_metric(metrics: Sequence[Metric], options: CompareOptions, *, bench: bool) -> MetricRow:
    base = metrics[0]
    return MetricRow(name=base.name, unit=base.unit, higher_is_better=base.higher_is_better,
                     extrapolated=base.extrapolated, note=base.note, stats=tuple(stat(m) for m in metrics),
                     ratios=tuple(ratio(base, m, options=options, bench=bench, is_baseline=i == 0)
                                  for i, m in enumerate(metrics)))


def stat(metric: Metric) -> Stat:
    s = metric.summary
    n = s.n if s else max(len(metric.samples), 1)
    return Stat(mean=metric.value, p50=s.p50 if s else None, p95=s.p95 if s else None, n=n,
                runs=max(len(metric.runs), 1), between_run_cv=metric.between_run_cv)


def memory_cell(case: Case) -> MemoryCell:
    pm = case.peak_memory
    sources = (("NVML device use", pm.nvml_used_bytes), ("torch reserved", pm.torch_reserved_bytes),
               ("torch allocated", pm.torch_allocated_bytes), ("process RSS", pm.process_rss_bytes))
    source, peak = next(((s, v) for s, v in sources if v is not None), ("", None))
    total = pm.device_total_bytes
    headroom = total - peak if total is not None and peak is not None and source != "process RSS" else None
    extra = pm.extrapolated_allocated_bytes
    return MemoryCell(peak=pm, peak_bytes=peak, peak_source=source, device_total_bytes=total,
                      headroom_bytes=headroom,
                      extrapolated_headroom_bytes=total - extra if total is not None and extra is not None else None)


# ---------------------------------------------------------------- the job's headline --------

def headline_metric(result: BenchResult) -> tuple[Case, Metric]:
    """The case run at the job's own sizes and its throughput metric (extrapolated when sliced).

    A case whose size (concurrency, batch, sequence length …) differs from the job's measures other
    work, so it never stands in for the job's own case, even when that one failed. A depth-sliced
    case ran fewer layers than the job; only its extrapolated figure (`<name>_full_depth`,
    `extrapolated = True`) describes the whole model.
    """
    names = HEADLINE_METRICS.get(result.kind, ())
    if not names:
        raise SpecError(f"{result.name}: a {result.kind} result has no whole-job throughput.",
                        "Only fine-tune, inference and image results measure the job's own work.",
                        "Run `gpuscout bench JOB.toml` for the job to compare or price.")
    own = [c for c in result.cases if all(result.job.get(k, v) == v for k, v in c.params.items() if k in SIZE_KEYS)]
    failed = [c.failure for c in own if c.failure is not None]
    for name in names:
        for case in (c for c in own if c.failure is None):
            sliced = (case.layers is not None and case.layers != case.full_layers) or bool(result.fixed.layers)
            found = [m for m in case.metrics if (m.extrapolated and m.name in (name, f"{name}_full_depth"))
                     or (not sliced and not m.extrapolated and m.name == name)]
            if found:
                return case, found[0]
    why = (f"the job's own case failed ({failed[0].kind}: {failed[0].message.splitlines()[0][:120]})" if failed
           else "depth-sliced results need the extrapolated figure" if result.fixed.layers
           else "no case at the job's own sizes reports it")
    raise SpecError(f"{result.name}: no whole-job throughput ({' or '.join(names)}): {why}.",
                    "The whole job's time comes from the throughput measured at the job's own batch, "
                    "sequence length and concurrency.",
                    "Re-run `gpuscout bench` with the job spec on a machine where its case fits; check the "
                    "result's failures.")


def headline(results: Sequence[BenchResult], options: CompareOptions) -> Headline | None:
    try:
        picks = [headline_metric(r) for r in results]
    except SpecError:
        return None
    case, metric = picks[0]
    if any((c.name, metric_key(m)) != (case.name, metric_key(metric)) for c, m in picks):
        return None
    metrics = [m for _, m in picks]
    bench = results[0].kind != "load"
    matrix = tuple(tuple(ratio(a, b, options=options, bench=bench, is_baseline=i == j) for j, b in enumerate(metrics))
                   for i, a in enumerate(metrics))
    noisy = tuple(noise(m, label, options, bench) for m, label in zip(metrics, labels(len(results)), strict=True))
    return Headline(case=case.name, metric=metric.name, extrapolated=metric.extrapolated, advantage=matrix,
                    noise=noisy)
