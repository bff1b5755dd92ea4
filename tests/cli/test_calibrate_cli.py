"""`gpuscout calibrate` as a user runs it, and the calibration estimate and pick then use.

Real subprocesses with their own config folder (XDG_CONFIG_HOME), so the default calibration file
is the test's. The GPU results are built from the schema (tests/results: an H100 fingerprint and
recorded samples); the CPU result is a real `gpuscout bench --device cpu` run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from results import bench_result, write

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
LINE = "h100-sxm5-80gb: speed calibrated on 1 run on NVIDIA H100 80GB HBM3, 2026-11-01"


def run(config: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", *map(str, args)], capture_output=True, text=True,
                          timeout=180, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                                            "XDG_CONFIG_HOME": str(config), "HOME": str(config / "home")})


def assert_user_error(out: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Why:" in out.stderr and "To fix:" in out.stderr and "Traceback" not in out.stderr
    for part in parts:
        assert part in out.stderr, out.stderr


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def h100_result(tmp_path: Path) -> Path:
    return write(bench_result("A"), tmp_path)  # llama-3-8b LoRA, ~0.51 s steps on an H100


def default_file(config: Path) -> Path:
    return config / "gpuscout" / "calibration.toml"


def test_calibrate_writes_the_default_file_and_estimate_says_so(config: Path, h100_result: Path) -> None:
    out = run(config, "calibrate", h100_result)
    assert out.returncode == 0, out.stderr
    assert "h100-sxm5-80gb" in out.stdout and "training" in out.stdout and "×12.3" in out.stdout
    assert f"written to {default_file(config)}" in out.stdout
    assert "[[entry]]" in default_file(config).read_text()

    shown = run(config, "estimate", "tiny-finetune", "-g", "h100", "-g", "a100")
    assert shown.returncode == 0, shown.stderr
    assert f"{LINE} (training)" in shown.stdout
    assert "a100-sxm4-80gb: speed calibrated" not in shown.stdout  # uncalibrated GPUs say nothing new
    assert "calibrated: measured/estimated 12.3" in shown.stdout  # the detail's efficiency source

    plain = run(config, "estimate", "tiny-finetune", "-g", "h100", "--no-calibration")
    assert plain.returncode == 0 and "speed calibrated" not in plain.stdout


def test_the_json_carries_the_calibration_used(config: Path, h100_result: Path) -> None:
    assert run(config, "calibrate", h100_result).returncode == 0
    data = json.loads(run(config, "estimate", "tiny-finetune", "-g", "h100", "--json").stdout)
    [entry] = data["calibration"]["entries"]
    assert entry["gpu_sku"] == "h100-sxm5-80gb" and entry["phase"] == "training" and entry["runs"] == 1
    assert data["calibration"]["path"] == str(default_file(config))
    verdict = data["screening"]["verdicts"][0]
    assert verdict["speed"]["efficiency"]["compute"] == pytest.approx(0.5 / entry["factor"])
    uncalibrated = json.loads(run(config, "estimate", "tiny-finetune", "-g", "h100", "--json",
                                  "--no-calibration").stdout)
    assert uncalibrated["calibration"] is None
    assert uncalibrated["screening"]["verdicts"][0]["speed"]["efficiency"]["compute"] == 0.5


def test_pick_uses_and_names_the_calibration(config: Path, h100_result: Path, tmp_path: Path) -> None:
    cal = tmp_path / "mine.toml"
    assert run(config, "calibrate", h100_result, "-o", cal).returncode == 0
    assert not default_file(config).exists()
    out = run(config, "pick", "tiny-finetune", "--calibration", cal, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["calibration"]["path"] == str(cal)
    screen = run(config, "pick", "tiny-finetune", "--calibration", cal)
    assert f"{LINE} (training)" in screen.stdout


def test_a_second_run_merges_into_the_file(config: Path, h100_result: Path, tmp_path: Path) -> None:
    other = write(bench_result("B", tps=(800.0, 790.0, 810.0, 805.0)), tmp_path)
    cal = tmp_path / "cal.toml"
    assert run(config, "calibrate", h100_result, "-o", cal).returncode == 0
    assert run(config, "calibrate", other, h100_result, "-o", cal).returncode == 0  # h100_result again: once
    data = json.loads(run(config, "calibrate", other, "-o", cal, "--json").stdout)
    [entry] = data["calibration"]["entries"]
    assert entry["runs"] == 2 and len(data["calibration"]["observations"]) == 2


def test_no_files_is_an_error(config: Path) -> None:
    assert_user_error(run(config, "calibrate"), "at least one result file")


def test_a_json_that_is_not_a_result_is_an_error(config: Path, tmp_path: Path) -> None:
    stray = tmp_path / "config.json"
    stray.write_text(json.dumps({"hidden_size": 64}))
    assert_user_error(run(config, "calibrate", stray), "schema version")
    assert not default_file(config).exists()


def test_a_cpu_result_is_an_unknown_gpu_error(config: Path, tmp_path: Path) -> None:
    result = tmp_path / "cpu.json"
    bench = run(config, "bench", EXAMPLES / "tiny-finetune.toml", "--device", "cpu", "--warmup", "1",
                "--repeats", "3", "--runs", "1", "-o", result)
    assert bench.returncode == 0, bench.stderr
    assert_user_error(run(config, "calibrate", result), "no catalog GPU", "device 'cpu'", "GPU name none")


def test_a_malformed_calibration_file_is_an_error_and_is_not_overwritten(config: Path, h100_result: Path,
                                                                        tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("version = 1\n[[entry]]\ngpu_sku = 'h100-sxm5-80gb'\n")
    assert_user_error(run(config, "estimate", "tiny-finetune", "--calibration", bad), "not a valid calibration")
    assert_user_error(run(config, "calibrate", h100_result, "-o", bad), "not a valid calibration")
    assert bad.read_text() == "version = 1\n[[entry]]\ngpu_sku = 'h100-sxm5-80gb'\n"
    newer = tmp_path / "newer.toml"
    newer.write_text("version = 99\n")
    assert_user_error(run(config, "pick", "tiny-finetune", "--calibration", newer), "version 99", "newer gpuscout")
    default_file(config).parent.mkdir(parents=True)
    default_file(config).write_text("version = 1\n[[entry\n")
    assert_user_error(run(config, "estimate", "tiny-finetune"), "not valid TOML")
    assert run(config, "estimate", "tiny-finetune", "--no-calibration").returncode == 0


def test_calibration_and_no_calibration_together_is_an_error(config: Path, tmp_path: Path) -> None:
    assert_user_error(run(config, "estimate", "tiny-finetune", "--calibration", tmp_path / "x.toml",
                          "--no-calibration"), "both given")
