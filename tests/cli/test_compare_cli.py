"""`gpuscout compare` as a user runs it: subprocesses, all three formats, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscout.results.runs import merge_runs
from results import A100, BASE_TPS, bench_result, failed_case, runs_case, train_case, write

PRICES = """
[[offer]]
id = "runpod-a100"
provider = "RunPod"
gpu = "a100-sxm4-80gb"
gpu_count = 1
price = 1.80
price_basis = "instance"
currency = "USD"
billing_increment_s = 60
startup_s = 120
observed_at = 2026-09-18
source = "test quote"

[[offer]]
id = "lambda-h100"
provider = "Lambda"
gpu = "h100-sxm5-80gb"
gpu_count = 1
price = 2.99
price_basis = "instance"
currency = "USD"
billing_increment_s = 60
startup_s = 120
observed_at = 2026-09-20
source = "test quote"
"""


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", "compare", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A: A100 at ~1000 tokens/s; B: H100 at twice that; a price sheet with one offer for each."""
    (tmp_path / "prices.toml").write_text(PRICES)
    return {"A": write(bench_result("A-a100", gpu=A100), tmp_path),
            "B": write(bench_result("B-h100", tps=[t * 2 for t in BASE_TPS]), tmp_path),
            "prices": tmp_path / "prices.toml"}


def assert_user_error(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 1, out.stdout + out.stderr
    assert "To fix" in out.stderr and "Traceback" not in out.stderr


def test_markdown_report_has_every_section_and_a_verdict(files: dict[str, Path]) -> None:
    out = run(files["A"], files["B"], "--offers", files["prices"], "--format", "md")
    assert out.returncode == 0, out.stderr
    md = out.stdout
    for heading in ("## Fairness", "## Telemetry", "## Side by side", "## Cost of the whole job", "## Verdict"):
        assert heading in md
    assert "| tokens_per_s" in md and "2.00× better (95% CI" in md
    assert ("B (H100 SXM5 80GB) costs 17% less in total ($15.05 vs $18.06), at Lambda's 2026-09-20 price and "
            "RunPod's 2026-09-18 price, and finishes the job 2.00× sooner (95% CI 1.99–2.01×).") in md


def test_json_has_ratios_cis_costs_and_the_winner(files: dict[str, Path]) -> None:
    out = run(files["A"], files["B"], "--offers", files["prices"], "--offer", "runpod-a100", "--offer",
              "lambda-h100", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    tps = next(m for m in data["comparison"]["cases"][0]["metrics"] if m["name"] == "tokens_per_s")
    ratio = tps["ratios"][1]
    assert ratio["advantage"] == pytest.approx(2.0) and ratio["ci95_low"] < 2.0 < ratio["ci95_high"]
    assert [c["offer_id"] for c in data["costs"]] == ["runpod-a100", "lambda-h100"]
    assert data["costs"][0]["total_usd"] == pytest.approx(36_120 / 3600 * 1.80)
    assert data["verdict"]["winner"] == "B" and data["verdict"]["objective"] == "total cost"
    assert data["comparison"]["fairness"]["fair"] is True


def test_table_without_prices_decides_on_time(files: dict[str, Path]) -> None:
    out = run(files["A"], files["B"])
    assert out.returncode == 0, out.stderr
    assert "B (H100 SXM5 80GB) finishes the job 2.00× sooner" in out.stdout
    # These results carry no telemetry: the verdict says that check did not run rather than passing it.
    assert "Verdict: Caution: A and B recorded no telemetry" in out.stdout


def test_three_results_compare_against_the_first(files: dict[str, Path], tmp_path: Path) -> None:
    c = write(bench_result("C-h100", tps=[t * 3 for t in BASE_TPS]), tmp_path)
    out = run(files["A"], files["B"], c, "--format", "json")
    assert out.returncode == 0, out.stderr
    tps = next(m for m in json.loads(out.stdout)["comparison"]["cases"][0]["metrics"] if m["name"] == "tokens_per_s")
    assert [r["advantage"] for r in tps["ratios"]] == pytest.approx([1.0, 2.0, 3.0])


def test_unfair_results_exit_1_unless_allowed(files: dict[str, Path], tmp_path: Path) -> None:
    other = write(bench_result("C", settings={"seq_len": 1024}, libraries={"torch": "2.7.0"}), tmp_path)
    out = run(files["A"], other, "--format", "md")
    assert_user_error(out)
    assert "settings.seq_len" in out.stderr and "libraries.torch" in out.stderr and out.stdout == ""
    allowed = run(files["A"], other, "--format", "md", "--allow-diff")
    assert allowed.returncode == 0, allowed.stderr
    assert "NOT A FAIR COMPARISON" in allowed.stdout and "| settings.seq_len | 512 | 1024 |" in allowed.stdout
    assert "Caution" in allowed.stdout


def test_bad_inputs_exit_1_with_a_fix(files: dict[str, Path], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert_user_error(run(files["A"], garbage))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": 0}))
    assert_user_error(run(files["A"], old))
    assert_user_error(run(files["A"], tmp_path / "missing.json"))
    inference = write(bench_result("I", kind="inference"), tmp_path)
    assert_user_error(run(files["A"], inference))
    assert_user_error(run(files["A"], files["B"], "--format", "html"))
    assert_user_error(run(files["A"], files["B"], "--offer", "lambda-h100"))
    assert_user_error(run(files["A"], files["B"], "--offers", files["prices"], "--offer", "nope", "--offer", "x"))


def three_runs(factor: float, drift: tuple[float, ...] = (1.0, 0.98, 1.02)) -> list[list[float]]:
    return [[t * factor * d for t in BASE_TPS] for d in drift]


def test_json_of_an_a_a_comparison_has_no_winner_and_says_why(tmp_path: Path) -> None:
    a = write(bench_result("A", cases=[runs_case(three_runs(1.0))]), tmp_path)
    b = write(bench_result("B", cases=[runs_case(three_runs(1.0, (1.01, 1.0, 0.99)))]), tmp_path)
    out = run(a, b, "--format", "json")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)["verdict"]
    assert verdict["winner"] is None and verdict["outcome"] == "no difference"
    assert verdict["reasons"] and "no measurable difference" in verdict["reasons"][0]


def test_a_throttled_side_is_flagged_on_every_format_and_blocks_the_winner(tmp_path: Path) -> None:
    a = write(bench_result("A", cases=[runs_case(three_runs(1.0))]), tmp_path)
    b = write(bench_result("B", gpu=A100, cases=[runs_case(three_runs(0.5), gpu="a100", throttled_run=3)]), tmp_path)
    data = json.loads(run(a, b, "--format", "json").stdout)
    assert data["verdict"]["winner"] is None and data["verdict"]["outcome"] == "disturbed"
    assert data["verdict"]["reasons"] == [
        "B: train, run 3: thermal throttling in 35% of busy samples (SM clock 1,410 → 1,140 MHz) up to 89 °C"]
    md = run(a, b, "--format", "md").stdout
    assert "**⚠ B: train, run 3: thermal throttling" in md and "No winner: the telemetry shows B disturbed" in md
    table = run(a, b)
    # no verdict: exit 4, as for every decision with no admissible option (docs/design.md §4)
    assert table.returncode == 4 and "Telemetry: disturbed while measuring" in table.stdout
    allowed = json.loads(run(a, b, "--format", "json", "--allow-diff").stdout)["verdict"]
    assert allowed["winner"] == "A" and allowed["text"].startswith("Caution")


def test_noise_options_change_the_verdict_and_are_checked(files: dict[str, Path], tmp_path: Path) -> None:
    a = write(bench_result("A"), tmp_path, "a1.json")
    b = write(bench_result("B", tps=[t * 1.15 for t in BASE_TPS]), tmp_path, "b1.json")
    assert json.loads(run(a, b, "--format", "json").stdout)["verdict"]["winner"] is None  # one run: under the floor
    lowered = json.loads(run(a, b, "--format", "json", "--noise-floor", "0.1").stdout)["verdict"]
    assert lowered["winner"] == "B"
    raised = json.loads(run(a, b, "--format", "json", "--noise-floor", "0.1", "--min-effect", "0.2").stdout)
    assert raised["verdict"]["winner"] is None
    assert_user_error(run(a, b, "--min-effect", "5"))


def test_failed_runs_are_shown_as_retries_in_the_bill(files: dict[str, Path], tmp_path: Path) -> None:
    flaky = merge_runs([train_case(BASE_TPS), train_case(BASE_TPS), failed_case("train")])
    b = write(bench_result("B-h100", tps=[t * 2 for t in BASE_TPS], cases=[flaky]), tmp_path, "flaky.json")
    out = run(files["A"], b, "--offers", files["prices"], "--format", "md")
    assert out.returncode == 0, out.stderr
    retry = "B: 1 of 3 runs failed (out of memory, crash or timeout); billed as 0.50 failed attempts per job"
    assert retry in out.stdout
    data = json.loads(run(files["A"], b, "--offers", files["prices"], "--format", "json").stdout)
    assert (data["costs"][1]["failed_runs"], data["costs"][1]["runs"]) == (1, 3)
