"""The estimate screen's compatibility footnotes: one per finding, whatever the number of GPUs it
concerns, with its slowdown as the range over them."""

from __future__ import annotations

from pathlib import Path

from gpuscout import api
from gpuscout.report.estimate import estimate_screen

from .screens import render

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_one_footnote_gives_the_p2p_slowdown_over_every_geforce_card() -> None:
    report = api.estimate(EXAMPLES / "llama3-8b-full-zero3.toml", gpus=["rtx-4090", "rtx-5090", "a100"])
    slowdowns = sorted(f.slowdown for v in report.screening.verdicts for f in v.compat if f.slowdown)
    assert len(slowdowns) == 2 and slowdowns[0] < slowdowns[1]  # the two cards, each its own figure
    text = render(estimate_screen(report.screening, detailed=False), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    flat = " ".join(text.split())
    assert flat.count("Runs slower: this GPU's driver refuses GPU-to-GPU (P2P) copies") == 1
    low, high = (f"+{(s - 1) * 100:.0f}%" for s in slowdowns)
    # the two cards' figures differ, but may print alike at whole percents (then one figure is shown)
    assert (f"({low} to {high} time)" if low != high else f"({low} time)") in flat
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "[" in rows["rtx-4090"].split("│")[6] and "[" not in rows["a100-sxm4-80gb"].split("│")[6]
