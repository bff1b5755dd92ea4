"""The measurements view: bench and load results, all on the same axes, each with its tables.

Distributions are empirical CDFs (the share of samples at or below each value): a bench has few
repeats (a histogram of 15 samples is mostly bin edges) and a load test many; one curve per result
and case, P50 and P95 marked. A load sweep or search adds latency against throughput and goodput
(`load`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuscout.documents.kinds import RunDoc
from gpuscout.report.html.load import load_tables, sweep_plots
from gpuscout.report.html.parts import Html, bullets, figure, shorten, table, tag
from gpuscout.report.html.svg import Canvas, color, label, outside_legend
from gpuscout.report.html.timeline import timeline_plots
from gpuscout.report.numbers import common_unit, in_unit, value_in
from gpuscout.results.entries import describe
from gpuscout.results.fairness import labels
from gpuscout.results.schema import TPOT_S, TTFT_S, Case, Metric
from gpuscout.workload.job import Slo

# (metric, what it is): the timings whose spread matters, in the order drawn.
DISTRIBUTIONS = (("step_s", "step time", "training step time"), (TTFT_S, "TTFT", "time to first token (TTFT)"),
                 (TPOT_S, "TPOT", "time per output token (TPOT)"),
                 ("denoiser_step_s", "denoiser step", "denoiser step time"),
                 ("s_per_image", "time per image", "time per image"), ("s_per_clip", "time per clip", "time per clip"))
MAX_POINTS = 400  # a curve of more samples is drawn through this many evenly spaced quantiles


@dataclass(frozen=True)
class Series:
    name: str  # "A · concurrency 4"
    samples: tuple[float, ...]
    index: int
    colour: str  # one per result when several are drawn, else one per case
    alpha: float  # a result's cases from light (first) to full (last)


def runs_view(docs: Sequence[RunDoc], canvas: Canvas, *, slo: Slo | None = None) -> list[Html]:
    letters = labels(len(docs))
    parts: list[Html] = [_summary(docs, letters)]
    for metric, short, what in DISTRIBUTIONS:
        series = _series(docs, letters, metric)
        if series:
            parts.append(cdf_plot(metric, (short, what), series, canvas))
    parts += sweep_plots(docs, letters, canvas, slo=slo)
    parts += timeline_plots(docs, letters, canvas, slo=slo)
    for doc, letter in zip(docs, letters, strict=True):
        parts += [tag("h3", f"{letter}: {doc.result.name}"), *_details(doc)]
    return parts


def _summary(docs: Sequence[RunDoc], letters: Sequence[str]) -> Html:
    rows = []
    for doc, letter in zip(docs, letters, strict=True):
        r = doc.result
        entry = describe("load" if r.kind == "load" else "bench", r.model_dump(mode="json"))
        rows.append([letter, doc.label, r.kind, shorten(r.name, 60), shorten(entry.machine, 50),
                     r.created_at.strftime("%Y-%m-%d %H:%M"), str(len(r.cases)), "yes" if r.complete else "no"])
    return table(["", "source", "kind", "name", "machine", "made", "cases", "complete"], rows,
                 caption="Results drawn on the same axes", numeric=(6,))


def _series(docs: Sequence[RunDoc], letters: Sequence[str], metric: str) -> list[Series]:
    out: list[Series] = []
    for d, (doc, letter) in enumerate(zip(docs, letters, strict=True)):
        cases = [(c, m) for c in doc.result.cases for m in c.metrics if m.name == metric and len(m.samples) > 1]
        for k, (case, m) in enumerate(cases):
            name = letter if len(cases) == 1 and len(docs) > 1 else (
                case.name if len(docs) == 1 else f"{letter} · {case.name}")
            shade = 0.35 + 0.65 * (k + 1) / len(cases) if len(docs) > 1 else 1.0
            out.append(Series(name=name, samples=m.samples, index=len(out),
                              colour=color(d if len(docs) > 1 else len(out)), alpha=shade))
    return out


def cdf_plot(metric: str, names: tuple[str, str], series: Sequence[Series], canvas: Canvas) -> Html:
    short, what = names
    unit, factor = common_unit([v for s in series for v in s.samples], "s")
    tips: dict[str, str | list[str]] = {}
    with canvas.figure(7.2, 3.4 + 0.14 * max(0, len(series) - 6)) as fig:
        ax = fig.add_subplot()
        for s in series:
            xs, ys = _ecdf(s.samples)
            line = ax.plot(xs / factor, ys, drawstyle="steps-post", color=s.colour, alpha=s.alpha, linewidth=1.5,
                           label=label(s.name, 40))[0]
            line.set_gid(f"cdf-{s.index}")
            tips[f"cdf-{s.index}"] = _series_tip(s)
        marks = [(s, q) for s in series for q in (50, 95)]
        dots = ax.scatter([np.percentile(s.samples, q) / factor for s, q in marks], [q / 100 for _, q in marks],
                          color=[s.colour for s, _ in marks], s=22, zorder=3, edgecolors="#ffffff")
        dots.set_gid("quantiles")
        tips["quantiles"] = [f"{s.name}: P{q} {value_in(float(np.percentile(s.samples, q)), 's')}" for s, q in marks]
        ax.set_xlabel(f"{short} ({metric}), {unit}")
        ax.set_ylabel("share of samples at or below")
        ax.set_ylim(0, 1.02)
        outside_legend(fig, ax)
        svg = canvas.svg(fig, tips)
    caption = (f"Distribution of the {what}: each curve is one result's case, rising to 1 at its slowest sample; "
               "dots mark P50 and P95. Curves further left are faster; a steep curve is a steady one.")
    return figure(svg, caption, name=f"cdf-{metric}", marks=len(marks))


def _ecdf(samples: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    values = np.sort(np.asarray(samples, dtype=float))
    if len(values) > MAX_POINTS:
        probs = np.linspace(1 / MAX_POINTS, 1.0, MAX_POINTS)
        return np.quantile(values, probs), probs
    return values, np.arange(1, len(values) + 1) / len(values)


def _series_tip(s: Series) -> str:
    p50, p95 = (float(np.percentile(s.samples, q)) for q in (50, 95))
    return f"{s.name}: {len(s.samples):,} samples, P50 {value_in(p50, 's')}, P95 {value_in(p95, 's')}"


# ---------------------------------------------------------------- per result ------------------

def _details(doc: RunDoc) -> list[Html]:
    if doc.result.kind == "load":
        return load_tables(doc)
    out = [_metric_table(c) for c in doc.result.cases if c.metrics]
    failures = [f"{c.name}: {c.failure.kind}: {c.failure.message}" for c in doc.result.cases if c.failure]
    if failures:
        out.append(bullets(failures, class_="warn"))
    if doc.estimate is not None and doc.estimate.rows:
        out.append(table(["metric", "estimate", "measured", "measured / estimate"],
                         [[r.metric, value_in(r.estimate, r.unit), value_in(r.measured, r.unit), f"{r.ratio:.2f}×"]
                          for r in doc.estimate.rows], caption=f"gpuscout's estimate beside it ({doc.estimate.case})",
                         numeric=(1, 2, 3)))
    notes = [*doc.result.notes, *(n for c in doc.result.cases for n in c.notes)]
    return out + ([bullets(notes, class_="note")] if notes else [])


def _metric_table(case: Case) -> Html:
    rows = [_metric_row(m) for m in case.metrics]
    params = ", ".join(f"{k} {v}" for k, v in case.params.items() if v is not None)
    return table(["metric", "mean", "P50", "P95", "n", "runs", "unit"], rows,
                 caption=f"{case.name}" + (f" ({shorten(params, 100)})" if params else ""), numeric=(1, 2, 3, 4, 5))


def _metric_row(m: Metric) -> list[str | Html]:
    unit, factor = common_unit([m.value], m.unit)
    s = m.summary
    name = m.name + (" (extrapolated)" if m.extrapolated else "")
    return [name, in_unit(m.value, factor), in_unit(s.p50, factor) if s else "—", in_unit(s.p95, factor) if s else "—",
            str(s.n) if s else "1", str(max(len(m.runs), 1)), unit]
