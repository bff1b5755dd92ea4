"""The benchmark harness: each case in its own process, warm-up then timed repeats, failures kept.

docs/measurement.md §1: one case's memory and failures must not leak into the next, so every case runs in
a freshly spawned process (`run_isolated`). Inside it, `time_repeats` warms up, synchronizes and
times each repeat with CUDA events on a GPU or `perf_counter_ns` on the CPU, keeping every raw
sample. An out-of-memory error or a crash becomes a `Failure` naming the size that failed, and
the caller goes on with the next case.

torch is imported inside functions only.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, ValidationError

from gpuscout.errors import SpecError, UnsupportedHere, option_error
from gpuscout.frozen import Frozen
from gpuscout.interrupts import die_with_parent, ignore_stop_signals, signals_blocked, unblock_stop_signals
from gpuscout.measure.telemetry import CpuWatch, GpuSampler, build_telemetry
from gpuscout.results.schema import BillingType, Case, Failure, FailureKind, Metric, Scalar, Telemetry
from gpuscout.stats import summarize

CaseFn = Callable[..., Case]


class BenchSettings(Frozen):
    """How to measure: the same for every case of a run, and recorded in the result."""


    device: str = "auto"  # auto | cuda | cpu (resolved by `resolve_device` before cases run)
    warmup: int = Field(2, ge=0)
    repeats: int = Field(5, ge=1)
    seed: int = 0
    layers: int | None = Field(None, ge=1)  # depth slice: build only K layers and extrapolate
    dataset: str | None = None  # a JSONL/text file of the user's data; None = synthetic seeded tokens
    created_at: float | None = None  # epoch seconds the machine was created (startup "since creation")
    timeout_s: float = Field(1800.0, gt=0)  # per case
    # Independent runs of every case, each in a fresh process, interleaved with the other cases
    # (run 1: A, B; run 2: A, B …) so a slow period hits every case; compare needs the variation
    # between runs to tell a real difference from drift (docs/measurement.md §1.4).
    runs: int = Field(3, ge=1, le=100)
    region: str | None = Field(None, max_length=200)  # where the machine was rented (a fixed variable)
    billing: BillingType | None = None  # on-demand / spot / reserved (a fixed variable)


def bench_settings(**options: Any) -> BenchSettings:
    """`BenchSettings` from keyword options; an invalid one is a SpecError naming it."""
    try:
        return BenchSettings(**options)
    except ValidationError as exc:
        raise option_error(exc, "bench needs repeats ≥ 1, warmup ≥ 0, layers ≥ 1, runs from 1 to 100, a region of "
                                "at most 200 characters and a billing type of on-demand, spot or reserved.",
                           "Correct {flag}.") from None


@dataclass(frozen=True)
class PlannedCase:
    """One case to run in its own process: `fn(*args)` returns its `Case`."""

    name: str
    fn: CaseFn
    args: tuple[Any, ...]
    size: dict[str, Scalar] = field(default_factory=dict)  # what to record if it fails


def run_watched(fn: CaseFn, *args: Any, case: str, size: dict[str, Scalar], timeout_s: float = 3600.0) -> Case:
    """`run_isolated`, with the machine watched while it runs: the case's telemetry and its findings
    (GPU from the case process, CPU from here, docs/measurement.md §1.13)."""
    with CpuWatch() as watch:
        result = run_isolated(fn, *args, case=case, size=size, timeout_s=timeout_s)
    gpu = result.telemetry[0].gpu if result.telemetry else None
    cpu = watch.result()
    if gpu is None and cpu is None:
        return result
    return result.model_copy(update={"telemetry": (build_telemetry(gpu, cpu),)})


def run_isolated(fn: CaseFn, *args: Any, case: str, size: dict[str, Scalar], timeout_s: float = 3600.0) -> Case:
    """Run `fn(*args)` in a spawned process and return its Case, or a Case holding the failure.

    `fn` must be importable at module level (spawn pickles it by reference). A child that dies
    (segfault, OOM killer, `os._exit`) or overruns `timeout_s` is recorded, never raised.
    KeyboardInterrupt (Ctrl-C) kills the child at once and propagates, so the caller can keep
    what finished.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    # Not a daemon: a case may start its own workers (DataLoader num_workers > 0), which daemonic
    # processes cannot. The `finally` below kills the child on every way out instead.
    proc = ctx.Process(target=_child, args=(child, fn, args, case, size, os.getpid()), daemon=False)
    start = time.perf_counter()
    with signals_blocked():  # a Ctrl-C while the case's process starts is this process's alone (_child)
        proc.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            proc.kill()
            return failed_case(case, size, "timeout", f"no result after {timeout_s:g} s", time.perf_counter() - start)
        result: Case = parent.recv()
        # The parent's view: process start, imports and the case itself.
        result = result.model_copy(update={"wall_s": time.perf_counter() - start})
    except EOFError:
        proc.join(timeout=10)
        reason = (f"the case's process died without a result (exit code {proc.exitcode}); a negative code is "
                  "the signal that killed it, often SIGKILL (-9) from the kernel's OOM killer")
        return failed_case(case, size, "crash", reason, time.perf_counter() - start)
    except KeyboardInterrupt:
        proc.kill()
        raise
    finally:
        _reap(proc)
        parent.close()
    return result


def _reap(proc: Any) -> None:
    """Give a child that sent its result a moment to exit, then make sure it is gone."""
    if proc.is_alive():
        proc.join(timeout=10)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


def _child(conn: Any, fn: CaseFn, args: tuple[Any, ...], case: str, size: dict[str, Scalar], parent: int) -> None:
    # The bench decides when a case stops and kills its process then; a terminal's Ctrl-C (sent to the
    # whole process group) would otherwise also land here, mid-start-up, as a traceback.
    ignore_stop_signals()
    unblock_stop_signals()
    die_with_parent(parent)
    start = time.perf_counter()
    with GpuSampler() as sampler:  # NVML telemetry while the case runs; nothing without NVML
        try:
            result = fn(*args)
        except BaseException as exc:
            result = failed_case(case, size, classify_failure(exc), _message(exc), time.perf_counter() - start)
    gpu = sampler.result()
    if gpu is not None:
        result = result.model_copy(update={"telemetry": (Telemetry(gpu=gpu),)})
    try:
        conn.send(result)
    except OSError:  # BrokenPipeError included: the parent is gone or stopped waiting; nobody to tell
        pass
    finally:
        conn.close()


def classify_failure(exc: BaseException) -> FailureKind:
    name = type(exc).__name__
    text = str(exc).lower()
    # CUDA: torch.OutOfMemoryError ("CUDA out of memory"); CPU: "DefaultCPUAllocator: can't allocate memory".
    oom_words = ("out of memory", "can't allocate memory", "not enough memory")
    if name == "OutOfMemoryError" or isinstance(exc, MemoryError) or any(w in text for w in oom_words):
        return "oom"
    if isinstance(exc, NotImplementedError | UnsupportedHere):
        return "unsupported"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "crash"


def _message(exc: BaseException) -> str:
    """The exception line, plus where it was raised for anything that is not a clean refusal."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and classify_failure(exc) in ("crash", "oom"):
        last = frames[-1]
        text += f" (raised at {last.filename}:{last.lineno} in {last.name})"
    return text[:2000]


def failed_case(case: str, size: dict[str, Scalar], kind: FailureKind, message: str, wall_s: float) -> Case:
    return Case(name=case, params=size, failure=Failure(case=case, kind=kind, message=message, size=size),
                wall_s=wall_s)


def time_repeats(step: Callable[[], Any], *, warmup: int, repeats: int, device: str) -> list[float]:
    """Seconds per call of `step`, `repeats` times after `warmup` untimed calls.

    On CUDA each repeat is bracketed by CUDA events on the current stream and synchronized
    (docs/measurement.md §1); on the CPU by perf_counter_ns.
    """
    for _ in range(warmup):
        step()
    if device == "cuda":
        return _cuda_times(step, repeats)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        step()
        samples.append((time.perf_counter_ns() - t0) / 1e9)
    return samples


def time_first_then_repeats(step: Callable[[], Any], *, warmup: int, repeats: int,
                            device: str) -> tuple[float, list[float]]:
    """(seconds of the very first call, timed repeats) — the first call is the startup phase
    `first_step` (lazy allocations, kernel selection, optimizer state creation).

    With warmup ≥ 1 the first call is the first warm-up call; with warmup = 0 it is the first
    timed repeat, so its sample is also the first of the repeats.
    """
    if warmup == 0:
        samples = time_repeats(step, warmup=0, repeats=repeats, device=device)
        return samples[0], samples
    first = time_repeats(step, warmup=0, repeats=1, device=device)[0]
    return first, time_repeats(step, warmup=warmup - 1, repeats=repeats, device=device)


def _cuda_times(step: Callable[[], Any], repeats: int) -> list[float]:
    import torch

    torch.cuda.synchronize()
    event: Any = torch.cuda.Event  # untyped in torch's stubs
    samples = []
    for _ in range(repeats):
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000.0)
    return samples


def timed_metric(name: str, unit: str, samples: list[float], *, higher_is_better: bool = False,
                 note: str = "", extrapolated: bool = False) -> Metric:
    """A metric whose headline value is the mean of its raw samples."""
    summary = summarize(samples)
    return Metric(name=name, unit=unit, value=summary.mean, samples=tuple(samples), summary=summary,
                  higher_is_better=higher_is_better, note=note, extrapolated=extrapolated)


def derived_metric(name: str, unit: str, samples: list[float], *, higher_is_better: bool = True,
                   note: str = "", extrapolated: bool = False) -> Metric:
    """A metric computed per sample from timed samples (e.g. tokens/s = tokens / step_s)."""
    return timed_metric(name, unit, samples, higher_is_better=higher_is_better, note=note,
                        extrapolated=extrapolated)


def resolve_device(requested: str) -> str:
    """'auto' → 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without one is a user error."""
    if requested not in ("auto", "cuda", "cpu"):
        raise SpecError(f"Unknown device {requested!r}.", "gpuscout benchmarks on a CUDA GPU or the CPU.",
                        "Use --device auto, cuda or cpu.")
    try:
        import torch
    except ImportError:
        from gpuscout.errors import MissingDependencyError

        raise MissingDependencyError("Benchmarks need PyTorch.", "torch is not installed.",
                                     "pip install 'gpuscout[bench]'") from None
    has_gpu = bool(torch.cuda.is_available())
    if requested == "cuda" and not has_gpu:
        raise SpecError("--device cuda, but torch sees no CUDA GPU here.",
                        "torch.cuda.is_available() is False (no GPU, no driver, or a CPU-only torch).",
                        "Run on a GPU machine, or use --device cpu / auto.")
    return "cuda" if requested == "auto" and has_gpu else ("cpu" if requested == "auto" else requested)
