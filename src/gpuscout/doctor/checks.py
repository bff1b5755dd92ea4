"""The doctor's per-worker measurements: matmul burst and soak, GPU-to-GPU copies, all-reduce.

Run inside a torchrun worker (`doctor.worker`) with torch imported and, for the collectives,
the process group initialised (NCCL on GPUs, gloo on the CPU): the engine a multi-GPU job uses.

* matmul burst: the best of square products at a few sizes (`plan.GPU_MATMUL_N`), each timed
  in windows after a warm-up, as the bands' sources measured (hardware/expected_bands.toml);
* matmul soak: the best size held for `soak_s` in ~0.25 s windows; sustained = the median of the
  last third, once the rate has stopped falling (its median within 2% of the middle third's);
* GPU-to-GPU copies: each ordered pair in turn, the sender's `dist.send` against the receiver's
  `dist.recv`, timed at the receiver (bytes / seconds);
* all-reduce: SUM of float32 at each size; bus bandwidth = bytes / time × 2(n − 1)/n, the
  nccl-tests convention that makes it comparable across GPU counts (NVIDIA/nccl-tests
  doc/PERFORMANCE.md), and one checked reduction (every element must equal n(n + 1)/2).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from gpuscout.measure.harness import derived_metric, time_repeats
from gpuscout.measure.probes import matmul_product
from gpuscout.results.schema import Case, Metric, Scalar

WINDOW_S = 0.25  # one timed window of the soak: short enough to see a clock step, long enough to amortise launches
SETTLED = 0.98  # the last third's median within 2% of the middle third's: the clock has stopped falling


def _sync(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _calibrate(torch: Any, step: Callable[[], Any], device: str) -> float:
    """Seconds per product, from a few untimed warm-up products (kernel selection, clocks up)."""
    for _ in range(3):
        step()
    _sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    _sync(torch, device)
    return max((time.perf_counter() - t0) / 3, 1e-6)


def _windows(torch: Any, step: Callable[[], Any], device: str, seconds: float, flops: float) -> list[float]:
    """FLOP/s of consecutive ~WINDOW_S windows of products, for `seconds` in all (at least two windows)."""
    per_product = _calibrate(torch, step, device)
    count = max(1, round(WINDOW_S / per_product))
    rates: list[float] = []
    end = time.perf_counter() + seconds
    while len(rates) < 2 or time.perf_counter() < end:
        [elapsed] = time_repeats(lambda: [step() for _ in range(count)], warmup=0, repeats=1, device=device)
        rates.append(flops * count / elapsed)
    return rates


def matmul_checks(torch: Any, dtype: str, device: str, sizes: tuple[int, ...], burst_s: float,
                  soak_s: float | None) -> Case:
    """Burst at each size (best kept) and, when `soak_s` is given, a soak at the best size."""
    start = time.perf_counter()
    best_n, best_rate, burst = 0, 0.0, [0.0]
    for n in sizes:
        step = matmul_product(torch, dtype, n, device)
        rates = _windows(torch, step, device, burst_s / len(sizes), 2.0 * n**3)
        if statistics.median(rates) > best_rate:
            best_n, best_rate, burst = n, statistics.median(rates), rates
    metrics = [derived_metric("burst_flop_per_s", "FLOP/s", burst,
                              note=f"best of square products n = {', '.join(map(str, sizes))}: n = {best_n}; "
                                   f"~{WINDOW_S:g} s windows after warm-up, random normal inputs")]
    params: dict[str, Scalar] = {"dtype": dtype, "sizes": ",".join(map(str, sizes)), "device": device}
    notes: list[str] = []
    if soak_s:
        soak = _windows(torch, matmul_product(torch, dtype, best_n, device), device, soak_s, 2.0 * best_n**3)
        _, settled = sustained_rate(soak)
        metrics.append(derived_metric("sustained_flop_per_s", "FLOP/s", soak[-max(len(soak) // 3, 1):],
                                      note=f"last third of a {soak_s:g} s soak at n = {best_n}"))
        metrics.append(Metric(name="soak_flop_per_s", unit="FLOP/s", value=statistics.median(soak), samples=tuple(soak),
                              higher_is_better=True, note="every window of the soak, in order"))
        if not settled:
            notes.append(f"the rate was still falling at the end of the {soak_s:g} s soak: sustained may be lower")
        params["soak_s"] = soak_s
    return Case(name=f"matmul {dtype}", params=params, metrics=tuple(metrics), notes=tuple(notes),
                wall_s=time.perf_counter() - start)


def sustained_rate(windows: list[float]) -> tuple[float, bool]:
    """(median of the last third of the windows, whether the rate had settled by then)."""
    third = max(len(windows) // 3, 1)
    last = statistics.median(windows[-third:])
    middle = windows[-2 * third:-third] or windows[:third]
    return last, last >= SETTLED * statistics.median(middle)


def ring_pairs(world: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % world) for i in range(world)] if world > 2 else [(0, 1), (1, 0)][: world * (world - 1)]


def all_pairs(world: int) -> list[tuple[int, int]]:
    return [(s, d) for s in range(world) for d in range(world) if s != d]


def p2p_checks(torch: Any, dist: Any, rank: int, pairs: list[tuple[int, int]], nbytes: int, repeats: int,
               device: str) -> Case:
    """Bytes/s of every pair this rank received on; every rank takes part in every barrier."""
    start = time.perf_counter()
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    metrics = []
    for src, dst in pairs:
        dist.barrier()
        if rank == src:
            for _ in range(1 + repeats):  # one untimed: the pair's connection is set up lazily
                dist.send(buf, dst)
            _sync(torch, device)
        elif rank == dst:
            dist.recv(buf, src)
            _sync(torch, device)
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                dist.recv(buf, src)
                _sync(torch, device)
                samples.append(nbytes / (time.perf_counter() - t0))
            metrics.append(derived_metric(f"p2p_{src}_to_{dst}_bytes_per_s", "bytes/s", samples,
                                          note=f"{nbytes / 2**20:g} MiB from rank {src} to rank {dst}, "
                                               "send/recv through torch.distributed, timed at the receiver"))
    dist.barrier()
    return Case(name="gpu-to-gpu copies", params={"bytes": nbytes, "device": device}, metrics=tuple(metrics),
                wall_s=time.perf_counter() - start)


def allreduce_checks(torch: Any, dist: Any, world: int, sizes: tuple[int, ...], repeats: int, device: str,
                     backend: str) -> Case:
    """Bus and algorithm bandwidth of a float32 SUM all-reduce at each size, and one checked result."""
    start = time.perf_counter()
    factor = 2 * (world - 1) / world
    metrics: list[Metric] = []
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(2):
            dist.all_reduce(buf)
        samples = []
        for _ in range(repeats):
            dist.barrier()
            _sync(torch, device)
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            _sync(torch, device)
            samples.append(size / (time.perf_counter() - t0))
        label = f"{size / 2**20:g} MiB"
        metrics.append(derived_metric(f"busbw_{size}_bytes_per_s", "bytes/s", [s * factor for s in samples],
                                      note=f"{label}: bytes / time × 2(n−1)/n, n = {world} ({backend})"))
        metrics.append(derived_metric(f"algbw_{size}_bytes_per_s", "bytes/s", samples, note=f"{label}: bytes / time"))
    wrong = _checked_reduction(torch, dist, world, device)
    metrics.append(Metric(name="wrong_elements", unit="elements", value=float(wrong),
                          note="elements of a 1M-element SUM that differed from n(n + 1)/2"))
    params: dict[str, Scalar] = {"world_size": world, "backend": backend, "dtype": "fp32",
                                 "sizes": ",".join(str(s) for s in sizes)}
    return Case(name="all-reduce", params=params, metrics=tuple(metrics), wall_s=time.perf_counter() - start)


def _checked_reduction(torch: Any, dist: Any, world: int, device: str) -> int:
    buf = torch.full((1 << 20,), float(dist.get_rank() + 1), dtype=torch.float32, device=device)
    dist.all_reduce(buf)
    return int((buf != world * (world + 1) / 2).sum().item())
