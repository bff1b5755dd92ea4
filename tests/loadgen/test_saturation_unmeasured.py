"""A check that could not run never counts as passed: the client-saturation check of a load level.

The gate judges whether the load generator kept up from the lag of a 10 ms timer of its event loop
(`monitor.LAG_TICK_S`). A level that ends before the first tick fires has no lag sample: its verdict is
"not measured" (neither valid nor invalid), on the load screen, in the warnings, in the result file, and
`pick --load` does not take it as a capacity.

The levels are real (the fake server on 127.0.0.1, the real client). A level of a few requests against a
local server often ends inside 10 ms, but not on a busy machine; so the level that must be shorter than
one tick is run with the tick made an hour long (in-process, or in the CLI's own process through a
one-line wrapper), and the same level with the real tick is the control.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeConfig, serve_in_thread
from rich.console import Console
from test_client import assert_valid

from gpuscout import api
from gpuscout.cost.capacity import capacity_from_result
from gpuscout.documents.kinds import RunDoc
from gpuscout.loadgen import monitor
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.metrics import summarize_load
from gpuscout.loadgen.plan import make_plan
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.workload import synthetic_workload
from gpuscout.report.html.load import load_tables
from gpuscout.report.load import load_screen, load_warnings
from gpuscout.results.schema import NOT_MEASURED_PREFIX, BenchResult, Case, level_verdict
from gpuscout.results.store import load_result
from gpuscout.workload.job import InferenceJob, Slo

ROOT = Path(__file__).parent.parent.parent
AN_HOUR_S = 3600.0
SERVER = FakeConfig(ttft_s=0.005, token_delay_s=0.001)  # 24 requests, 4 at a time: several 10 ms ticks


def level(**options: object) -> dict[str, object]:
    return {"model": "m", "concurrency": 4, "requests": 24, "output_tokens": 4, "prompt_tokens": 8, "runs": 1,
            "api_key_env": None, "server_gpu": "H100 SXM", **options}


def valid_cell(screen: str) -> str:
    """The valid column (the last) of the level's row on a load screen, a table without vertical rules."""
    row = next(line for line in screen.splitlines() if line.startswith("concurrency 4 "))
    return row.split()[-1]


def unmeasured(case: Case) -> list[str]:
    return [n for n in case.notes if n.startswith(NOT_MEASURED_PREFIX)]


def test_a_level_shorter_than_one_tick_is_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.json"
    with serve_in_thread(SERVER) as srv:
        control = api.load(make_plan(url=srv.url, **level())).result.cases[0]
        monkeypatch.setattr(monitor, "LAG_TICK_S", AN_HOUR_S)
        report = api.load(make_plan(url=srv.url, **level()), output=out)
    assert_valid(control)  # the same level with the real tick: sampled, and valid
    assert any(m.name == "client_loop_lag_s" for m in control.metrics) and not unmeasured(control)

    case = load_result(out).cases[0]  # the result file
    assert not any(m.name == "client_loop_lag_s" for m in case.metrics)
    assert "valid" not in case.notes and not any(n.startswith("invalid") for n in case.notes), case.notes
    [note] = unmeasured(case)
    assert "the client's saturation" in note and "took no sample" in note and "neither valid nor invalid" in note
    assert level_verdict(case) == "not measured"

    screen = io.StringIO()
    console = Console(file=screen, width=80, color_system=None)
    console.print(load_screen(report.result, output=None, costs=(), search=None))
    load_warnings(report.result, console)
    text = screen.getvalue()
    assert valid_cell(text) == "n/m", text
    assert max(len(line) for line in text.splitlines()) <= 80
    said = " ".join(text.split())
    assert "valid n/m = not measured (1): concurrency 4." in said
    assert "warning: concurrency 4: not measured: the client's saturation" in said

    html = "".join(load_tables(RunDoc(label="A", result=report.result)))
    assert "<td>not measured</td>" in html, html

    loose = InferenceJob(kind="inference", model="llama-3.1-8b", prompt_tokens=8, output_tokens=4, requests=1000,
                         slo=Slo(ttft_p95_s=60.0))
    assert capacity_from_result(load_result(out), loose).case is None  # not a measured capacity
    assert "validity not measured" in (capacity_from_result(load_result(out), loose).miss or "")
    assert capacity_from_result(control_result(control, report.result), loose).case == "concurrency 4"


def control_result(control: Case, result: BenchResult) -> BenchResult:
    return result.model_copy(update={"cases": (control,)})


def test_a_real_level_under_10_ms_is_not_measured_when_it_is_that_short() -> None:
    """With the real tick: a two-request level against a local server usually ends inside 10 ms. Whatever
    this machine makes of it, a level without a lag sample is never valid, and one with a sample is judged."""
    seen = []
    with serve_in_thread(FakeConfig()) as srv:
        for _ in range(5):
            run = run_load_sync(srv.url, "m", synthetic_workload(2, prompt_tokens=4, output_tokens=1),
                                LoadShape(kind="concurrency", concurrency=2, requests=2), api_key_env=None)
            case = summarize_load(run, slo=None, percentile_needed=50)
            seen.append(run.wall_s)
            if run.loop_lag_s:
                assert not unmeasured(case), case.notes
            else:
                assert unmeasured(case) and "valid" not in case.notes, case.notes
                assert level_verdict(case) in ("not measured", "invalid")
                return
    took = ", ".join(f"{s * 1e3:.1f}" for s in seen)
    pytest.skip(f"every two-request level took a lag sample on this machine ({took} ms): none was shorter than one "
                "tick")


def test_merged_runs_are_not_valid_when_one_run_could_not_check() -> None:
    def case(*notes: str) -> Case:
        return Case(name="c", params={}, notes=notes)

    assert level_verdict(case("valid")) == "valid"
    assert level_verdict(case("valid", NOT_MEASURED_PREFIX + "x")) == "not measured"  # runs merged: notes pooled
    assert level_verdict(case("valid", "invalid: y", NOT_MEASURED_PREFIX + "x")) == "invalid"
    assert level_verdict(case()) == "invalid"  # no verdict recorded: never valid


WRAPPER = ("import sys; import gpuscout.loadgen.monitor as m; m.LAG_TICK_S = float(sys.argv.pop(1)); "
           "from gpuscout.cli.app import main; sys.argv[0] = 'gpuscout'; main()")


def test_the_cli_shows_and_writes_not_measured(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with serve_in_thread(SERVER) as srv:
        done = subprocess.run([sys.executable, "-c", WRAPPER, str(AN_HOUR_S), "load", srv.url, "--model", "m",
                               "--concurrency", "4", "--requests", "24", "--output-tokens", "4", "--runs", "1",
                               "--no-store", "-o", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert valid_cell(done.stdout) == "n/m", done.stdout
    assert "valid n/m = not measured (1): concurrency 4." in " ".join(done.stdout.split())
    assert "warning: concurrency 4: not measured: the client's saturation" in " ".join(done.stderr.split())
    notes = json.loads(out.read_text())["cases"][0]["notes"]
    assert "valid" not in notes and any(n.startswith(NOT_MEASURED_PREFIX) for n in notes), notes
