"""The HTML report in a real browser: Debian's headless Chromium, driven by Playwright.

Reports are made by the real command (`gpuscout report … -o`), opened from disk with every request
watched: no console error or warning, no script error, no dialog, no request but the file itself,
every plot drawn with size and its marks, and a screenshot of each page (kept in the test's temporary
folder, and copied to $GPUSCOUT_SCREENSHOTS when it is set, to look at). `make test` installs the
browser (`apt-get install chromium`) when /usr/bin/chromium is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .chromium import CHROMIUM
from .html_samples import HOSTILE, write_all, write_hostile

SRC = Path(__file__).resolve().parents[2] / "src"
REPORTS = {
    "plan": ("estimate", "pick"),
    "compare": ("compare",),
    "measurements": ("bench", "load-a", "load-b"),
    "doctor": ("doctor", "checks"),
    "hostile": ("hostile-pick", "hostile-estimate", "hostile-load", "hostile-checks"),
}

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make test installs it)")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    """Each report made by the command itself: its file and how many plots it says it drew."""
    folder = tmp_path_factory.mktemp("reports")
    files = write_all(folder) | write_hostile(folder)
    made = {}
    for name, sources in REPORTS.items():
        out = folder / f"{name}.html"
        done = subprocess.run([sys.executable, "-m", "gpuscout", "report", *(str(files[s]) for s in sources),
                               "-o", str(out), "--json"], capture_output=True, text=True, timeout=300,
                              # module-scoped, so outside conftest's per-test isolation: name the gpuscout
                              # under test itself (a worktree beside an editable install of another)
                              env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "PYTHONPATH": str(SRC)})
        assert done.returncode == 0, done.stderr
        made[name] = (out, int(json.loads(done.stdout)["plots"]))
    return made


def open_page(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """The page, and every problem seen while it loads: console errors and warnings, script errors,
    dialogs, and any request other than the file itself."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning", "assert") else None)
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: problems.append(f"request: {r.url}") if r.url != path.as_uri() else None)
    page.goto(path.as_uri(), wait_until="load")
    return page, problems


@pytest.mark.parametrize("name", list(REPORTS))
def test_the_report_renders_cleanly_in_chromium(browser: Any, reports: dict[str, tuple[Path, int]], name: str,
                                                tmp_path: Path) -> None:
    path, plots = reports[name]
    page, problems = open_page(browser, path)
    figures = page.locator("figure.plot")
    assert figures.count() == plots > 0
    for i in range(plots):
        figure = figures.nth(i)
        box = figure.locator("svg").bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100, figure.get_attribute("data-plot")
        assert figure.locator("svg text").count() > 3  # axis labels and ticks were drawn
        assert figure.locator("svg path, svg use").count() > 5
        assert figure.locator("svg title").count() >= int(figure.get_attribute("data-marks") or 0) > 0
    assert page.locator("script").count() == (1 if page.locator("table[data-sortable]").count() else 0)
    shot = tmp_path / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("GPUSCOUT_SCREENSHOTS"):
        keep = Path(os.environ["GPUSCOUT_SCREENSHOTS"])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, keep / shot.name)
        for i in range(plots):
            figures.nth(i).screenshot(path=str(keep / f"{name}-plot-{i + 1}.png"))
    page.close()
    assert problems == []


def test_hostile_strings_show_as_text_in_the_browser(browser: Any, reports: dict[str, tuple[Path, int]]) -> None:
    page, problems = open_page(browser, reports["hostile"][0])
    body = page.inner_text("body")
    for s in HOSTILE:
        assert s in body, s
    assert page.locator("img, iframe, a[href^='javascript']").count() == 0
    assert page.locator("script").count() == 1  # the page's own: the hostile pick's table is sortable
    page.close()
    assert problems == []
