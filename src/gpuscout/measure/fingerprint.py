"""The environment fingerprint of docs/measurement.md §1: the machine and software a result came from.

GPU facts come from NVML (nvidia-ml-py) when it is importable, else from `nvidia-smi --query-gpu`,
else from torch's device properties. NVML and nvidia-smi do not create a CUDA context, so the
parent process of a bench run stays off the GPU and cannot skew the cases' memory readings; the
torch fallback does create one (noted in the result). Everything GPU-related is None on a CPU
machine; anything a driver does not report (MIG on consumer cards, ECC on GeForce) is None too.

Only the first visible GPU is described (the one a single-GPU case runs on); `gpu_count` counts
what torch sees (CUDA_VISIBLE_DEVICES applies).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gpuscout.errors import UnknownNameError
from gpuscout.hardware.catalog import find_gpu
from gpuscout.host import cpu_model, package_version, ram_bytes, usable_cores
from gpuscout.measure.peak_memory import open_nvml
from gpuscout.results.schema import Fingerprint

# Distribution name → key in Fingerprint.libraries.
LIBRARIES = {
    "torch": "torch", "transformers": "transformers", "peft": "peft", "accelerate": "accelerate",
    "diffusers": "diffusers", "bitsandbytes": "bitsandbytes", "safetensors": "safetensors",
    "flash-attn": "flash_attn", "nvidia-ml-py": "nvidia-ml-py", "triton": "triton", "numpy": "numpy",
}
_SMI_FIELDS = ("name", "memory.total", "driver_version", "clocks.max.sm", "clocks.max.mem", "power.limit",
               "pcie.link.gen.max", "pcie.link.width.max", "mig.mode.current", "ecc.mode.current", "compute_cap")


def collect_fingerprint(device: str, *, disk_path: Path | None = None) -> Fingerprint:
    """Describe this machine; `device` is the resolved bench device ("cuda" or "cpu")."""
    gpu = _gpu_facts() if device == "cuda" else {}
    return Fingerprint(
        gpuscout_version=package_version("gpuscout") or "unknown",
        python=platform.python_version(),
        platform=platform.platform(),
        cpu_model=cpu_model(),
        cpu_cores=usable_cores(),
        ram_bytes=ram_bytes(),
        disk_free_bytes=_disk_free(disk_path or Path.cwd()),
        libraries=library_versions(),
        cuda=_torch_cuda_version(),
        **gpu,
    )


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that change the numbers; absent ones are left out."""
    found = {key: package_version(dist) for dist, key in LIBRARIES.items()}
    found["gpuscout"] = package_version("gpuscout")
    return {k: v for k, v in found.items() if v}


def match_sku(gpu_name: str | None) -> str | None:
    """The catalog SKU of a driver-reported name ("NVIDIA H100 80GB HBM3" → h100-sxm5-80gb), else None."""
    if not gpu_name:
        return None
    try:
        return find_gpu(gpu_name).sku
    except UnknownNameError:
        return None


def _disk_free(path: Path) -> int | None:
    try:
        return int(shutil.disk_usage(path).free)
    except OSError:
        return None


def _torch_cuda_version() -> str | None:
    """The CUDA runtime torch was built with (torch.version.cuda); None for CPU builds."""
    try:
        import torch
    except ImportError:
        return None
    return torch.version.cuda


def _gpu_facts() -> dict[str, Any]:
    facts = _nvml_facts() or _smi_facts() or _torch_facts()
    facts["gpu_sku"] = match_sku(facts.get("gpu_name"))
    facts["gpu_count"] = _gpu_count()
    facts["topology"] = _topology()
    return facts


def _gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count())


def _nvml_facts() -> dict[str, Any] | None:
    pynvml = open_nvml()
    if pynvml is None:
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(_first_visible_index())
        name = pynvml.nvmlDeviceGetName(handle)
    except Exception:  # NVMLError_* per cause (no driver, no permission): no NVML view
        return None
    major_minor = _nvml(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    power_mw = _nvml(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    mig = _nvml(pynvml.nvmlDeviceGetMigMode, handle)
    ecc = _nvml(pynvml.nvmlDeviceGetCurrentEccMode, handle)
    memory = _nvml(pynvml.nvmlDeviceGetMemoryInfo, handle)
    return {
        "gpu_name": _text(name),
        "gpu_memory_bytes": int(memory.total) if memory is not None else None,
        "driver": _text(_nvml(pynvml.nvmlSystemGetDriverVersion)),
        "compute_capability": f"{major_minor[0]}.{major_minor[1]}" if major_minor else None,
        "sm_clock_mhz": _nvml(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "memory_clock_mhz": _nvml(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM),
        "power_limit_w": power_mw / 1000 if power_mw is not None else None,
        # Max link of device and system together: the current link drops to gen 1 when idle.
        "pcie_generation": _nvml(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_width": _nvml(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "mig_mode": ("enabled" if mig[0] else "disabled") if mig is not None else None,
        "ecc": bool(ecc) if ecc is not None else None,
    }


def _nvml(fn: Any, *args: Any) -> Any:
    """One NVML query, None when the device does not support it (NVMLError_NotSupported …)."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _first_visible_index() -> int:
    """NVML index of the first GPU in CUDA_VISIBLE_DEVICES (NVML ignores that variable)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _smi_facts() -> dict[str, Any] | None:
    out = _run(["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits",
                "-i", str(_first_visible_index())])
    if not out:
        return None
    values = dict(zip(_SMI_FIELDS, (v.strip() for v in out.splitlines()[0].split(",")), strict=False))

    def num(key: str) -> float | None:
        try:
            return float(values.get(key, ""))
        except ValueError:
            return None

    mem_mib, gen, width = num("memory.total"), num("pcie.link.gen.max"), num("pcie.link.width.max")
    sm, memclk, ecc = num("clocks.max.sm"), num("clocks.max.mem"), values.get("ecc.mode.current", "")
    mig = values.get("mig.mode.current", "")
    return {
        "gpu_name": values.get("name"),
        "gpu_memory_bytes": int(mem_mib * 2**20) if mem_mib else None,
        "driver": values.get("driver_version"),
        "compute_capability": values.get("compute_cap") or None,
        "sm_clock_mhz": int(sm) if sm else None,
        "memory_clock_mhz": int(memclk) if memclk else None,
        "power_limit_w": num("power.limit"),
        "pcie_generation": int(gen) if gen else None,
        "pcie_width": int(width) if width else None,
        "mig_mode": mig.lower() if mig and "n/a" not in mig.lower() else None,
        "ecc": {"Enabled": True, "Disabled": False}.get(ecc),
    }


def _torch_facts() -> dict[str, Any]:
    """Last resort without NVML or nvidia-smi: torch's properties (this creates a CUDA context)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"gpu_name": props.name, "gpu_memory_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}"}


def _topology() -> str | None:
    """`nvidia-smi topo -m`: which GPUs talk over NVLink (NV#), PCIe switches (PIX/PXB) or the CPU (SYS)."""
    out = _run(["nvidia-smi", "topo", "-m"])
    return (out or "").strip() or None


def _run(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
