"""The device check's validator on the CPU: the table is written in dry-run and tiny modes, results
are turned into estimate-vs-measurement rows, and missing packages become skip rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmark_script import load_benchmark
from gpuscout.hardware.catalog import find_gpu
from gpuscout.measure.harness import BenchSettings
from gpuscout.measure.image_bench import run_image_case
from gpuscout.workload.job import ImageJob

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "validate_on_gpu.py"


@pytest.fixture(scope="module")
def validator() -> ModuleType:
    return load_benchmark("validate_on_gpu")


def table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_dry_run_writes_the_table_for_every_check(validator: ModuleType, tmp_path: Path) -> None:
    assert validator.main(["--dry-run", "--device", "cpu", "--out", str(tmp_path), "--work", str(tmp_path)]) == 0
    [table] = list(tmp_path.glob("validation-*-cpu.md"))
    assert {p.suffix for p in tmp_path.glob("validation-*")} == {".md", ".json", ".log"}
    text = table.read_text()
    assert "dry run" in text and "| check | quantity | gpuscout estimate |" in text
    checks = {row[0] for row in table_rows(text)}
    assert checks == {"probe", "infer-8b", "ft-1b-full", "ft-8b-lora", "sdxl-1024"}
    sdxl = {row[1]: row for row in table_rows(text) if row[0] == "sdxl-1024"}
    assert sdxl["peak memory"][2].endswith("GiB") and sdxl["s_per_image"][2].endswith("ms")


def test_missing_packages_become_skip_rows(validator: ModuleType, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = validator.package_versions()
    monkeypatch.setattr(validator, "package_versions", lambda: real | {"diffusers": None, "peft": None})
    validator.main(["--dry-run", "--device", "cpu", "--out", str(tmp_path), "--work", str(tmp_path)])
    rows = {row[0]: row for row in table_rows(next(tmp_path.glob("validation-*.md")).read_text())}
    assert "diffusers not importable" in rows["sdxl-1024"][5]
    assert "peft not importable" in rows["ft-8b-lora"][5]


def test_without_pydantic_it_says_what_to_carry(validator: ModuleType, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real = validator.package_versions()
    monkeypatch.setattr(validator, "package_versions", lambda: real | {"pydantic": None})
    assert validator.main(["--out", str(tmp_path)]) == 1
    assert "--fetch-wheels" in (tmp_path / "validation-not-run.md").read_text()


def test_a_measured_image_result_becomes_rows(validator: ModuleType, tmp_path: Path) -> None:
    [check] = [c for c in validator.tiny_checks(tmp_path) if c.name == "image"]
    job = ImageJob.model_validate(check.spec)
    case = run_image_case(job, BenchSettings(warmup=0, repeats=2), "cpu", "image")
    result: dict[str, Any] = {"cases": [case.model_dump(mode="json")]}
    rows = validator.job_rows(check, result, find_gpu("h200"), "cpu")
    by_quantity = {row.quantity: row for row in rows}
    assert set(by_quantity) == {"peak memory", "s_per_image", "denoiser_step_s", "vae_decode_s"}
    for row in rows:
        assert row.estimate is not None and row.estimate > 0
        assert row.measured is not None and row.measured > 0
    assert by_quantity["s_per_image"].measured == next(m.value for m in case.metrics if m.name == "s_per_image")
    assert "RSS" in by_quantity["peak memory"].note
    text = validator.render(rows, ["# header"])
    assert len(table_rows(text)) == 4


def test_inference_rows_per_concurrency_level(validator: ModuleType, tmp_path: Path) -> None:
    [check] = [c for c in validator.tiny_checks(tmp_path) if c.name == "infer"]
    cases = [{"name": f"c{c}", "params": {"concurrency": c}, "peak_memory": {"torch_reserved_bytes": 2**30},
              "metrics": [{"name": "ttft_s", "value": 0.1 * c, "unit": "s"}, {"name": "tpot_s", "value": 0.01,
                                                                               "unit": "s"}]} for c in (1, 2)]
    cases.append({"name": "c4", "params": {"concurrency": 4}, "failure": {"kind": "oom", "message": "CUDA oom"}})
    rows = validator.job_rows(check, {"cases": cases}, find_gpu("h200"), "cuda")
    assert [r.quantity for r in rows] == [f"{q} @ concurrency {c}" for c in (1, 2)
                                          for q in ("peak memory", "ttft_s", "tpot_s")]
    assert rows[1].measured == pytest.approx(0.1) and rows[4].measured == pytest.approx(0.2)
    assert rows[0].measured == 2**30 and "torch reserved" in rows[0].note
    failed = validator.job_rows(check, {"cases": cases[2:]}, find_gpu("h200"), "cuda")
    assert len(failed) == 1 and "oom: CUDA oom" in failed[0].note


def test_probe_result_rows_hold_the_catalog_peak(validator: ModuleType) -> None:
    result = {"cases": [
        {"name": "matmul bf16", "metrics": [{"name": "matmul_tflop_per_s", "value": 700.0, "unit": "TFLOP/s"},
                                            {"name": "fraction_of_peak", "value": 700 / 989.5, "unit": "fraction"}]},
        {"name": "matmul fp8", "failure": {"kind": "unsupported", "message": "needs sm_89"}},
    ]}
    first, second = validator.probe_rows("probe", result)
    assert first.estimate == pytest.approx(989.5) and first.measured == 700.0
    assert second.note == "unsupported: needs sm_89"


def test_tiny_image_check_end_to_end(validator: ModuleType, tmp_path: Path) -> None:
    """The real path: a generated spec through `python -m gpuscout bench` on the CPU, then the table."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--only", "image",
                           "--out", str(out), "--work", str(tmp_path / "work"), "--repeats", "2", "--warmup", "0"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = table_rows(next(out.glob("validation-*-cpu.md")).read_text())
    if len(rows) == 1 and "ran past its" in rows[0][-1]:  # the script's own 60 s share, outrun on a busy machine
        pytest.skip(f"this machine was too busy for the check's time budget: {rows[0][-1]}")
    assert [r[1] for r in rows] == ["peak memory", "s_per_image", "denoiser_step_s", "vae_decode_s"], rows
    assert all(r[3] != "—" for r in rows)
    assert "gpuscout bench" in next(out.glob("validation-*.log")).read_text()


def test_shell_script_is_valid_bash() -> None:
    script = REPO / "scripts" / "device_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "--target /tmp/site" in script.read_text()
