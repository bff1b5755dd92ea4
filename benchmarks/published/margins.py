"""Error bands on the out-of-memory side, per category and setup, from the leave-one-source-out errors.

For each counted memory point the shortfall is how far the measured peak sits above the estimate
made without the point's own source: max(0, measured ÷ estimate − 1). A category's band is the
largest shortfall over its points that have none of the tracked setups (`margin.setups_of`); each
setup's band is the largest over the points that have exactly that setup, and a point with several
setups at once forms its own group ("cpu offload + vae slicing"). A job takes the largest of its
category's band and the bands of the groups whose setups it all has (`margin.band_for`).

Why the largest and not a quantile: with n exchangeable points the chance that the next job's
shortfall exceeds the largest of the n is 1/(n + 1); a 90% quantile of 8 or 20 points is not
estimable without assuming a distribution. Where a group has fewer than MIN_POINTS points its band
is never below its category's (the note says so), and a category with no certain point (video) takes
the larger of the image band (the same decoder workspace model) and its uncertain points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscout.estimator.margin import setup_key
from published.gpuscout_side import _setup
from published.loso import source_key

BAND_CATEGORIES = ("training_peak", "inference_peak", "image_peak", "video_peak")
MIN_POINTS = 5
ALL = "all"
STATISTIC = ("largest leave-one-source-out shortfall, max(0, measured ÷ estimate − 1), over the counted "
             "points of the category (setup: the points with that setup; the category: the points with none)")
WHY = ("with n exchangeable points the next job's shortfall exceeds the largest of them with chance 1/(n + 1); "
       "a 90% or 95% quantile of so few points cannot be estimated without assuming a distribution")


def shortfall(row: Any) -> float | None:
    if row.loso is None or row.loso <= 0:
        return None
    return max(0.0, row.point.measured / row.loso - 1.0)


def _group(rows: Sequence[Any]) -> dict[str, list[Any]]:
    from gpuscout.estimator.margin import setups_of

    groups: dict[str, list[Any]] = {}
    for row in rows:
        # A point measured with two setups at once (VAE slicing and sequential offload) says nothing of
        # either alone: it forms its own group, used only for jobs that have both (`margin.band_for`).
        setups = setups_of(_setup(row.point.to_wire())[0])
        groups.setdefault(setup_key(setups) if setups else ALL, []).append(row)
    return groups


def _band(category: str, setup: str, rows: Sequence[Any], note: str = "") -> dict[str, Any]:
    scored = [(s, r) for r in rows if (s := shortfall(r)) is not None]
    worst = max(scored, key=lambda x: x[0], default=(0.0, None))
    return {"category": category, "setup": setup, "band": round(worst[0], 4), "points": len(scored),
            "sources": sorted({source_key(r.point.source) for _, r in scored}),
            "worst": worst[1].point.id if worst[1] is not None and worst[0] > 0 else "", "note": note}


def derive(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The band rows margins.toml holds, from rows that carry their LOSO estimates."""
    out: list[dict[str, Any]] = []
    for category in BAND_CATEGORIES:
        counted = [r for r in rows if r.point.category == category and r.counted and shortfall(r) is not None]
        note = ""
        if not counted:  # video: no certain point yet
            counted = [r for r in rows if r.point.category == category and r.inexpressible is None
                       and shortfall(r) is not None]
            note = "no certain point: the larger of the image band and these uncertain points"
        groups = _group(counted)
        base = _band(category, ALL, groups.get(ALL, []), note)
        if not counted:
            base["note"] = "no point at all: the image band"
        if category == "video_peak":
            image = next(b for b in out if b["category"] == "image_peak" and b["setup"] == ALL)
            if image["band"] > base["band"]:
                base.update(band=image["band"], worst=image["worst"],
                            sources=sorted({*base["sources"], *image["sources"]}))
        elif base["points"] < MIN_POINTS:
            base["note"] = f"only {base['points']} points"
        out.append(base)
        for setup in sorted(s for s in groups if s != ALL):
            row = _band(category, setup, groups[setup])
            if row["points"] < MIN_POINTS:
                plural = "s" if row["points"] != 1 else ""
                row["note"] = f"only {row['points']} point{plural}: never below the category's band"
                if base["band"] > row["band"]:
                    row["band"] = base["band"]
            out.append(row)
    return out


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(bands: Sequence[dict[str, Any]], derivation: dict[str, str]) -> str:
    lines = ["# Error bands of gpuscout's peak-memory estimates on the side that runs out of memory.",
             "# Written by benchmarks/published_error.py --write-margins from validation/published/; do not edit",
             "# by hand: tests/test_margins.py holds this file to what the benchmark derives.",
             "# band = fraction of the estimated peak; a fit with less headroom than band × peak is 'tight'.",
             "", "[derivation]"]
    lines += [f"{key} = {_toml_str(value)}" for key, value in derivation.items()]
    for band in bands:
        lines += ["", "[[band]]", f"category = {_toml_str(band['category'])}", f"setup = {_toml_str(band['setup'])}",
                  f"band = {band['band']}", f"points = {band['points']}",
                  "sources = [" + ", ".join(_toml_str(s) for s in band["sources"]) + "]",
                  f"worst = {_toml_str(band['worst'])}", f"note = {_toml_str(band['note'])}"]
    return "\n".join(lines) + "\n"


def derivation_header(command: str, date: str, commit: str, rows: Sequence[Any]) -> dict[str, str]:
    used = [r for r in rows if r.point.category in BAND_CATEGORIES and r.counted]
    return {"command": command, "date": date, "commit": commit, "statistic": STATISTIC, "why": WHY,
            "points": f"{len(used)} counted memory points from {len({source_key(r.point.source) for r in used})} "
                      "sources in validation/published/",
            "few_points": f"a group of fewer than {MIN_POINTS} points never gets a band below its category's"}
