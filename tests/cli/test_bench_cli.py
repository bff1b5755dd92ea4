"""`gpuscout bench` as a user runs it: a real subprocess, a result file, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpuscout.report.bench import bench_screen
from gpuscout.results.schema import BenchResult, Case, Failure, FixedVariables, Metric, PeakMemory, StartupPhase
from gpuscout.results.store import load_result

ROOT = Path(__file__).parent.parent.parent
EXAMPLES = ROOT / "examples"


def gpuscout(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_bench_tiny_finetune_writes_a_loadable_result(tmp_path: Path) -> None:
    out = tmp_path / "ft.json"
    done = gpuscout("bench", "examples/tiny-finetune.toml", "-o", str(out), "--device", "cpu", "--warmup", "1",
                    "--repeats", "2")
    assert done.returncode == 0, done.stderr
    result = load_result(out)
    assert result.kind == "finetune" and result.complete and result.fixed.repeats == 2
    case = result.cases[0]
    assert case.failure is None and {m.name for m in case.metrics} >= {"step_s", "tokens_per_s", "job_s"}
    assert "step_s" in done.stdout and "tokens_per_s" in done.stdout and f"Result written to {out}" in done.stdout
    assert "Traceback" not in done.stderr


def test_bench_json_prints_the_result_dict(tmp_path: Path) -> None:
    done = gpuscout("bench", str(EXAMPLES / "tiny-finetune.toml"), "--device", "cpu", "--warmup", "0",
                    "--repeats", "1", "--layers", "1", "--runs", "1", "--json", "--offers",
                    str(EXAMPLES / "prices.example.toml"), "--offer", "aws-p4d-24xlarge-us-east-1-spot-2023",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["schema_version"] == 2 and payload["fixed"]["layers"] == 1
    # Region and billing type, fixed variables, taken from the offer the machine was rented under.
    assert (payload["fixed"]["region"], payload["fixed"]["billing"]) == ("us-east-1", "spot")
    assert payload.pop("estimate") is None  # gpuscout's estimate beside the measurement: GPU runs only
    assert BenchResult.model_validate(payload).cases[0].layers == 1
    assert not list(tmp_path.iterdir())  # nothing written without -o


def test_device_cuda_without_a_gpu_exits_1_with_a_clear_message() -> None:
    done = gpuscout("bench", "examples/tiny-finetune.toml", "--device", "cuda")
    assert done.returncode == 1
    assert "--device cuda, but torch sees no CUDA GPU here" in done.stderr and "To fix" in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_without_a_spec_points_at_the_examples() -> None:
    done = gpuscout("bench")
    assert done.returncode == 1 and "tiny-finetune" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["--repeats", "0"], ["--created-at", "yesterday"],
                                  ["--dataset", "/nonexistent/data.jsonl"], ["--runs", "0"],
                                  ["--offer", "lambda-h100-sxm-1x"], ["--region", "x" * 300]])
def test_bad_options_are_user_errors(args: list[str]) -> None:
    done = gpuscout("bench", "examples/tiny-finetune.toml", "--device", "cpu", *args)
    assert done.returncode == 1 and done.stderr.startswith("error:") and "Traceback" not in done.stderr


def _result() -> BenchResult:
    ok = Case(name="concurrency 4", params={"concurrency": 4}, layers=1, full_layers=2,
              metrics=(Metric(name="ttft_s", unit="s", value=0.5, samples=(0.5,)),
                       Metric(name="ttft_s_full_depth", unit="s", value=0.8, extrapolated=True)),
              peak_memory=PeakMemory(process_rss_bytes=3 * 2**30, extrapolated_allocated_bytes=2**30),
              startup=(StartupPhase(name="imports", seconds=2.5),), notes=("a case note",))
    failed = Case(name="concurrency 64", params={"concurrency": 64},
                  failure=Failure(case="concurrency 64", kind="oom", message="CUDA out of memory",
                                  size={"concurrency": 64}))
    from gpuscout.measure.fingerprint import collect_fingerprint

    return BenchResult(kind="inference", created_at="2025-06-01T12:00:00Z", name="demo", job={},
                       fixed=FixedVariables(kind="inference", model="m", model_config_hash="ab" * 32,
                                            data="synthetic", seed=0, precision="bf16", device="cpu", warmup=1,
                                            repeats=1, settings={"prompt_tokens": 64}),
                       fingerprint=collect_fingerprint("cpu"), cases=(ok, failed), complete=False,
                       notes=("interrupted by Ctrl-C: 1 case(s) finished, 0 not run",))


def test_render_labels_extrapolated_values_failures_memory_and_startup() -> None:
    console = Console(record=True, width=200)
    console.print(bench_screen(_result(), None, None))
    text = console.export_text()
    assert "ttft_s_full_depth" in text and "extrapolated from 1 built layers to 2" in text and "1 of 2 layers" in text
    assert "FAILED (oom) at concurrency=64" in text and "CUDA out of memory" in text
    assert "process RSS 3.00 GiB" in text and "full depth (extrapolated) 1.00 GiB" in text
    assert "imports 2.50 s" in text and "a case note" in text
    assert "Incomplete run" in text and "Result not saved" in text and "none (CPU run)" in text
