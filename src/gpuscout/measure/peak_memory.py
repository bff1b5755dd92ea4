"""Peak memory of one case, seen three ways (docs/measurement.md §1; docs/measurement.md §1).

    torch_allocated_bytes   torch.cuda.max_memory_allocated: bytes of live tensors at the peak
    torch_reserved_bytes    torch.cuda.max_memory_reserved: what the caching allocator held from the
                            driver (allocated + cached free blocks); this decides the next OOM
    nvml_used_bytes         NVML, sampled every 10 ms in a thread: this process's `usedGpuMemory`
                            (includes the CUDA context, cuBLAS/NCCL workspaces, non-torch
                            allocations — what nvidia-smi shows); the device view when NVML gives
                            no per-process figure (containers with their own PID namespace)
    nvml_device_used_bytes  NVML device `used`: every process on the GPU, other tenants too
    process_rss_bytes       peak resident set of the case's process (getrusage ru_maxrss): the
                            CPU-side view, and the only one on a CPU machine. It includes the
                            interpreter and the imported libraries (~0.5 GB with torch).

Sampled NVML values can miss spikes shorter than the 10 ms period. The torch counters are reset
when the monitor starts, so they cover the model build and every step of the case; each case is
its own process, so ru_maxrss is the case's own peak.
"""

from __future__ import annotations

import importlib
import os
import resource
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from gpuscout.results.schema import PeakMemory

SAMPLE_PERIOD_S = 0.010  # optimum-benchmark samples NVML every 10 ms


def current_rss_bytes() -> int | None:
    """Resident set size now (/proc/self/statm × page size), for baselines."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set of this process; ru_maxrss is KiB on Linux and bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class PeakMemoryMonitor:
    """`with PeakMemoryMonitor(device) as mon: …` then `mon.result()`."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.baseline_rss_bytes = current_rss_bytes()
        self._nvml: _NvmlSampler | None = None

    def __enter__(self) -> PeakMemoryMonitor:
        if self.device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
            self._nvml = _NvmlSampler.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._nvml is not None:
            self._nvml.stop()

    def restart(self) -> None:
        """Forget the peaks so far (QLoRA: the transient 16-bit copy of a randomly built model)."""
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if self._nvml is not None:
            self._nvml.process_peak = self._nvml.device_peak = None

    def result(self, *, extrapolated_allocated_bytes: int | None = None) -> PeakMemory:
        allocated = reserved = total = None
        if self.device == "cuda":
            import torch

            allocated = int(torch.cuda.max_memory_allocated())
            reserved = int(torch.cuda.max_memory_reserved())
            total = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
        nvml = self._nvml
        return PeakMemory(
            torch_allocated_bytes=allocated,
            torch_reserved_bytes=reserved,
            nvml_used_bytes=(nvml.process_peak or nvml.device_peak) if nvml else None,
            nvml_device_used_bytes=nvml.device_peak if nvml else None,
            process_rss_bytes=peak_rss_bytes(),
            device_total_bytes=total,
            extrapolated_allocated_bytes=extrapolated_allocated_bytes,
        )


class _NvmlSampler:
    """A daemon thread that keeps the highest NVML readings for this process and its GPU."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._pid = os.getpid()
        self._stop = threading.Event()
        self.process_peak: int | None = None
        self.device_peak: int | None = None
        self._thread = threading.Thread(target=self._run, name="gpuscout-nvml", daemon=True)

    @classmethod
    def start(cls) -> _NvmlSampler | None:
        """None when nvidia-ml-py is missing or NVML cannot be initialised (no driver)."""
        pynvml = open_nvml()
        if pynvml is None:
            return None
        try:
            handle = nvml_handle_for_current_device(pynvml)
        except Exception:  # pynvml raises NVMLError subclasses per cause; any means "no NVML view"
            return None
        sampler = cls(pynvml, handle)
        sampler._sample()
        sampler._thread.start()
        return sampler

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_PERIOD_S):
            self._sample()

    def _sample(self) -> None:
        try:
            used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            self.device_peak = max(self.device_peak or 0, used)
            for proc in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if proc.pid == self._pid and proc.usedGpuMemory is not None:
                    self.process_peak = max(self.process_peak or 0, int(proc.usedGpuMemory))
        except Exception:  # a failed sample (driver hiccup) is skipped, not fatal to the case
            return


def open_nvml() -> Any | None:
    """The initialised `pynvml` module, or None when nvidia-ml-py is missing or NVML cannot start
    (no driver, no permission: pynvml raises an NVMLError subclass per cause)."""
    try:
        pynvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py: optional, untyped
        pynvml.nvmlInit()
    except Exception:  # ImportError or any NVMLError: no NVML view
        return None
    return pynvml


def nvml_handle_for_current_device(pynvml: Any) -> Any:
    """The NVML handle of torch's current device, matched by UUID: torch and NVML number GPUs
    differently unless CUDA_DEVICE_ORDER=PCI_BUS_ID (optimum-benchmark#136)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
        except Exception:  # older drivers / MIG: fall back to the index
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
