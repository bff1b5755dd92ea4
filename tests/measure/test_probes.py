"""Machine probes on the CPU (small sizes, seconds): every probe produces its metrics with raw samples,
fractions of peak are absent with a note on the CPU, and CUDA-only probes are `unsupported` failures.

Decision (documented in probes.py): CUDA-only probes are planned on the CPU too and raise
UnsupportedHere, so a result lists them as `unsupported` with the reason instead of omitting them.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from gpuscout.errors import UnsupportedHere
from gpuscout.hardware.catalog import find_gpu
from gpuscout.measure import probes
from gpuscout.measure.harness import BenchSettings, classify_failure, run_isolated
from gpuscout.measure.probes import (
    CHECKPOINT_CPU_CAP_BYTES,
    CHECKPOINT_DEFAULT_BYTES,
    NO_CPU_PEAK,
    checkpoint_case,
    checkpoint_size,
    dataloader_case,
    device_bandwidth_case,
    disk_case,
    fraction_of_peak,
    host_copy_case,
    matmul_case,
    matmul_peak_flops_per_s,
    plan_probe_cases,
)
from gpuscout.results.schema import Case

pytest.importorskip("torch")
pytest.importorskip("safetensors")

SETTINGS = BenchSettings(device="cpu", warmup=1, repeats=3)


def metric_names(case: Case) -> set[str]:
    return {m.name for m in case.metrics}


def assert_measured(case: Case, *names: str) -> None:
    assert case.failure is None
    for name in names:
        metric = next(m for m in case.metrics if m.name == name)
        assert len(metric.samples) == SETTINGS.repeats and all(s > 0 for s in metric.samples)
        assert metric.summary is not None and metric.value > 0


def test_plan_covers_every_probe_with_picklable_cases(tmp_path: Path) -> None:
    plan = plan_probe_cases(SETTINGS, "cpu", None, disk_dir=str(tmp_path))
    assert [c.name for c in plan] == [
        "matmul fp32", "matmul tf32", "matmul bf16", "matmul fp16", "matmul fp8", "device memory bandwidth",
        "host copy h2d", "host copy d2h", "disk sequential", "checkpoint save/load", "data loading"]
    for planned in plan:
        assert pickle.loads(pickle.dumps(planned.fn)) is planned.fn
        pickle.dumps(planned.args)
    assert plan[9].size == {"checkpoint_bytes": CHECKPOINT_DEFAULT_BYTES["cpu"]}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_cpu_matmul_has_no_fraction_of_peak_and_says_why(dtype: str) -> None:
    case = matmul_case(dtype, "cpu", SETTINGS)
    assert_measured(case, "matmul_tflop_per_s")
    assert metric_names(case) == {"matmul_tflop_per_s"}  # no fraction_of_peak metric on the CPU
    assert NO_CPU_PEAK in case.metrics[0].note
    assert case.metrics[0].unit == "TFLOP/s" and case.metrics[0].higher_is_better
    assert case.params["dtype"] == dtype and case.peak_memory.process_rss_bytes


def test_cpu_memory_bandwidth() -> None:
    case = device_bandwidth_case("cpu", SETTINGS)
    assert_measured(case, "memory_bandwidth_bytes_per_s")
    assert metric_names(case) == {"memory_bandwidth_bytes_per_s"}
    assert NO_CPU_PEAK in case.metrics[0].note


@pytest.mark.parametrize("run", [lambda: matmul_case("tf32", "cpu", SETTINGS),
                                 lambda: matmul_case("fp8", "cpu", SETTINGS),
                                 lambda: host_copy_case("h2d", "cpu", SETTINGS),
                                 lambda: host_copy_case("d2h", "cpu", SETTINGS)],
                         ids=["tf32", "fp8", "h2d", "d2h"])
def test_cuda_only_probes_are_unsupported_on_the_cpu(run: object) -> None:
    with pytest.raises(UnsupportedHere, match="CUDA GPU") as info:
        run()  # type: ignore[operator]
    assert classify_failure(info.value) == "unsupported"


def test_unsupported_probe_is_recorded_by_the_harness() -> None:
    case = run_isolated(host_copy_case, "h2d", "cpu", SETTINGS, case="host copy h2d", size={"direction": "h2d"},
                        timeout_s=120)
    assert case.failure is not None and case.failure.kind == "unsupported"
    assert "CUDA GPU" in case.failure.message and case.failure.size == {"direction": "h2d"}


def test_disk_probe_writes_reads_and_cleans_up(tmp_path: Path) -> None:
    case = disk_case(4 << 20, str(tmp_path), SETTINGS)
    assert_measured(case, "disk_write_bytes_per_s", "disk_read_bytes_per_s")
    assert "fsync" in case.metrics[0].note and "drop_caches" in case.metrics[1].note
    assert case.params == {"bytes": 4 << 20, "folder": str(tmp_path)}
    assert list(tmp_path.iterdir()) == []


def test_disk_probe_refuses_without_space(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedHere, match="free"):
        disk_case(1 << 60, str(tmp_path), SETTINGS)


def test_checkpoint_size_is_the_models_scaled_down_on_the_cpu() -> None:
    assert checkpoint_size("cpu", None) == CHECKPOINT_DEFAULT_BYTES["cpu"]
    assert checkpoint_size("cuda", None) == CHECKPOINT_DEFAULT_BYTES["cuda"]
    assert checkpoint_size("cpu", 16 << 30) == CHECKPOINT_CPU_CAP_BYTES
    assert checkpoint_size("cpu", 1 << 20) == 1 << 20
    assert checkpoint_size("cuda", 16 << 30) == 16 << 30
    assert checkpoint_size("cuda", 140 << 30) == probes.CHECKPOINT_CUDA_CAP_BYTES


def test_checkpoint_probe_records_the_size_used(tmp_path: Path) -> None:
    case = checkpoint_case(6 << 20, 64 << 20, str(tmp_path), "cpu", SETTINGS)
    assert_measured(case, "checkpoint_save_s", "checkpoint_load_s", "checkpoint_save_bytes_per_s",
                    "checkpoint_load_bytes_per_s")
    assert case.params["checkpoint_bytes"] == 6 << 20 and case.params["scaled_down"] is True
    assert "scaled down" in next(m.note for m in case.metrics if m.name == "checkpoint_save_s")
    assert list(tmp_path.iterdir()) == []


def test_dataloader_probe() -> None:
    case = dataloader_case("cpu", SETTINGS)
    assert_measured(case, "dataloader_batches_per_s", "dataloader_tokens_per_s")
    batches = next(m for m in case.metrics if m.name == "dataloader_batches_per_s")
    tokens = next(m for m in case.metrics if m.name == "dataloader_tokens_per_s")
    assert tokens.value == pytest.approx(batches.value * probes.LOADER_BATCH * probes.LOADER_SEQ)
    assert case.params["workers"] == 0 and "first_batch" in {p.name for p in case.startup}


def test_fraction_of_peak() -> None:
    assert fraction_of_peak([2.0, 3.0], 4.0) == [0.5, 0.75]
    assert fraction_of_peak([2.0], None) is None
    assert fraction_of_peak([2.0], 0.0) is None


def test_matmul_peaks_come_from_the_catalog() -> None:
    h200, a100 = find_gpu("h200"), find_gpu("a100")
    assert matmul_peak_flops_per_s(h200, "bf16") == h200.bf16_flops_per_s == 989.5e12
    assert matmul_peak_flops_per_s(h200, "tf32") == h200.tf32_flops_per_s
    assert matmul_peak_flops_per_s(a100, "fp8") is None  # Ampere has no fp8 tensor cores


def test_fraction_metric_beside_a_catalog_peak() -> None:
    [metric] = probes.fraction_metrics([494.75, 989.5], 989.5, "TFLOP/s", "the bf16 dense peak")
    assert metric.name == "fraction_of_peak" and metric.unit == "fraction"
    assert metric.samples == (0.5, 1.0) and metric.value == pytest.approx(0.75)
    assert probes.fraction_metrics([1.0], None, "bytes/s", "x") == []


@pytest.mark.gpu
def test_every_probe_on_cuda(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    for planned in plan_probe_cases(SETTINGS, "cuda", 1 << 30, disk_bytes=64 << 20, disk_dir=str(tmp_path)):
        case = run_isolated(planned.fn, *planned.args, case=planned.name, size=planned.size, timeout_s=300)
        assert case.failure is None or case.failure.kind == "unsupported", case.failure
