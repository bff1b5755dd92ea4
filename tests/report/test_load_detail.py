"""`gpuscout load`'s detail tables (report/load_detail.py): shown where the result has them, within 80 columns."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

from gpuscout import api
from gpuscout.loadgen.plan import make_plan
from gpuscout.report.load import load_screen


def render(**options: object) -> str:
    with serve_in_thread(FakeConfig(ttft_s=0.002, token_delay_s=0.001, prefix_cache=True)) as server:
        plan = make_plan(url=server.url, model="m", runs=1, api_key_env=None, percentile=50,
                         metrics_url=f"{server.url}/metrics", **options)  # type: ignore[arg-type]
        report = api.load(plan, usd_per_hour=2.0)
    console = Console(width=80, record=True, color_system=None)
    console.print(load_screen(report.result, output=None, costs=report.costs, search=None))
    return console.export_text()


def test_traffic_server_and_turn_tables_fit_80_columns() -> None:
    text = render(concurrency=2, requests=12, turns=3, prompt_tokens=20, output_tokens=4)
    assert "TTFT P50 by conversation turn" in text and "turn 3" in text
    assert "The server's /metrics during each level" in text
    assert "Traffic: plateau throughput" in text  # the cache hit the server reported for the history
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_shared_prefix_run_shows_its_saving_and_images_their_own_columns() -> None:
    text = render(concurrency=1, requests=12, prompt_tokens=32, output_tokens=4, prefix_share=0.5,
                  prefix_control=True)
    assert "prefix cache" in text and "no shared prefix" in text
    images = render(endpoint="images", concurrency=1, requests=6)
    assert "img/s" in images and "$ / 1000" in images and "TTFT" not in images
