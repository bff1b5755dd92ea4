"""A load result written with `-o` draws in `gpuscout report` exactly as the same run given by its store id.

The README's flow (`gpuscout load … -o run.json`, then `gpuscout report run.json`) is run as a user runs
it: real subprocesses against the fake OpenAI server, a real SQLite store. The file carries what the
store keeps beside the result (per-level costs, the SLO, the search verdict), so both reports draw the
same cost table and SLO lines; a file written before it carried them still reads.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpuscout.results.store import load_result

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

SRC = Path(__file__).parent.parent.parent / "src"


def gpuscout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=240,
                          cwd=cwd, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC),
                                        "HOME": str(cwd)})


def measurements(page: str, label: str) -> str:
    """The page's measurements section, with the source's own name (a path, or "run N") taken out."""
    found = re.search(r'<section id="measurements".*?</section>', page, re.S)
    assert found is not None
    return found.group(0).replace(label, "SOURCE")


def test_a_load_file_reports_its_costs_and_slo_lines_as_the_stored_run_does(tmp_path: Path) -> None:
    out, store = tmp_path / "run.json", tmp_path / "store.sqlite"
    with serve_in_thread(FakeConfig(ttft_s=0.004, token_delay_s=0.001)) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--sweep", "1,2", "--requests", "12", "--runs", "1",
                        "--output-tokens", "8", "--usd-per-hour", "3.6", "--ttft-p95", "0.5", "--tpot-p95", "0.05",
                        "-o", str(out), "--store", str(store), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert [c["case"] for c in written["costs"]] == ["concurrency 1", "concurrency 2"]
    assert written["slo"]["ttft_p95_s"] == 0.5 and written["slo"]["tpot_p95_s"] == 0.05
    listed = gpuscout("results", "list", "--store", str(store), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (run_id,) = [str(r["id"]) for r in json.loads(listed.stdout)["runs"]]

    pages = {}
    for source in (str(out), run_id):
        html = tmp_path / f"from-{Path(source).name}.html"
        made = gpuscout("report", source, "--store", str(store), "-o", str(html), cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        pages[source] = measurements(html.read_text(), str(out) if source == str(out) else f"run {run_id}")
    from_file, from_store = pages[str(out)], pages[run_id]
    assert "Cost of the load (USD)" in from_file
    assert "SLO: P95 TTFT ≤ 500 ms" in from_file and "SLO: P95 TPOT ≤ 50.0 ms" in from_file
    assert from_file == from_store

    # The measurement itself reads as before: compare, pick --load and every result reader pass over the extras.
    assert [c.name for c in load_result(out).cases] == ["concurrency 1", "concurrency 2"]
    compared = gpuscout("compare", str(out), str(out), "--format", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr


def test_a_file_written_before_it_carried_costs_still_reads(tmp_path: Path) -> None:
    """An older file (the result alone) still loads and draws, without the cost table it never had; a key
    that is neither the result's nor one written beside it is still refused."""
    out, store = tmp_path / "run.json", tmp_path / "store.sqlite"
    with serve_in_thread(FakeConfig(ttft_s=0.004, token_delay_s=0.001)) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "1", "--requests", "6", "--runs", "1",
                        "--output-tokens", "8", "--usd-per-hour", "3.6", "-o", str(out), "--store", str(store),
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in data.items() if k not in ("costs", "slo", "search")}))
    html = tmp_path / "old.html"
    made = gpuscout("report", str(old), "-o", str(html), "--store", str(store), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "Load levels" in html.read_text() and "Cost of the load" not in html.read_text()
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({**data, "cost": data["costs"]}))
    refused = gpuscout("compare", str(typo), str(out), "--format", "json", cwd=tmp_path)
    assert refused.returncode != 0 and "cost" in refused.stderr and "Traceback" not in refused.stderr
