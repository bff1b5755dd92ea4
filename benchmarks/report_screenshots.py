"""Screenshots of `gpuscout report` pages as a user sees them, in Debian's headless Chromium.

Run: .venv/bin/python benchmarks/report_screenshots.py [--out validation/report30] [--rows 300]

Makes four reports with the real command and photographs each whole page and each plot:

1. pick over a large sheet: `gpuscout pick --json` over a synthetic SkyPilot catalog of `--rows`
   offers (benchmarks/pick_speed.py), then the same page sorted by job time and filtered to H100s
   by typing into its table, as a reader would.
2. a serving job (Llama-3-70B for 20 users, TTFT P95 under 1 s) over the bundled example sheet: the
   SLO verdict from the serving simulator, bills with start-up, idle tail and storage lines.
3. load: `gpuscout load` against the test suite's fake OpenAI server (a sweep of concurrency 1–8,
   priced at $3.60/h, TTFT and TPOT targets), written with `-o` and reported from that file.
4. compare: an A100 against an H100, three runs each, priced on one offer each (the test samples).

Needs playwright and /usr/bin/chromium (`make test` installs it). Writes PNGs to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread  # noqa: E402
from pick_speed import synthetic_catalog  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SERVING_JOB = """kind = "inference"
name = "Llama-3-70B, 20 users"
model = "llama-3.1-70b"
prompt_tokens = 1024
output_tokens = 256
concurrency = 20
tensor_parallel = 4
requests = 10_000

[slo]
ttft_p95_s = 1.0
"""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def gpuscout(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120", "HOME": str(cwd)}
    done = subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"gpuscout {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def make_reports(folder: Path, rows: int) -> dict[str, Path]:
    catalog, pick = folder / "vms.csv", folder / "pick.json"
    synthetic_catalog(catalog, rows)
    pick.write_text(gpuscout("pick", "--offers", str(catalog), "--cloud", "aws", "--json", "--no-store", cwd=folder))
    load = folder / "load.json"
    with serve_in_thread(FakeConfig(ttft_s=0.01, token_delay_s=0.002)) as srv:
        gpuscout("load", srv.url, "--model", "llama-3-8b-instruct", "--sweep", "1,2,4,8", "--requests", "40",
                 "--runs", "1", "--output-tokens", "32", "--usd-per-hour", "3.6", "--ttft-p95", "0.05",
                 "--tpot-p95", "0.01", "-o", str(load), "--no-store", cwd=folder)
    from report.html_samples import write_all

    samples = folder / "samples"  # the test samples write a pick.json of their own
    samples.mkdir()
    compare = write_all(samples)["compare"]
    # A serving job over the bundled example sheet: its bills have start-up, idle tail and storage lines
    # (the stacked bars), and its SLO verdict comes from the serving simulator.
    serving = folder / "serving.toml"
    serving.write_text(SERVING_JOB, encoding="utf-8")
    serving_pick = folder / "serving-pick.json"
    serving_pick.write_text(gpuscout("pick", str(serving), "--json", "--no-store", cwd=folder))
    pages = {}
    for name, source in (("pick", pick), ("serving-pick", serving_pick), ("load", load), ("compare", compare)):
        pages[name] = folder / f"{name}.html"
        gpuscout("report", str(source), "-o", str(pages[name]), "--title", f"gpuscout report: {name}", cwd=folder)
    return pages


def shoot(pages: dict[str, Path], out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for name, path in pages.items():
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(path.as_uri(), wait_until="load")
            written.append(_save(page, out / f"{name}-page.png", full=True))  # a long page: its first 5,000 px
            figures = page.locator("figure.plot")
            for i in range(figures.count()):
                plot = figures.nth(i).get_attribute("data-plot") or str(i)
                written.append(_save(figures.nth(i), out / f"{name}-plot-{i + 1}-{plot}.png"))
            if name == "pick":
                written += _sorted_and_filtered(page, out)
            page.close()
        browser.close()
    return written


def _sorted_and_filtered(page: Any, out: Path) -> list[Path]:
    """The ranked table sorted by job time, then filtered to H100 offers under 60 USD, as a reader does it."""
    table = page.locator("table[data-sortable]").first
    table.locator("thead th button", has_text="job time").click()
    shots = [_save(table, out / "pick-table-sorted-by-job-time.png", clip_rows=True)]
    table.locator("input[aria-label='filter by GPUs']").fill("H100")
    table.locator("input[aria-label='filter by total']").fill("60")
    shots.append(_save(table, out / "pick-table-filtered-h100-under-60.png", clip_rows=True))
    return shots


def _save(target: Any, path: Path, *, full: bool = False, clip_rows: bool = False) -> Path:
    if full:
        height = target.evaluate("document.documentElement.scrollHeight")
        target.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 1200,
                                                                "height": min(height, 5000)})
    elif clip_rows:  # the head of a long table: what the reader sees first
        box = target.bounding_box()
        page = target.page
        page.evaluate("(y) => window.scrollTo(0, y)", box["y"] - 20)
        box = target.bounding_box()
        page.screenshot(path=str(path), clip={"x": 0, "y": max(box["y"] - 10, 0), "width": 1200,
                                              "height": min(box["height"] + 20, 900)})
    else:
        target.screenshot(path=str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "validation" / "report30")
    parser.add_argument("--rows", type=int, default=300)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pages = make_reports(Path(tmp), args.rows)
        offers = len(json.loads((Path(tmp) / "pick.json").read_text())["pick"]["rows"])
        shots = shoot(pages, args.out)
    print(f"pick over {offers} offers; {len(shots)} screenshots in {args.out}:")
    for shot in shots:
        print(f"  {shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot}")


if __name__ == "__main__":
    main()
