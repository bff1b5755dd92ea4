"""Results of any other kind (doctor, probe, kinds added later): every case's metrics against their bands.

Nothing here knows a kind: a metric with an expected band (whatever fields the result names it with,
`documents.read`) is drawn as a bullet row, the band shaded and the value marked, each row on its own
scale (the metrics have different units); every metric is listed in the table below.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscout.documents.kinds import CheckMetric, ChecksDoc
from gpuscout.report.html.parts import Html, bullets, figure, para, shorten, table, tag
from gpuscout.report.html.svg import Canvas, label
from gpuscout.report.numbers import value_in

_MAX_ROWS = 60
_GOOD, _BAD, _NEUTRAL, _BAND = "#009E73", "#D55E00", "#0072B2", "#d8efe6"
_FAIL_WORDS = ("fail", "error", "bad", "outside", "no", "critical")


def checks_view(doc: ChecksDoc, canvas: Canvas) -> list[Html]:
    banded = [(case.name, m) for case in doc.cases for m in case.metrics
              if m.value is not None and (m.low is not None or m.high is not None)]
    parts = [para(f"{doc.result_kind} result {doc.name!r}" + (f" on {doc.machine}" if doc.machine else "")
                  + (f", made {doc.created_at}" if doc.created_at else "") + f": {len(doc.cases)} case(s).")]
    if doc.verdict:
        parts.insert(0, para(tag("strong", doc.verdict), class_="verdict"))
    if banded:
        parts.append(band_plot(banded[:_MAX_ROWS], canvas))
    parts.append(check_table(doc))
    return parts + ([bullets(doc.notes, class_="note")] if doc.notes else [])


def band_plot(rows: Sequence[tuple[str, CheckMetric]], canvas: Canvas) -> Html:
    tips: dict[str, str | list[str]] = {}
    ys = list(range(len(rows)))[::-1]
    with canvas.figure(7.2, 1.0 + 0.32 * len(rows)) as fig:
        ax = fig.add_subplot()
        for y, (_, m) in zip(ys, rows, strict=True):
            lo, hi, _ = _positions(m)
            ax.barh([y], [hi - lo], left=[lo], height=0.6, color=_BAND, edgecolor="#7fbfa8", linewidth=0.8)
        dots = ax.scatter([_positions(m)[2] for _, m in rows], ys, s=40, zorder=3,
                          color=[_colour(m) for _, m in rows], edgecolors="#000000", linewidths=0.5)
        dots.set_gid("checks")
        tips["checks"] = [_tip(case, m) for case, m in rows]
        ax.set_yticks(ys, [label(f"{case} · {m.name}", 48) for case, m in rows])
        right = ax.secondary_yaxis("right")
        right.set_yticks(ys, [label(f"{value_in(m.value or 0.0, m.unit)} ({_band_text(m)})", 40) for _, m in rows])
        right.tick_params(length=0)
        ax.set_xticks([])
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.grid(visible=False)
        svg = canvas.svg(fig, tips)
    caption = ("Each row is one check on its own scale: the shaded band is what is expected, the dot the value "
               "measured (green inside the band, orange-red outside, blue where the result gives a status of its "
               "own). Hover a dot for the figures.")
    return figure(svg, caption, name="checks-bands", marks=len(rows))


def _positions(m: CheckMetric) -> tuple[float, float, float]:
    """Band ends and value on a 0–1 scale of their own: the band's span with a margin around both."""
    value = m.value or 0.0
    low, high = m.low, m.high
    ends = [v for v in (low, high, value) if v is not None]
    span_lo, span_hi = min(ends), max(ends)
    pad = (span_hi - span_lo) * 0.15 or abs(value) * 0.15 or 1.0
    span_lo, span_hi = span_lo - pad, span_hi + pad

    def at(v: float) -> float:
        return (v - span_lo) / (span_hi - span_lo)

    return (at(low) if low is not None else 0.0), (at(high) if high is not None else 1.0), at(value)


def _inside(m: CheckMetric) -> bool:
    v = m.value if m.value is not None else float("nan")
    return (m.low is None or v >= m.low) and (m.high is None or v <= m.high)


def _colour(m: CheckMetric) -> str:
    if m.status:
        return _BAD if m.status.lower().startswith(_FAIL_WORDS) else _GOOD if m.status.lower().startswith(
            ("pass", "ok", "good")) else _NEUTRAL
    return _GOOD if _inside(m) else _BAD


def _band_text(m: CheckMetric) -> str:
    if m.low is not None and m.high is not None:
        return f"{value_in(m.low, m.unit)} – {value_in(m.high, m.unit)}"
    if m.low is not None:
        return f"≥ {value_in(m.low, m.unit)}"
    return f"≤ {value_in(m.high, m.unit)}" if m.high is not None else ""


def _tip(case: str, m: CheckMetric) -> str:
    inside = "inside" if _inside(m) else "outside"
    lines = [f"{case} · {m.name}: {value_in(m.value or 0.0, m.unit)}", f"expected {_band_text(m)} ({inside})"]
    return "\n".join(lines + ([f"status: {m.status}"] if m.status else []) + ([m.note] if m.note else []))


def check_table(doc: ChecksDoc) -> Html:
    rows: list[list[str | Html]] = []
    for case in doc.cases:
        if not case.metrics:
            rows.append([case.name, case.status, "", "", "", shorten(case.message, 160)])
        for m in case.metrics:
            rows.append([case.name, m.status or case.status, m.name,
                         value_in(m.value, m.unit) if m.value is not None else "—", _band_text(m),
                         shorten(m.note or case.message, 160)])
    return table(["check", "status", "metric", "value", "expected", "note"], rows, caption="Every case and metric",
                 numeric=(3,))
