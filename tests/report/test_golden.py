"""Golden screens: every main view rendered at 80 and 120 columns and compared with tests/report/golden/.

A change to a screen that is meant shows up here as a unified diff; refresh the expected files
with `make golden` (GPUSCOUT_UPDATE_GOLDEN=1), read the diff in git, and commit it with the
change. The semantic checks in test_screens.py survive such a refresh.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import RenderableType

from gpuscout.report.bench import bench_screen
from gpuscout.report.compare import render_table
from gpuscout.report.estimate import estimate_screen
from gpuscout.report.load import load_screen
from gpuscout.report.offers import offers_list_screen
from gpuscout.report.pick import calculator_table, pick_screen

from . import samples
from .screens import render

GOLDEN = Path(__file__).parent / "golden"
WIDTHS = (80, 120)
UPDATE = os.environ.get("GPUSCOUT_UPDATE_GOLDEN") == "1"


def _estimate(report: Callable[[], samples.api.EstimateReport], *, wide: bool = False) -> Callable[[], RenderableType]:
    def screen() -> RenderableType:
        r = report()
        return estimate_screen(r.screening, detailed=r.detailed, wide=wide, capacities=r.capacities)
    return screen


def _pick(wide: bool = False) -> RenderableType:
    r = samples.pick_default()
    return pick_screen(r.pick, r.offers_notes, wide=wide)


def _compare() -> RenderableType:
    r = samples.compare_two()
    return render_table(r.comparison, r.verdict, r.costs, notes=r.warnings, rates=r.rates)


def _load() -> RenderableType:
    result, costs, search = samples.load_demo()
    return load_screen(result, output=Path("results/load-demo.json"), costs=costs, search=search)


def _offers_list() -> RenderableType:
    listed = samples.api.list_offers(None, today=samples.TODAY)  # the bundled example sheet
    return offers_list_screen("prices.example", listed.offers, listed.total, listed.today, listed.notes)


def _cost() -> RenderableType:
    r = samples.cost_calculator()
    assert r.plain is not None
    return calculator_table(r.plain, r.billed)


SCREENS: dict[str, Callable[[], RenderableType]] = {
    "estimate": _estimate(samples.estimate_default),
    "estimate-rtx-4090": _estimate(samples.estimate_rtx4090),
    "estimate-serving-h100": _estimate(samples.estimate_serving),
    "pick": _pick,
    "pick-compat": lambda: pick_screen(samples.pick_compat().pick),
    "estimate-compat": _estimate(samples.estimate_compat),
    "estimate-tight": lambda: estimate_screen(samples.estimate_tight().screening, detailed=False),
    "pick-tight": lambda: pick_screen(samples.pick_tight().pick),
    "compare": _compare,
    "bench": lambda: bench_screen(samples.bench_demo(), None, Path("results/demo-h100.json")),
    "load": _load,
    "load-rates": lambda: _load_rates(),
    "load-predicted": lambda: load_screen(samples.load_predicted()[0], output=None, costs=(),
                                          search=samples.load_predicted()[1]),
    "cost": _cost,
    "offers-list": _offers_list,
    "pick-wide": lambda: _pick(wide=True),  # wide keeps the default's layout: it reads at 80 columns too
}
# `--wide` is for wide terminals: its extra columns are checked at 160 columns only.
WIDE_SCREENS: dict[str, Callable[[], RenderableType]] = {
    "estimate-wide": _estimate(samples.estimate_default, wide=True),
    "load-rates-wide": lambda: _load_rates(wide=True),
}


def _load_rates(wide: bool = False) -> RenderableType:
    """The load demo's levels named as open-loop levels are ("gamma 12.5 rps, k=0.5"): each name on one line."""
    result, costs, search = samples.load_demo()
    names = ("gamma 12.5 rps, k=0.5", "poisson 120 rps")
    cases = tuple(c.model_copy(update={"name": n}) for c, n in zip(result.cases, names, strict=True))
    return load_screen(result.model_copy(update={"cases": cases}), output=None, costs=costs, search=search,
                       wide=wide)


# The default pick of bundled examples at 80 columns: bands, overlap marks, the trial advice (needed or
# not), layouts in words (data-parallel, tensor-parallel replicas, ZeRO-3), plans.
PICK_EXAMPLES = ("llama3-8b-qlora", "llama3-70b-serving-8k", "llama3-8b-full-zero3", "tiny-finetune", "wan-t2v-480p")


def _pick_example(name: str) -> RenderableType:
    r = samples.api.pick(name, today=samples.TODAY)  # a shipped example by name: the commands name it so
    return pick_screen(r.pick, r.offers_notes)


def check_golden(name: str, text: str) -> None:
    """Compare with golden/NAME.txt exactly; with GPUSCOUT_UPDATE_GOLDEN=1 write it instead."""
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"No expected screen at {path}: run `make golden` and review the new file.")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = difflib.unified_diff(expected.splitlines(keepends=True), text.splitlines(keepends=True),
                                    fromfile=f"{path.name} (expected)", tofile=f"{name} (rendered now)")
        pytest.fail("The screen changed; if that is intended, run `make golden`.\n" + "".join(diff), pytrace=False)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", SCREENS)
def test_screen_matches_its_golden_file(name: str, width: int) -> None:
    check_golden(f"{name}-{width}", render(SCREENS[name](), width))


@pytest.mark.parametrize("name", WIDE_SCREENS)
def test_wide_screen_matches_its_golden_file(name: str) -> None:
    check_golden(f"{name}-160", render(WIDE_SCREENS[name](), 160))


@pytest.mark.parametrize("name", SCREENS)
def test_80_column_goldens_fit_in_80_columns(name: str) -> None:
    path = GOLDEN / f"{name}-80.txt"
    if UPDATE and not path.is_file():
        pytest.skip("written in this refresh")
    too_wide = [(n, len(line)) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if len(line) > 80]
    assert too_wide == [], f"{path.name}: lines wider than 80 characters (line, width): {too_wide}"


@pytest.mark.parametrize("name", PICK_EXAMPLES)
def test_example_pick_matches_its_golden_file_at_80_columns(name: str) -> None:
    text = render(_pick_example(name), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    check_golden(f"pick-example-{name}-80", text)
