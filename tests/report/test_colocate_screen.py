"""The detail screen of a co-served job: each model's largest concurrency and the split of
gpu_memory_utilization between the engines, legible at 80 columns."""

from __future__ import annotations

from pathlib import Path

import gpuscout
from gpuscout.report.estimate import estimate_screen

from .screens import render, tables

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "two-models-one-gpu.toml"


def test_the_detail_screen_shows_the_split_and_each_models_limit_at_80_columns() -> None:
    report = gpuscout.estimate(EXAMPLE, gpus=["h100"])
    text = render(estimate_screen(report.screening, detailed=True), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    plan = report.screening.verdicts[0].colocation
    assert plan is not None
    flat = " ".join(text.split())
    assert (f"Largest concurrency, each with the others at theirs: llama-3.1-8b "
            f"{plan.models[0].largest_concurrency}, qwen2.5-7b tasks {plan.models[1].largest_concurrency}") in flat
    split = next(rows for names, rows in tables(text) if "--gpu-memory- utilization" in names)
    assert [row[3] for row in split] == [f"{m.gpu_memory_utilization:.3f}" for m in plan.models]
