"""The screens people read at 80 columns keep what tells rows apart: `pick --wide` every offer id whole,
`results list` each run's job, machine and verdict, `load` each case name on one line."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from gpuscout.report.load import load_screen
from gpuscout.report.pick import pick_screen, shown_rows
from gpuscout.report.results import results_text
from gpuscout.results.database import StoredRun

from . import samples
from .screens import render


def test_pick_wide_keeps_every_offer_id_and_its_extras_at_80_columns() -> None:
    r = samples.pick_default()
    text = render(pick_screen(r.pick, r.offers_notes, wide=True), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    lines = text.splitlines()
    shown, _ = shown_rows(r.pick, wide=True, top=25)
    assert len(shown) > 10
    for row in shown:  # the id whole on a line of its own, after the rank (or '-' when excluded)
        assert any(re.match(rf"^\s*(\d+|-) {re.escape(row.offer_id)}\s", line) for line in lines), row.offer_id
        assert f"{row.observed_at:%Y-%m-%d}" in text
    assert "/epoch $" in text and "-bound" in text  # the cost per unit of work and the bound, under each offer


def test_load_case_names_stay_on_one_line() -> None:
    result, costs, search = samples.load_demo()
    names = ("gamma 12.5 rps, k=0.5", "poisson 120 rps")
    cases = tuple(c.model_copy(update={"name": n}) for c, n in zip(result.cases, names, strict=True))
    screen = load_screen(result.model_copy(update={"cases": cases}), output=None, costs=costs, search=search)
    for width in (80, 120):
        rows = [line for line in render(screen, width).splitlines() if line.startswith(names)]
        assert len(rows) >= 2 and all(any(line.startswith(n + " ") for n in names) for line in rows[:2])


def run(i: int, kind: str, job: str, machine: str, summary: str, result_kind: str = "") -> StoredRun:
    when = datetime(2026, 11, 24, 10, i, tzinfo=UTC)
    return StoredRun(id=i, kind=kind, result_kind=result_kind, created_at=when, recorded_at=when, job=job,
                     machine=machine, name=job, summary=summary, complete=True, gpuscout_version="0",
                     payload_bytes=100)


def test_results_list_shows_what_tells_runs_apart_at_80_columns() -> None:
    runs = [run(1, "bench", "Llama-3-8B QLoRA, 2k context", "NVIDIA H100 80GB HBM3", "3 cases", "finetune"),
            run(2, "load", "Llama-3.1-70B serving, 8k context", "http://10.0.0.7:8000/v1/chat/completions",
                "4 cases, 3/4 levels valid", "load"),
            run(3, "doctor", "doctor", "NVIDIA H100 80GB HBM3", "return, 21 cases", "doctor")]
    text = results_text(runs, 3, Path("/tmp/store.sqlite"), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    for r in runs:  # every field whole: the kind, the job, the machine, the verdict, when
        for field in (r.job, r.machine, r.summary, r.created_at.strftime("%Y-%m-%d %H:%M"), r.kind):
            assert field in text, field
    wide = results_text(runs, 3, Path("/tmp/store.sqlite"), width=200)
    assert len(wide.splitlines()) == 2 + len(runs)  # wide enough: one line per run, as before
