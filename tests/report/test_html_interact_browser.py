"""The report as people use it, in Debian's headless Chromium: sort and filter a pick of hundreds of offers,
the one script allowed by its hash and no other, the page whole with JavaScript off, and no legend or
label over the data or over each other, judged by the elements' bounding boxes as the browser laid them out.

The pick is the real command over a synthetic SkyPilot catalog (benchmarks/pick_speed.py) of 300 rows; the
other reports are the test samples (`html_samples`), made by `gpuscout report` in a subprocess.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .chromium import CHROMIUM
from .html_samples import write_all

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
ENV = {"PATH": "/usr/bin:/bin", "COLUMNS": "120", "PYTHONPATH": str(SRC)}

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make test installs it)")


def gpuscout(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**ENV, "HOME": str(cwd)})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("interact")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pick_speed import synthetic_catalog

    catalog = folder / "vms.csv"
    synthetic_catalog(catalog, 300)
    big = folder / "big-pick.json"
    big.write_text(gpuscout("pick", "--offers", str(catalog), "--cloud", "aws", "--json", "--no-store", cwd=folder))
    (folder / "samples").mkdir()
    files = write_all(folder / "samples")
    made = {}
    for name, sources in (("pick", [big]), ("load", [files["load-a"], files["load-b"]]),
                          ("compare", [files["compare"]]), ("plan", [files["estimate"], files["pick"]]),
                          ("bench", [files["bench"]]), ("doctor", [files["doctor"], files["checks"]])):
        made[name] = folder / f"{name}.html"
        gpuscout("report", *map(str, sources), "-o", str(made[name]), cwd=folder)
    return made


def open_page(browser: Any, path: Path, *, scripts: bool = True) -> tuple[Any, list[str]]:
    context = browser.new_context(viewport={"width": 1200, "height": 900}, java_script_enabled=scripts)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.goto(path.as_uri(), wait_until="load")
    return page, problems


def column(page: Any, i: int, *, sort: bool = False) -> list[Any]:
    """Column `i` of the ranked table's shown rows: each cell's number (`data-sort`) or its text."""
    return page.eval_on_selector("table[data-sortable]", """(t, [i, sort]) => Array.from(t.tBodies[0].rows)
        .filter(r => !r.hidden).map(r => sort ? parseFloat(r.cells[i].getAttribute('data-sort')) :
                                      r.cells[i].textContent)""", [i, sort])


def headers(page: Any) -> list[str]:
    return [h.strip() for h in page.eval_on_selector("table[data-sortable]",
                                                    "t => Array.from(t.tHead.rows[0].cells).map(c => c.textContent)")]


def test_sorting_and_filtering_the_ranked_table(browser: Any, pages: dict[str, Path]) -> None:
    page, problems = open_page(browser, pages["pick"])
    names = headers(page)
    ranked = len(column(page, 0))
    assert ranked > 200  # every ranked offer of the catalog is in the table, not only the top 25
    time_col, total_col, gpu_col = names.index("job time"), names.index("total"), names.index("GPUs")
    assert column(page, total_col, sort=True) == sorted(column(page, total_col, sort=True))  # gpuscout's order

    page.locator("table[data-sortable] thead th button", has_text="job time").click()
    hours = column(page, time_col, sort=True)
    assert hours == sorted(hours) and hours[0] < hours[-1]
    assert page.locator("table[data-sortable] th[aria-sort='ascending']").inner_text().strip() == "job time"
    page.locator("table[data-sortable] thead th button", has_text="job time").click()
    assert column(page, time_col, sort=True) == sorted(hours, reverse=True)
    page.locator("table[data-sortable] thead th button", has_text="provider").click()
    providers = column(page, names.index("provider"))
    assert providers == sorted(providers, key=str.lower)

    gpus = page.locator("input[aria-label='filter by GPUs']")
    gpus.fill("h100")
    shown = column(page, gpu_col)
    assert 0 < len(shown) < ranked and all("h100" in g.lower() for g in shown)
    every = page.eval_on_selector("table[data-sortable]", "t => Array.from(t.tBodies[0].rows).filter(r => "
                                  "r.cells[3].textContent.toLowerCase().includes('h100')).length")
    assert len(shown) == every  # no H100 row was hidden by mistake
    totals = sorted(column(page, total_col, sort=True))
    limit = totals[len(totals) // 2]
    page.locator("input[aria-label='filter by total']").fill(f"{limit}")
    kept = column(page, total_col, sort=True)
    assert 0 < len(kept) < len(totals) and all(t <= limit for t in kept)
    assert page.locator("p.shown-count").first.inner_text() == f"{len(kept)} of {ranked} rows shown"
    gpus.fill("")
    page.locator("input[aria-label='filter by total']").fill("")
    assert len(column(page, 0)) == ranked
    page.context.close()
    assert problems == []


def test_the_csp_allows_the_page_script_alone(browser: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    """The policy names the SHA-256 of the page's script; a script planted beside it is refused, and so is an
    inline handler, while the page's own still runs."""
    text = pages["pick"].read_text()
    (script,) = re.findall(r"<script>(.*?)</script>", text, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in text
    planted = tmp_path / "planted.html"
    handler = "<svg onload=\"document.body.setAttribute('data-owned2', '1')\"></svg>"
    planted.write_text(text.replace("</main>", "</main><script>document.body.setAttribute('data-owned', '1')"
                                               "</script>" + handler))
    page, problems = open_page(browser, planted)
    assert page.evaluate("document.body.getAttribute('data-owned')") is None
    assert page.evaluate("document.body.getAttribute('data-owned2')") is None
    assert page.locator("tr.filters input").count() > 0  # the page's own script ran
    assert any("Content Security Policy" in p for p in problems), problems
    page.context.close()


def test_the_page_reads_whole_with_javascript_off(browser: Any, pages: dict[str, Path]) -> None:
    data = json.loads(gpuscout("report", str(pages["pick"].parent / "big-pick.json"), "-o",
                               str(pages["pick"].parent / "again.html"), "--json", cwd=pages["pick"].parent))
    page, problems = open_page(browser, pages["pick"], scripts=False)
    rows = page.locator("table[data-sortable] tbody tr")
    ranked = len(json.loads((pages["pick"].parent / "big-pick.json").read_text())["pick"]["rows"])
    excluded = page.eval_on_selector_all("table", "ts => ts.length")
    assert rows.count() > 200 and rows.count() <= ranked and excluded >= 2
    assert page.locator("tr.filters, input, p.shown-count").count() == 0  # no dead controls
    assert page.locator("table[data-sortable] tbody tr:visible").count() == rows.count()
    assert page.locator("figure.plot svg").count() == data["plots"]
    assert problems == []
    page.context.close()


# -------------------------------------------------------------------------- overlap --------------

BOXES = """fig => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const svg = fig.querySelector('svg');
  const inTick = e => e.closest('g[id*="tick_"]') !== null;
  const data = Array.from(svg.querySelectorAll('[clip-path]')).filter(e => !inTick(e))
    .flatMap(g => [g, ...g.querySelectorAll('path, use')]).filter(e => e.tagName !== 'g')
    .map(box).filter(b => b[2] > b[0] || b[3] > b[1])
    .map(b => [b[0] - 1, b[1] - 1, b[2] + 1, b[3] + 1]);  // a straight line's box has no height: give it its stroke
  const texts = sel => Array.from(svg.querySelectorAll(sel)).map(box).filter(b => b[2] > b[0]);
  return {
    legends: texts('g[id*="legend_"]'),
    legendTexts: texts('g[id*="legend_"] text'),
    data: data,
    xticks: texts('g[id*="xtick_"] text'),
    yticks: texts('g[id*="ytick_"] text'),
    labels: texts('g[id*="pareto-label"] text'),
  };
}"""


def overlap(a: list[float], b: list[float]) -> bool:
    """Two boxes share area (touching edges do not count: a tolerance of half a pixel)."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def pairs(boxes: list[list[float]]) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if overlap(boxes[i], boxes[j])]


@pytest.mark.parametrize("name", ["pick", "load", "compare", "plan", "bench", "doctor"])
def test_no_legend_or_label_overlaps_data_or_each_other(browser: Any, pages: dict[str, Path], name: str) -> None:
    page, _ = open_page(browser, pages[name])
    figures = page.locator("figure.plot")
    checked = legends = 0
    for i in range(figures.count()):
        plot = figures.nth(i).get_attribute("data-plot")
        b = figures.nth(i).evaluate(BOXES)
        assert b["data"] and (b["xticks"] or b["yticks"]), plot  # the selectors found what they judge
        legends += len(b["legends"])
        for legend in b["legends"]:
            hits = [d for d in b["data"] if overlap(legend, d)]
            assert not hits, f"{plot}: legend {legend} over data {hits[:3]}"
        assert not pairs(b["legendTexts"]), f"{plot}: legend entries overlap"
        assert not pairs(b["xticks"]), f"{plot}: x tick labels collide"
        assert not pairs(b["yticks"]), f"{plot}: y tick labels collide"
        assert not pairs(b["labels"]), f"{plot}: point labels collide"
        for box in b["labels"]:
            assert not [t for t in (*b["xticks"], *b["yticks"], *b["legends"]) if overlap(box, t)], plot
        checked += 1
    assert checked == figures.count() > 0
    assert legends > 0 or name in ("compare", "doctor")  # a forest plot and check bands have no legend
    if name == "pick":  # the frontier's points are named on the plot
        assert page.locator("figure[data-plot='pick-cost-time'] g[id*='pareto-label'] text").count() >= 2
        assert page.locator("figure[data-plot='pick-bills']").count() == 1
    if name == "load":
        assert page.locator("figure[data-plot='load-timeline']").count() == 2  # one per load result
    page.context.close()


def test_the_overlap_check_sees_an_overlap(browser: Any, tmp_path: Path) -> None:
    """The checker on a plot made to fail it: a legend inside the axes over a line, and tick labels crowded
    together. A broken selector would find nothing and pass everything; here it must find both."""
    from gpuscout.report.html.parts import Html, figure
    from gpuscout.report.html.svg import Canvas

    canvas = Canvas()
    with canvas.figure(4.0, 3.0) as fig:
        ax = fig.add_subplot()
        ax.plot([0, 1], [0.5, 0.5], label="a line across the middle of the plot")
        ax.legend(loc="center")
        ax.set_xticks([i / 40 for i in range(41)], [f"label {i}" for i in range(41)])
        svg = canvas.svg(fig, {})
    path = tmp_path / "bad.html"
    path.write_text(f"<!DOCTYPE html><html><body>{figure(Html(svg), 'bad', name='bad', marks=0)}</body></html>")
    page, _ = open_page(browser, path)
    b = page.locator("figure.plot").evaluate(BOXES)
    assert [d for legend in b["legends"] for d in b["data"] if overlap(legend, d)]
    assert pairs(b["xticks"])
    page.context.close()
