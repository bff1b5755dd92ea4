"""Comparing results of the same job on different machines: fairness first, then ratios with CIs.

A comparison is only meaningful when every fixed variable (docs/measurement.md §1) is equal, so the fixed
variables, the job as run and the library versions are diffed before anything else. The machine
itself (GPU, driver, CUDA, clocks) is what is being compared: it is listed, never flagged.

Ratios are "advantage" figures oriented by `Metric.higher_is_better`, so a value above 1 always
means "better than the baseline" (the first result): for throughput mean(this)/mean(baseline), for
times mean(baseline)/mean(this). Their 95% confidence intervals come from a seeded percentile
bootstrap over the raw samples (`stats.bootstrap_ratio_ci`); an interval that contains 1.0 is
reported as "no measurable difference" (docs/measurement.md §1.4: run-to-run variance of 20%
is common, so a point ratio alone misleads).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.hardware.catalog import find_gpu
from gpuscout.results.schema import BenchResult, Case, Failure, Frozen, Metric, PeakMemory
from gpuscout.stats import bootstrap_ratio_ci

BOOTSTRAP_SEED = 0  # fixed, so the same files always give the same intervals
ABSENT = "(absent)"
Finding = Literal["baseline", "better", "worse", "no measurable difference", "single reading"]

# Fingerprint fields that describe the machine under test: listed side by side, never flagged.
MACHINE_FIELDS = ("gpu_name", "gpu_sku", "gpu_count", "gpu_memory_bytes", "driver", "cuda", "compute_capability",
                  "sm_clock_mhz", "memory_clock_mhz", "power_limit_w", "pcie_generation", "pcie_width", "mig_mode",
                  "ecc", "topology", "cpu_model", "cpu_cores", "ram_bytes", "python", "platform", "region", "billing",
                  "gpuscout_version")

# Case parameters that are sizes of the work: a case whose size differs from the job's is other work.
SIZE_KEYS = frozenset({"concurrency", "micro_batch", "seq_len", "batch", "width", "height", "steps",
                       "prompt_tokens", "output_tokens", "images"})
# The metric that says how fast the whole job goes, by kind, in order of preference.
HEADLINE_METRICS = {"finetune": ("tokens_per_s", "samples_per_s"),
                    "inference": ("requests_per_s", "output_tokens_per_s"),
                    "image": ("images_per_s",),
                    "load": ("output_tokens_per_s", "requests_per_s")}


class UnfairComparisonError(GpuscoutError):
    """The results differ in a fixed variable, so no winner can be named."""


class Machine(Frozen):
    label: str  # "A", "B", … in the order given; A is the baseline
    name: str  # the result's own name
    gpu: str  # "1× H100 SXM5 80GB" (catalog name), or "CPU: model"
    details: dict[str, str | int | float | bool | None]
    complete: bool


class Difference(Frozen):
    field: str  # "settings.seq_len", "libraries.torch", "precision" …
    values: tuple[str, ...]  # one per result, as written in the files; "(absent)" when missing


class Fairness(Frozen):
    fair: bool
    checked: int  # how many fields were compared
    differences: tuple[Difference, ...]  # fixed variables that differ: these block a verdict
    machine_differences: tuple[Difference, ...]  # what is being compared: listed, not flagged
    notes: tuple[str, ...]


class Stat(Frozen):
    mean: float
    p50: float | None
    p95: float | None
    n: int


class Ratio(Frozen):
    ratio: float  # mean(this) / mean(baseline), unoriented
    advantage: float  # > 1: better than the baseline (oriented by higher_is_better)
    ci95_low: float | None  # of the advantage; None without raw samples on both sides
    ci95_high: float | None
    finding: Finding


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


class Comparison(Frozen):
    kind: str
    job_name: str
    machines: tuple[Machine, ...]
    fairness: Fairness
    allow_diff: bool
    cases: tuple[CaseRow, ...]
    unmatched_cases: dict[str, tuple[str, ...]]  # case name → labels of the results that have it
    headline: Headline | None


def compare_results(results: Sequence[BenchResult], *, allow_diff: bool = False) -> Comparison:
    """Side-by-side comparison; raise UnfairComparisonError when fixed variables differ, unless allowed."""
    check_comparable(results)
    machines = tuple(describe_machine(r, label) for r, label in zip(results, labels(len(results)), strict=True))
    fairness = check_fairness(results)
    if not fairness.fair and not allow_diff:
        raise unfair_error(fairness, machines)
    names = list(dict.fromkeys(c.name for r in results for c in r.cases))
    having = {n: tuple(m.label for m, r in zip(machines, results, strict=True) if find_case(r, n)) for n in names}
    everywhere = [n for n in names if len(having[n]) == len(results)]
    unmatched = {n: labels_ for n, labels_ in having.items() if len(labels_) < len(results)}
    cases = tuple(compare_case([_case(r, n) for r in results]) for n in everywhere)
    return Comparison(kind=results[0].kind, job_name=str(results[0].job.get("name", results[0].name)),
                      machines=machines, fairness=fairness, allow_diff=allow_diff, cases=cases,
                      unmatched_cases=unmatched, headline=headline(results))


def labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(n)]


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
    details = {f: getattr(fp, f) for f in MACHINE_FIELDS}
    if fp.gpu_count and (fp.gpu_name or fp.gpu_sku) and result.fixed.device != "cpu":
        gpu = f"{fp.gpu_count}× {catalog_name(fp.gpu_sku) or fp.gpu_name}"
    else:
        gpu = f"CPU: {fp.cpu_model}"
    return Machine(label=label, name=result.name, gpu=gpu, details=details, complete=result.complete)


def catalog_name(sku: str | None) -> str | None:
    try:
        return find_gpu(sku).name if sku else None
    except GpuscoutError:
        return None


def short_name(machine: Machine) -> str:
    """"B (H100 SXM)": the label and the GPU without its count when there is one."""
    gpu = machine.gpu.split("× ", 1)[-1] if machine.gpu.startswith(tuple("0123456789")) else machine.gpu
    return f"{machine.label} ({gpu})"


# ---------------------------------------------------------------- fairness ------------------

def fixed_fields(result: BenchResult) -> dict[str, object]:
    """Every value a fair comparison holds equal, flattened to dotted names."""
    fixed = result.fixed
    out: dict[str, object] = {k: v for k, v in fixed.model_dump().items()
                              if k not in ("kind", "model", "data", "data_hash", "settings")}
    # The dataset's identity is its hash when both sides have one; otherwise its name.
    out["data"] = fixed.data_hash if fixed.data_hash else fixed.data
    out |= {f"settings.{k}": v for k, v in fixed.settings.items()}
    out |= {f"libraries.{k}": v for k, v in result.fingerprint.libraries.items()}
    out |= {f"job.{k}": v for k, v in result.job.items() if k != "name"}
    return out


def case_fields(result: BenchResult, results: Sequence[BenchResult]) -> dict[str, object]:
    """Parameters of the cases every result ran successfully: the same case must be the same work
    (e.g. an attention kernel that fell back to another on one machine)."""
    ok = [{c.name for c in r.cases if c.failure is None} for r in results]
    shared = set.intersection(*ok)
    return {f"case {c.name}.{k}": v for c in result.cases if c.name in shared for k, v in c.params.items()}


def diff_fields(rows: Sequence[dict[str, object]]) -> tuple[Difference, ...]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    missing = object()
    out = []
    for key in keys:
        values = [row.get(key, missing) for row in rows]
        if any(v != values[0] for v in values[1:]):
            out.append(Difference(field=key, values=tuple(ABSENT if v is missing else show(v) for v in values)))
    return tuple(out)


def show(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def check_fairness(results: Sequence[BenchResult]) -> Fairness:
    rows = [fixed_fields(r) | case_fields(r, results) for r in results]
    differences = diff_fields(rows)
    machine_rows = [{f: getattr(r.fingerprint, f) for f in MACHINE_FIELDS} for r in results]
    notes = []
    if len({r.fingerprint.gpuscout_version for r in results}) > 1:
        notes.append("The results were written by different gpuscout versions; the harness may have changed.")
    notes += [f"{label} is incomplete (interrupted, or some cases did not run)."
              for label, r in zip(labels(len(results)), results, strict=True) if not r.complete]
    notes += [f"{label} ran a depth slice of {r.fixed.layers} layers; full-depth figures are extrapolated."
              for label, r in zip(labels(len(results)), results, strict=True) if r.fixed.layers]
    return Fairness(fair=not differences, checked=len(set().union(*rows)), differences=differences,
                    machine_differences=diff_fields(machine_rows), notes=tuple(notes))


def unfair_error(fairness: Fairness, machines: Sequence[Machine]) -> UnfairComparisonError:
    heads = "/".join(m.label for m in machines)
    listed = "; ".join(f"{d.field}: {' vs '.join(d.values)}" for d in fairness.differences)
    return UnfairComparisonError(
        f"The results differ in {len(fairness.differences)} fixed variable(s) ({heads}): {listed}.",
        "A winner is only meaningful when the same work was measured the same way on every machine "
        "(docs/measurement.md §1); these differences change the numbers as much as the GPU does.",
        "Re-run `gpuscout bench` with the same job spec, settings and library versions on every machine, "
        "or pass --allow-diff to compare anyway (the report then lists the differences).")


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


def compare_case(cases: Sequence[Case]) -> CaseRow:
    by_key = [{metric_key(m): m for m in c.metrics} for c in cases]
    shared = [k for k in by_key[0] if all(k in other for other in by_key[1:])]
    rows = tuple(compare_metric([m[k] for m in by_key]) for k in shared)
    return CaseRow(name=cases[0].name, params=cases[0].params, layers=tuple(c.layers for c in cases), metrics=rows,
                   failures=tuple(c.failure for c in cases), memory=tuple(memory_cell(c) for c in cases),
                   startup=tuple({p.name: p.seconds for p in c.startup} for c in cases))


def compare_metric(metrics: Sequence[Metric]) -> MetricRow:
    base = metrics[0]
    return MetricRow(name=base.name, unit=base.unit, higher_is_better=base.higher_is_better,
                     extrapolated=base.extrapolated, note=base.note, stats=tuple(stat(m) for m in metrics),
                     ratios=tuple(ratio(base, m, is_baseline=i == 0) for i, m in enumerate(metrics)))


def stat(metric: Metric) -> Stat:
    s = metric.summary
    n = s.n if s else max(len(metric.samples), 1)
    return Stat(mean=metric.value, p50=s.p50 if s else None, p95=s.p95 if s else None, n=n)


def ratio(base: Metric, other: Metric, *, is_baseline: bool = False) -> Ratio:
    """How `other` stands against `base`, oriented so that an advantage above 1 means better."""
    point = other.value / base.value if base.value else float("nan")
    advantage = point if base.higher_is_better else (1 / point if point else float("inf"))
    if is_baseline:
        return Ratio(ratio=1.0, advantage=1.0, ci95_low=1.0, ci95_high=1.0, finding="baseline")
    if len(base.samples) < 2 or len(other.samples) < 2 or not base.value or not other.value:
        return Ratio(ratio=point, advantage=advantage, ci95_low=None, ci95_high=None, finding="single reading")
    first, second = (base, other) if base.higher_is_better else (other, base)
    _, low, high = bootstrap_ratio_ci([list(first.samples)], [list(second.samples)], seed=BOOTSTRAP_SEED)
    finding: Finding = "better" if low > 1 else "worse" if high < 1 else "no measurable difference"
    return Ratio(ratio=point, advantage=advantage, ci95_low=low, ci95_high=high, finding=finding)


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


def headline(results: Sequence[BenchResult]) -> Headline | None:
    try:
        picks = [headline_metric(r) for r in results]
    except SpecError:
        return None
    case, metric = picks[0]
    if any((c.name, metric_key(m)) != (case.name, metric_key(metric)) for c, m in picks):
        return None
    metrics = [m for _, m in picks]
    matrix = tuple(tuple(ratio(a, b, is_baseline=i == j) for j, b in enumerate(metrics))
                   for i, a in enumerate(metrics))
    return Headline(case=case.name, metric=metric.name, extrapolated=metric.extrapolated, advantage=matrix)
