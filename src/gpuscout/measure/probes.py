"""Machine probes (`gpuscout bench --probe`): what this box's parts deliver, against their datasheet.

Each probe is one case in its own process (`harness.run_isolated`), warmed up and repeated with
raw samples kept (docs/measurement.md §1.2, §1.3):

* dense matmul rate per dtype: fp32 (IEEE), tf32 (fp32 inputs on tensor cores, CUDA only), bf16,
  fp16, and fp8 e4m3 through `torch._scaled_mm` where the GPU has it (compute capability ≥ 8.9);
  square n × n products of random normal data (zeros run faster and would flatter the GPU);
* device memory bandwidth: a large device-to-device copy, counting bytes read and written;
* host↔device copy bandwidth from pinned host memory, each direction (CUDA only);
* disk sequential write (fsync'd) and read of a temporary file;
* checkpoint save and load with safetensors at the model's size (capped: 256 MiB on the CPU,
  32 GiB on a GPU; the size used is recorded);
* data loading: a DataLoader over synthetic tokenized batches, batches/s and tokens/s.

Where the catalog has a figure for the detected GPU, a `fraction_of_peak` metric sits beside the
measurement (matmul against the dtype's dense peak, copy bandwidth against the memory bandwidth,
host copies against one direction of the PCIe figure). On the CPU there is no catalog peak: the
fraction is absent and the measurement's note says so.

CUDA-only probes (tf32, fp8, host↔device copies) on the CPU raise `UnsupportedHere`, so the result
records them as `unsupported` failures with the reason rather than leaving them out silently.

torch and safetensors are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.errors import UnknownNameError, UnsupportedHere
from gpuscout.hardware.catalog import Gpu, find_gpu, peak_flops_per_s
from gpuscout.measure.harness import (
    BenchSettings,
    PlannedCase,
    derived_metric,
    time_repeats,
    timed_metric,
)
from gpuscout.measure.peak_memory import PeakMemoryMonitor, peak_rss_bytes
from gpuscout.measure.startup import StartupClock
from gpuscout.results.schema import Case, Metric, PeakMemory, Scalar

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
CUDA_ONLY_DTYPES = frozenset({"tf32", "fp8"})
# Side of the square matmul: 8192 keeps an H100/H200 busy for milliseconds per product (one
# 8192³ bf16 product is 1.1 TFLOP, about 1.4 ms at 800 TFLOP/s). On a CPU 512 takes milliseconds in
# fp32/bf16; CPUs without fp16 arithmetic run fp16 products at a few GFLOP/s, so fp16 gets 256 there.
MATMUL_N_CUDA = 8192
MATMUL_N_CPU = {"fp32": 512, "bf16": 512, "fp16": 256}
MATMUL_INNER = {"cuda": 10, "cpu": 4}  # products per timed sample: launch overhead stays negligible
COPY_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}  # device copy: far beyond any cache (H200 L2: 60 MB)
HOST_COPY_BYTES = 1 << 30
DISK_BYTES = {"cuda": 1 << 30, "cpu": 128 << 20}
DISK_CHUNK_BYTES = 16 << 20
CHECKPOINT_DEFAULT_BYTES = {"cuda": 2 << 30, "cpu": 64 << 20}  # when the job names no model
CHECKPOINT_CPU_CAP_BYTES = 256 << 20  # "scaled down on the CPU"
# On a GPU the model's own size, up to 32 GiB (a 16B model in bf16): beyond that the probe would
# hold the whole checkpoint in device memory next to nothing else and take minutes per repeat.
CHECKPOINT_CUDA_CAP_BYTES = 32 << 30
CHECKPOINT_SHARD_BYTES = 256 << 20  # one tensor per 256 MiB, like a model's large weight matrices
LOADER_BATCH, LOADER_SEQ, LOADER_VOCAB, LOADER_BATCHES = 8, 2048, 32_000, 20
NO_CPU_PEAK = "fraction_of_peak: none — the catalog holds GPU figures only, not this CPU's"


def plan_probe_cases(
    settings: BenchSettings, device: str, model_bytes: int | None, *, disk_bytes: int | None = None,
    disk_dir: str | None = None,
) -> list[PlannedCase]:
    """Every probe as a case; `model_bytes` sizes the checkpoint probe (None: a default size).

    `disk_bytes` and `disk_dir` override the disk probe's file size and folder (default: the current
    directory, where a job usually keeps its checkpoints; /tmp is often RAM-backed).
    """
    cases = [PlannedCase(f"matmul {dtype}", matmul_case, (dtype, device, settings), {"dtype": dtype})
             for dtype in MATMUL_DTYPES]
    cases.append(PlannedCase("device memory bandwidth", device_bandwidth_case, (device, settings),
                             {"bytes": COPY_BYTES.get(device, COPY_BYTES["cpu"])}))
    cases += [PlannedCase(f"host copy {d}", host_copy_case, (d, device, settings), {"direction": d,
                                                                                    "bytes": HOST_COPY_BYTES})
              for d in ("h2d", "d2h")]
    size = disk_bytes or DISK_BYTES.get(device, DISK_BYTES["cpu"])
    folder = disk_dir or os.getcwd()
    cases.append(PlannedCase("disk sequential", disk_case, (size, folder, settings), {"bytes": size}))
    ckpt = checkpoint_size(device, model_bytes)
    cases.append(PlannedCase("checkpoint save/load", checkpoint_case, (ckpt, model_bytes, folder, device, settings),
                             {"checkpoint_bytes": ckpt}))
    cases.append(PlannedCase("data loading", dataloader_case, (device, settings), {"batch": LOADER_BATCH,
                                                                                   "seq_len": LOADER_SEQ}))
    return cases


def checkpoint_size(device: str, model_bytes: int | None) -> int:
    """The checkpoint probe's size: the model's bytes up to a cap (small on the CPU); a default
    size when no model is given."""
    if model_bytes is None:
        return CHECKPOINT_DEFAULT_BYTES.get(device, CHECKPOINT_DEFAULT_BYTES["cpu"])
    return min(model_bytes, CHECKPOINT_CUDA_CAP_BYTES if device == "cuda" else CHECKPOINT_CPU_CAP_BYTES)


def fraction_of_peak(values: list[float], peak: float | None) -> list[float] | None:
    """Each sample as a fraction of `peak`; None when there is no peak to hold it against."""
    return None if not peak else [v / peak for v in values]


# --- matmul -----------------------------------------------------------------------------------------


def matmul_case(dtype: str, device: str, settings: BenchSettings) -> Case:
    """Dense n × n × n products in `dtype`; TFLOP/s = 2 n³ × products / seconds."""
    if dtype in CUDA_ONLY_DTYPES and device != "cuda":
        raise UnsupportedHere(f"{dtype} matmul needs a CUDA GPU: "
                              + ("TF32 is a tensor-core mode" if dtype == "tf32" else "fp8 runs on tensor cores")
                              + "; this run is on the CPU.")
    run = _start(device, settings)
    torch = run.torch
    n = MATMUL_N_CUDA if device == "cuda" else MATMUL_N_CPU[dtype]
    inner = MATMUL_INNER[device]
    product = matmul_product(torch, dtype, n, device)
    seconds = time_repeats(lambda: [product() for _ in range(inner)], warmup=max(settings.warmup, 1),
                           repeats=settings.repeats, device=device)
    tflops = [2 * n**3 * inner / s / 1e12 for s in seconds]
    gpu, where = _catalog_gpu(torch, device)
    peak = matmul_peak_flops_per_s(gpu, dtype)
    note = f"2·n³·{inner} / seconds per sample, n = {n}, random normal inputs"
    metrics = [derived_metric("matmul_tflop_per_s", "TFLOP/s", tflops, note=_with_peak_note(note, gpu, peak, where))]
    metrics += fraction_metrics(tflops, peak / 1e12 if peak else None, "TFLOP/s", f"the {dtype} dense peak")
    params: dict[str, Scalar] = {"dtype": dtype, "n": n, "products_per_sample": inner, "device": device}
    return run.case(f"matmul {dtype}", params, metrics)


def matmul_product(torch: Any, dtype: str, n: int, device: str) -> Callable[[], Any]:
    """A zero-argument product in `dtype`; fp8 through `_scaled_mm` or UnsupportedHere."""
    if dtype in ("fp32", "tf32"):
        torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")  # high = TF32 allowed
    if dtype == "fp8":
        return _fp8_matmul(torch, n)
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    return lambda: torch.mm(a, b)


def _fp8_matmul(torch: Any, n: int) -> Callable[[], Any]:
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9) or not hasattr(torch, "_scaled_mm"):
        raise UnsupportedHere(f"fp8 matmul needs compute capability ≥ 8.9 and torch._scaled_mm; this GPU is "
                              f"{major}.{minor} with torch {torch.__version__}.")
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # _scaled_mm wants b column-major
    one = torch.tensor(1.0, device="cuda")

    def product() -> Any:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        product()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        raise UnsupportedHere(f"torch._scaled_mm refused fp8 e4m3 here: {exc}") from None
    return product


# --- copies -----------------------------------------------------------------------------------------


def device_bandwidth_case(device: str, settings: BenchSettings) -> Case:
    """Device-to-device copy; bytes/s counts the bytes read and the bytes written (2 × size)."""
    run = _start(device, settings)
    torch = run.torch
    size = COPY_BYTES[device]
    src = torch.randint(0, 255, (size,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copies = 5 if device == "cuda" else 3
    seconds = time_repeats(lambda: [dst.copy_(src) for _ in range(copies)], warmup=max(settings.warmup, 1),
                           repeats=settings.repeats, device=device)
    rates = [2 * size * copies / s for s in seconds]
    gpu, where = _catalog_gpu(torch, device)
    peak = gpu.memory_bandwidth_bytes_per_s if gpu else None
    what = "device-to-device" if device == "cuda" else "host RAM (the CPU's 'device')"
    note = f"{what} copy of {size / 2**20:g} MiB × {copies}, read + write bytes / seconds"
    metrics = [derived_metric("memory_bandwidth_bytes_per_s", "bytes/s", rates,
                              note=_with_peak_note(note, gpu, peak, where))]
    metrics += fraction_metrics(rates, peak, "bytes/s", "the catalog memory bandwidth")
    return run.case("device memory bandwidth", {"bytes": size, "copies_per_sample": copies, "device": device}, metrics)


def host_copy_case(direction: str, device: str, settings: BenchSettings) -> Case:
    """Pinned host ↔ device copy of 1 GiB in one direction (h2d or d2h); CUDA only."""
    if device != "cuda":
        raise UnsupportedHere(f"host↔device copies ({direction}) need a CUDA GPU; on the CPU there is no copy.")
    run = _start(device, settings)
    torch = run.torch
    host = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst, src = (dev, host) if direction == "h2d" else (host, dev)
    seconds = time_repeats(lambda: dst.copy_(src, non_blocking=True), warmup=max(settings.warmup, 1),
                           repeats=settings.repeats, device=device)
    rates = [HOST_COPY_BYTES / s for s in seconds]
    gpu, where = _catalog_gpu(torch, device)
    # The datasheets' PCIe figure counts both directions (x16 Gen5: "128 GB/s" = 64 GB/s each way).
    peak = gpu.pcie_bytes_per_s / 2 if gpu and gpu.pcie_bytes_per_s else None
    note = f"pinned host memory, {HOST_COPY_BYTES / 2**30:g} GiB per sample, non_blocking copy timed by CUDA events"
    metrics = [derived_metric(f"{direction}_bytes_per_s", "bytes/s", rates,
                              note=_with_peak_note(note, gpu, peak, where))]
    metrics += fraction_metrics(rates, peak, "bytes/s", "one direction of the catalog PCIe figure (half its total)")
    params: dict[str, Scalar] = {"direction": direction, "bytes": HOST_COPY_BYTES, "device": device}
    return run.case(f"host copy {direction}", params, metrics)


# --- storage ----------------------------------------------------------------------------------------


def disk_case(size: int, folder: str, settings: BenchSettings) -> Case:
    """Sequential write (then fsync) and read of a temporary file of `size` bytes in `folder`."""
    start = time.perf_counter()
    _require_space(folder, size)
    chunk = os.urandom(min(DISK_CHUNK_BYTES, size))  # random: compression or dedup cannot help
    writes, reads = [], []
    with _temp_file(folder, ".probe") as path:
        for i in range(settings.warmup + settings.repeats):
            w = _write_file(path, chunk, size)
            r = _read_file(path)
            if i >= settings.warmup:
                writes.append(size / w)
                reads.append(size / r)
    where = f"{size / 2**20:g} MiB file in {folder} ({_filesystem(folder)}); "
    cache = ("read after fsync and posix_fadvise(DONTNEED) to evict the file's pages; the system-wide cache "
             "cannot be dropped without root (echo 3 > /proc/sys/vm/drop_caches), so a read may still hit it")
    metrics = [
        derived_metric("disk_write_bytes_per_s", "bytes/s", writes,
                       note=where + f"{DISK_CHUNK_BYTES >> 20} MiB writes then fsync; no catalog figure for disks"),
        derived_metric("disk_read_bytes_per_s", "bytes/s", reads, note=where + cache),
    ]
    return Case(name="disk sequential", params={"bytes": size, "folder": folder}, metrics=tuple(metrics),
                peak_memory=PeakMemory(process_rss_bytes=peak_rss_bytes()), wall_s=time.perf_counter() - start)


def checkpoint_case(size: int, model_bytes: int | None, folder: str, device: str, settings: BenchSettings) -> Case:
    """safetensors save (device → host → file, fsync'd) and load (file → device) of `size` bytes."""
    _require_space(folder, size)
    run = _start(device, settings)
    torch = run.torch
    from safetensors.torch import load_file, save_file

    tensors = _checkpoint_tensors(torch, size, device)
    saves, loads = [], []
    with _temp_file(folder, ".safetensors") as path:
        for i in range(settings.warmup + settings.repeats):
            t0 = time.perf_counter()
            save_file({k: v.to("cpu") for k, v in tensors.items()}, str(path))
            _fsync(path)
            t1 = time.perf_counter()
            _evict(path)
            t2 = time.perf_counter()
            _touch(torch, load_file(str(path), device=device), device)
            t3 = time.perf_counter()
            if i >= settings.warmup:
                saves.append(t1 - t0)
                loads.append(t3 - t2)
    scaled = model_bytes is not None and size < model_bytes
    sized = f"{size / 2**20:.1f} MiB in {len(tensors)} bf16 tensors"
    if model_bytes is None:
        sized += " (no model given: a default size)"
    elif scaled:
        sized += f", scaled down from the model's {model_bytes / 2**30:.2f} GiB (the cap on {device})"
    metrics = [
        timed_metric("checkpoint_save_s", "s", saves, note=f"save_file after copying to host, then fsync; {sized}"),
        timed_metric("checkpoint_load_s", "s", loads,
                     note=f"load_file to {device} after evicting the file's cached pages; {sized}"),
        derived_metric("checkpoint_save_bytes_per_s", "bytes/s", [size / s for s in saves], note="no catalog figure"),
        derived_metric("checkpoint_load_bytes_per_s", "bytes/s", [size / s for s in loads], note="no catalog figure"),
    ]
    params: dict[str, Scalar] = {"checkpoint_bytes": size, "model_bytes": model_bytes, "scaled_down": scaled,
                                 "folder": folder, "device": device}
    return run.case("checkpoint save/load", params, metrics)


def _touch(torch: Any, tensors: dict[str, Any], device: str) -> None:
    """Make the load real: on the CPU safetensors may hand back memory-mapped tensors whose pages
    are read only when touched, so read one element per 4 KiB page; on a GPU, wait for the copies."""
    if device == "cuda":
        torch.cuda.synchronize()
        return
    for tensor in tensors.values():
        flat = tensor.reshape(-1)
        flat[:: 4096 // flat.element_size()].float().sum()


def _checkpoint_tensors(torch: Any, size: int, device: str) -> dict[str, Any]:
    elements = size // 2  # bf16
    shard = CHECKPOINT_SHARD_BYTES // 2
    tensors, i = {}, 0
    while elements > 0:
        count = min(shard, elements)
        tensors[f"layers.{i}.weight"] = torch.randn(count, dtype=torch.bfloat16, device=device)
        elements -= count
        i += 1
    return tensors


def _write_file(path: Path, chunk: bytes, size: int) -> float:
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        written = 0
        while written < size:
            written += f.write(chunk[: size - written])
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def _read_file(path: Path) -> float:
    _evict(path)
    buffer = bytearray(DISK_CHUNK_BYTES)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass
    return time.perf_counter() - t0


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _evict(path: Path) -> None:
    """Ask the kernel to drop the (clean, fsync'd) file's cached pages; best effort."""
    if not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@contextmanager
def _temp_file(folder: str, suffix: str) -> Iterator[Path]:
    fd, name = tempfile.mkstemp(prefix=".gpuscout-probe-", suffix=suffix, dir=folder)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _require_space(folder: str, size: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < 2 * size:
        raise UnsupportedHere(f"{folder} has {free / 2**30:.1f} GiB free; the probe needs twice its "
                              f"{size / 2**30:.2f} GiB file. Free space or point it at another folder.")


def _filesystem(folder: str) -> str:
    """'<device> <fstype>' of the mount holding `folder`, from /proc/mounts (Linux); else 'unknown'."""
    try:
        mounts = [line.split()[:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "filesystem unknown"
    real = os.path.realpath(folder)
    best = max((m for m in mounts if len(m) == 3 and (real == m[1] or real.startswith(m[1].rstrip("/") + "/"))),
               key=lambda m: len(m[1]), default=None)
    return f"{best[0]} {best[2]}" if best else "filesystem unknown"


# --- data loading -----------------------------------------------------------------------------------


class SyntheticTokens:
    """A map-style dataset of seeded random token sequences, as a tokenized corpus would yield."""

    def __init__(self, size: int, seq_len: int, vocab: int, seed: int) -> None:
        self.size, self.seq_len, self.vocab, self.seed = size, seq_len, vocab, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def dataloader_case(device: str, settings: BenchSettings) -> Case:
    """Batches/s of a torch DataLoader over synthetic tokenized samples, moved to the device."""
    run = _start(device, settings)
    torch = run.torch
    from torch.utils.data import DataLoader

    workers, why = loader_workers(device)
    dataset = SyntheticTokens(LOADER_BATCH * LOADER_BATCHES * (settings.warmup + settings.repeats + 1), LOADER_SEQ,
                              LOADER_VOCAB, settings.seed)
    loader: Any = DataLoader(dataset, batch_size=LOADER_BATCH, shuffle=True, num_workers=workers,  # type: ignore[arg-type]
                             pin_memory=device == "cuda", generator=torch.Generator().manual_seed(settings.seed))
    batches = iter(loader)
    next(batches)
    run.clock.mark("first_batch")

    def load() -> None:
        for _ in range(LOADER_BATCHES):
            batch = next(batches)
            for value in batch.values():
                value.to(device, non_blocking=True)

    seconds = time_repeats(load, warmup=settings.warmup, repeats=settings.repeats, device=device)
    note = (f"{LOADER_BATCHES} batches of {LOADER_BATCH} × {LOADER_SEQ} tokens per sample, {workers} worker(s)"
            + (f" ({why})" if why else "")
            + "; no catalog figure")
    metrics = [
        derived_metric("dataloader_batches_per_s", "batches/s", [LOADER_BATCHES / s for s in seconds], note=note),
        derived_metric("dataloader_tokens_per_s", "tokens/s",
                       [LOADER_BATCHES * LOADER_BATCH * LOADER_SEQ / s for s in seconds], note=note),
    ]
    params: dict[str, Scalar] = {"batch": LOADER_BATCH, "seq_len": LOADER_SEQ, "workers": workers, "device": device}
    return run.case("data loading", params, metrics)


def loader_workers(device: str) -> tuple[int, str]:
    """DataLoader workers and why there are none: a daemon process may not have children; a CPU
    benchmark keeps its cores for the model. Else up to 4, leaving half the cores to the main process."""
    if multiprocessing.current_process().daemon:
        return 0, "the case runs in a daemon process, which cannot start DataLoader workers"
    if device != "cuda":
        return 0, "CPU run: loading shares the cores with compute"
    return min(4, max((os.cpu_count() or 1) // 2, 1)), ""


# --- shared -----------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One probe's process: torch, its startup clock and its peak-memory monitor (running)."""

    torch: Any
    clock: StartupClock
    monitor: PeakMemoryMonitor
    start: float

    def case(self, name: str, params: dict[str, Scalar], metrics: list[Metric]) -> Case:
        self.monitor.__exit__(None, None, None)
        return Case(name=name, params=params, metrics=tuple(metrics), peak_memory=self.monitor.result(),
                    startup=self.clock.phases(), wall_s=time.perf_counter() - self.start)


def _start(device: str, settings: BenchSettings) -> _Run:
    """Import torch and initialise CUDA as startup phases, then start the peak-memory monitor."""
    start = time.perf_counter()
    clock = StartupClock(settings.created_at)
    import torch

    clock.mark("imports")
    clock.init_cuda(torch, device)
    return _Run(torch, clock, PeakMemoryMonitor(device).__enter__(), start)


def _catalog_gpu(torch: Any, device: str) -> tuple[Gpu | None, str]:
    """The catalog row of the GPU in use, and a phrase saying what was (not) found."""
    if device != "cuda":
        return None, "cpu"
    name = str(torch.cuda.get_device_name(0))
    try:
        return find_gpu(name), name
    except UnknownNameError:
        return None, name


def matmul_peak_flops_per_s(gpu: Gpu | None, dtype: str) -> float | None:
    """The catalog's dense peak of `gpu` for `dtype`; None without a GPU or where it has no figure."""
    if gpu is None:
        return None
    value: float | None = getattr(gpu, f"{dtype}_flops_per_s")
    return peak_flops_per_s(gpu, dtype) if value is not None else None


def _with_peak_note(note: str, gpu: Gpu | None, peak: float | None, where: str) -> str:
    if where == "cpu":
        return f"{note}; {NO_CPU_PEAK}"
    if gpu is None:
        return f"{note}; fraction_of_peak: none — {where!r} is not in the GPU catalog"
    if peak is None:
        return f"{note}; fraction_of_peak: none — the catalog has no such figure for {gpu.name}"
    return f"{note}; peak from the catalog row {gpu.sku}"


def fraction_metrics(values: list[float], peak: float | None, unit: str, what: str) -> list[Metric]:
    fractions = fraction_of_peak(values, peak)
    if fractions is None or peak is None:
        return []
    return [derived_metric("fraction_of_peak", "fraction", fractions, note=f"measured / {peak:.4g} {unit}, {what}")]
