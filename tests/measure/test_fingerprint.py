"""The environment fingerprint, startup phases and memory views: full on a GPU, graceful on a CPU."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from gpuscout.measure import fingerprint
from gpuscout.measure.fingerprint import collect_fingerprint, library_versions, match_sku
from gpuscout.measure.peak_memory import PeakMemoryMonitor, peak_rss_bytes
from gpuscout.measure.startup import StartupClock, boot_time, process_start_time


def test_cpu_fingerprint_degrades_gpu_fields_to_none() -> None:
    fp = collect_fingerprint("cpu")
    assert fp.cpu_cores >= 1 and fp.cpu_model and fp.python and fp.platform
    assert fp.gpu_name is None and fp.gpu_sku is None and fp.gpu_count == 0 and fp.driver is None
    assert fp.ram_bytes and fp.ram_bytes > 2**28 and fp.disk_free_bytes
    assert {"torch", "transformers", "peft", "gpuscout"} <= set(fp.libraries)


def test_library_versions_leave_out_what_is_not_installed() -> None:
    versions = library_versions()
    assert "flash_attn" not in versions or versions["flash_attn"]
    assert all(isinstance(v, str) and v for v in versions.values())


@pytest.mark.parametrize(("name", "sku"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
    ("NVIDIA H200", "h200-sxm-141gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA Mystery 9000", None),
    (None, None),
])
def test_driver_names_resolve_to_catalog_skus(name: str | None, sku: str | None) -> None:
    assert match_sku(name) == sku


class _Mem:
    total = 80 * 2**30
    used = 2**30


def _fake_pynvml(*, mig_supported: bool) -> types.ModuleType:
    """A stand-in for nvidia-ml-py: what an H100 SXM reports; MIG raises NotSupported when asked to."""
    module = types.ModuleType("pynvml")
    calls: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: f"handle{i}",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetMemoryInfo": lambda h: _Mem(),
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: {0: 1980, 2: 2619}[kind],
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetCurrentEccMode": lambda h: 1,
        "NVML_CLOCK_SM": 0,
        "NVML_CLOCK_MEM": 2,
    }

    def mig(handle: str) -> tuple[int, int]:
        if not mig_supported:
            raise RuntimeError("NVMLError_NotSupported")
        return (0, 0)

    calls["nvmlDeviceGetMigMode"] = mig
    for key, value in calls.items():
        setattr(module, key, value)
    return module


def test_nvml_facts_fill_the_gpu_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(mig_supported=True))
    facts = fingerprint._nvml_facts()
    assert facts is not None
    assert facts["gpu_name"] == "NVIDIA H100 80GB HBM3" and facts["driver"] == "550.54.15"
    assert facts["compute_capability"] == "9.0" and facts["power_limit_w"] == 700.0
    assert (facts["sm_clock_mhz"], facts["memory_clock_mhz"]) == (1980, 2619)
    assert (facts["pcie_generation"], facts["pcie_width"]) == (5, 16)
    assert facts["mig_mode"] == "disabled" and facts["ecc"] is True and facts["gpu_memory_bytes"] == 80 * 2**30


def test_an_unsupported_nvml_query_becomes_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(mig_supported=False))
    facts = fingerprint._nvml_facts()
    assert facts is not None and facts["mig_mode"] is None and facts["driver"] == "550.54.15"


def test_nvidia_smi_query_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "NVIDIA H200, 143771, 560.35.03, 1980, 3201, 700.00, 5, 16, [N/A], Enabled, 9.0\n"
    monkeypatch.setattr(fingerprint, "_run", lambda command: line)
    facts = fingerprint._smi_facts()
    assert facts is not None
    assert facts["gpu_name"] == "NVIDIA H200" and facts["gpu_memory_bytes"] == 143771 * 2**20
    assert facts["mig_mode"] is None and facts["ecc"] is True and facts["pcie_generation"] == 5
    assert match_sku(facts["gpu_name"]) == "h200-sxm-141gb"


def test_startup_phases_run_in_order_and_since_created_uses_the_given_time() -> None:
    created = time.time() - 100.0
    clock = StartupClock(created_at=created)
    clock.mark("imports")
    clock.mark("model_build")
    started = time.time()
    clock.first_step(0.5, started_at=started)
    names = [p.name for p in clock.phases()]
    assert names[-4:] == ["imports", "model_build", "first_step", "since_created"]
    # Since creation until the first step's end: the times given, exactly, however long this test took.
    assert clock.phases()[-1].seconds == pytest.approx(started + 0.5 - created, abs=1e-6)
    assert all(p.seconds >= 0 for p in clock.phases())


def test_since_boot_without_a_creation_time() -> None:
    clock = StartupClock()
    clock.first_step(0.1, started_at=time.time())
    booted = boot_time()
    assert booted is not None and [p.name for p in clock.phases()][-1] == "since_boot"
    started = process_start_time()
    assert started is not None and booted < started <= time.time()


def test_cpu_memory_view_is_the_process_rss() -> None:
    with PeakMemoryMonitor("cpu") as monitor:
        block = bytearray(64 * 2**20)
    peak = monitor.result(extrapolated_allocated_bytes=123)
    del block
    assert peak.process_rss_bytes == peak_rss_bytes() and peak.process_rss_bytes >= 64 * 2**20
    assert peak.torch_allocated_bytes is None and peak.nvml_used_bytes is None
    assert peak.extrapolated_allocated_bytes == 123
