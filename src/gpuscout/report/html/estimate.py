"""The estimate view: memory per term as stacked bars per GPU, against each GPU's usable memory."""

from __future__ import annotations

from gpuscout.documents.kinds import EstimateDoc
from gpuscout.estimator.breakdown import MemoryBreakdown
from gpuscout.estimator.screen import GpuVerdict
from gpuscout.report.compat import finding_text
from gpuscout.report.estimate_detail import band_words
from gpuscout.report.html.parts import Html, figure, para, table
from gpuscout.report.html.svg import Canvas, label
from gpuscout.report.numbers import GIB, duration, gib, gib_number

# Stacking order and colours (Okabe–Ito): what the model is, then what the step adds, then overheads.
CATEGORIES = (("weights", "#0072B2"), ("gradients", "#56B4E9"), ("optimizer_states", "#009E73"),
              ("activations", "#E69F00"), ("kv_cache", "#CC79A7"), ("temporaries", "#F0E442"),
              ("overhead", "#999999"))
_USABLE, _PEAK = "#D55E00", "#000000"


def estimate_view(doc: EstimateDoc, canvas: Canvas) -> list[Html]:
    s = doc.screening
    verdicts = s.verdicts
    intro = para(f"{s.job_name} ({s.job_kind}, {s.model_name}) on {len(verdicts)} GPU(s); "
                 f"{sum(v.fits for v in verdicts)} fit"
                 f"{_tight_words(verdicts)}.")
    if not verdicts:
        return [intro]
    return [intro, memory_plot(verdicts, canvas), _caption_notes(verdicts), verdict_table(verdicts),
            *compat_table(verdicts)]


def memory_plot(verdicts: tuple[GpuVerdict, ...], canvas: Canvas) -> Html:
    """One horizontal bar per GPU: its terms stacked by category; a mark at its peak and at its usable memory."""
    tips: dict[str, str | list[str]] = {}
    rows = list(reversed(verdicts))  # matplotlib counts rows from the bottom: the first GPU on top
    with canvas.figure(7.2, 1.2 + 0.26 * len(rows)) as fig:
        ax = fig.add_subplot()
        left = [0.0] * len(rows)
        for cat, colour in CATEGORIES:
            widths = [_category_bytes(v.breakdown, cat) / GIB for v in rows]
            if not any(widths):
                continue
            bars = ax.barh(range(len(rows)), widths, left=left, color=colour, height=0.7, label=cat.replace("_", " "))
            for i, (bar, v) in enumerate(zip(bars, rows, strict=True)):
                gid = f"term-{cat}-{i}"
                bar.set_gid(gid)
                tips[gid] = _term_tip(v, cat)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        for name, colour in (("peak", _PEAK), ("usable", _USABLE)):
            values = [(v.breakdown.peak_bytes if name == "peak" else v.breakdown.usable_bytes) / GIB for v in rows]
            dots = ax.scatter(values, range(len(rows)), marker="|", s=260, linewidths=2.2, color=colour,
                              label=f"{name} memory", zorder=3)
            dots.set_gid(f"mark-{name}")
            tips[f"mark-{name}"] = [_limit_tip(v) for v in rows]
        ax.set_yticks(range(len(rows)), [label(f"{'' if v.fits else '✗ '}{v.gpu_sku}", 32) for v in rows])
        for tick, v in zip(ax.get_yticklabels(), rows, strict=True):
            tick.set_color("#000000" if v.fits else _USABLE)
        ax.set_xlabel("GiB per GPU")
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.grid(axis="y", visible=False)
        fig.legend(loc="outside upper center", ncol=4)
        svg = canvas.svg(fig, tips)
    caption = ("Each bar stacks every memory term the estimate names, by category; the black mark is the "
               "estimated peak, the red mark the memory the GPU really offers. A ✗ marks a GPU the job does not "
               "fit. Hover a segment for its terms.")
    return figure(svg, caption, name="estimate-memory", marks=len(rows) * 2 + sum(
        1 for v in rows for cat, _ in CATEGORIES if _category_bytes(v.breakdown, cat)))


def _caption_notes(verdicts: tuple[GpuVerdict, ...]) -> Html:
    """Why a bar can end past its peak mark: terms of different phases are never live together."""
    phased = [v for v in verdicts if sum(t.bytes for t in v.breakdown.terms) > v.breakdown.peak_bytes]
    if not phased:
        return Html("")
    note = phased[0].breakdown.notes[0] if phased[0].breakdown.notes else ""
    return para(f"On {len(phased)} GPU(s) the bar ends past the peak mark: the job's phases (e.g. the loss "
                f"backward and the optimizer step, or denoising and the VAE decode) are not live at the same time, "
                f"and the peak counts only the largest. {note}", class_="note")


def verdict_table(verdicts: tuple[GpuVerdict, ...]) -> Html:
    rows = [[v.gpu_sku, v.gpu_name, gib_number(v.breakdown.peak_bytes), gib_number(v.breakdown.usable_bytes),
             gib_number(v.headroom_bytes), v.fit_verdict if v.fits else "does not fit", _job_time(v)] for v in verdicts]
    return table(["GPU", "name", "peak GiB", "usable GiB", "headroom GiB", "verdict", "job time"], rows,
                 numeric=(2, 3, 4))


def compat_table(verdicts: tuple[GpuVerdict, ...]) -> list[Html]:
    """Each GPU's compatibility findings (docs/compat.md): why it has no job time and the fix, or the
    slower path its time is priced on, or the condition it runs under."""
    cells = [[v.gpu_sku, v.speed_note if f.outcome == "excluded" and v.speed_note else finding_text(f)]
             for v in verdicts for f in v.compat]
    unique = [c for i, c in enumerate(cells) if c not in cells[:i]]  # two excluding rules share one note
    return [table(["GPU", "will it run"], unique, caption="Compatibility findings")] if unique else []


def _job_time(v: GpuVerdict) -> str:
    return duration(v.speed.job_s) if v.speed is not None else "—"


def _category_bytes(b: MemoryBreakdown, category: str) -> int:
    return sum(t.bytes for t in b.terms if t.category == category)


def _term_tip(v: GpuVerdict, category: str) -> str:
    terms = [t for t in v.breakdown.terms if t.category == category]
    lines = [f"{v.gpu_sku}: {category.replace('_', ' ')} {gib(sum(t.bytes for t in terms), 2)}"]
    lines += [f"  {t.name}: {gib(t.bytes, 2)}" for t in terms]
    return "\n".join(lines)


def _limit_tip(v: GpuVerdict) -> str:
    b = v.breakdown
    return (f"{v.gpu_sku}: peak {gib(b.peak_bytes)} of {gib(b.usable_bytes)} usable; "
            f"headroom {gib(v.headroom_bytes)} ({v.fit_verdict if v.fits else 'does not fit'})")


def _tight_words(verdicts: tuple[GpuVerdict, ...]) -> str:
    """', 2 of them tight (…the band…)': a fit inside the estimator's error band, said where it is counted."""
    tight = [v for v in verdicts if v.fits and v.fit_verdict == "tight"]
    if not tight or tight[0].band is None:
        return ""
    return f", {len(tight)} of them tight ({band_words(tight[0].band)})"
