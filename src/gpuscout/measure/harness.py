"""The benchmark harness: each case in its own process, warm-up then timed repeats, failures kept.

DESIGN.md §4: one case's memory and failures must not leak into the next, so every case runs in
a freshly spawned process (`run_isolated`). Inside it, `time_repeats` warms up, synchronizes and
times each repeat with CUDA events on a GPU or `perf_counter_ns` on the CPU, keeping every raw
sample. An out-of-memory error or a crash becomes a `Failure` naming the size that failed, and
the caller goes on with the next case.

torch is imported inside functions only.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpuscout.results.schema import Case, Failure, FailureKind, Metric, Scalar
from gpuscout.stats import summarize

CaseFn = Callable[..., Case]


class BenchSettings(BaseModel):
    """How to measure: the same for every case of a run, and recorded in the result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str = "auto"  # auto | cuda | cpu (resolved by `resolve_device` before cases run)
    warmup: int = Field(2, ge=0)
    repeats: int = Field(5, ge=1)
    seed: int = 0
    layers: int | None = Field(None, ge=1)  # depth slice: build only K layers and extrapolate
    dataset: str | None = None  # a JSONL/text file of the user's data; None = synthetic seeded tokens
    created_at: float | None = None  # epoch seconds the machine was created (startup "since creation")
    timeout_s: float = Field(1800.0, gt=0)  # per case


@dataclass(frozen=True)
class PlannedCase:
    """One case to run in its own process: `fn(*args)` returns its `Case`."""

    name: str
    fn: CaseFn
    args: tuple[Any, ...]
    size: dict[str, Scalar] = field(default_factory=dict)  # what to record if it fails


def run_isolated(fn: CaseFn, *args: Any, case: str, size: dict[str, Scalar], timeout_s: float = 3600.0) -> Case:
    """Run `fn(*args)` in a spawned process and return its Case, or a Case holding the failure.

    `fn` must be importable at module level (spawn pickles it by reference). A child that dies
    (segfault, OOM killer) or overruns `timeout_s` is recorded, never raised.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, case, size), daemon=True)
    start = time.perf_counter()
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            proc.kill()
            return failed_case(case, size, "timeout", f"no result after {timeout_s:g} s", time.perf_counter() - start)
        result: Case = parent.recv()
    except EOFError:
        proc.join()
        reason = f"the case's process died (exit code {proc.exitcode}); often the kernel's OOM killer"
        return failed_case(case, size, "crash", reason, time.perf_counter() - start)
    finally:
        if proc.is_alive():
            proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    return result


def _child(conn: Any, fn: CaseFn, args: tuple[Any, ...], case: str, size: dict[str, Scalar]) -> None:
    start = time.perf_counter()
    try:
        result = fn(*args)
    except BaseException as exc:
        result = failed_case(case, size, classify_failure(exc), _message(exc), time.perf_counter() - start)
    conn.send(result)
    conn.close()


def classify_failure(exc: BaseException) -> FailureKind:
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfMemoryError" or "out of memory" in text or isinstance(exc, MemoryError):
        return "oom"
    if isinstance(exc, NotImplementedError) or name == "UnsupportedHere":
        return "unsupported"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "crash"


def _message(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[:2000]


def failed_case(case: str, size: dict[str, Scalar], kind: FailureKind, message: str, wall_s: float) -> Case:
    return Case(name=case, params=size, failure=Failure(case=case, kind=kind, message=message, size=size),
                wall_s=wall_s)


class UnsupportedHere(Exception):
    """This case cannot run on this machine (e.g. QLoRA on a CPU); recorded as `unsupported`."""


def time_repeats(step: Callable[[], Any], *, warmup: int, repeats: int, device: str) -> list[float]:
    """Seconds per call of `step`, `repeats` times after `warmup` untimed calls.

    On CUDA each repeat is bracketed by CUDA events on the current stream and synchronized
    (reference/benchmarks.md §2.10); on the CPU by perf_counter_ns.
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
                 note: str = "") -> Metric:
    """A metric whose headline value is the mean of its raw samples."""
    summary = summarize(samples)
    return Metric(name=name, unit=unit, value=summary.mean, samples=tuple(samples), summary=summary,
                  higher_is_better=higher_is_better, note=note)


def derived_metric(name: str, unit: str, samples: list[float], *, higher_is_better: bool = True,
                   note: str = "") -> Metric:
    """A metric computed per sample from timed samples (e.g. tokens/s = tokens / step_s)."""
    return timed_metric(name, unit, samples, higher_is_better=higher_is_better, note=note)


def resolve_device(requested: str) -> str:
    """'auto' → 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without one is a user error."""
    from gpuscout.errors import SpecError

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
