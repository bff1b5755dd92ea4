"""`--workers N`: one level sent by N client processes that share one schedule and one clock.

One asyncio loop is one core: past it, the client's own queueing lands in every latency it records
(docs/measurement.md §5). AIPerf and GuideLLM run several worker processes for the same reason. Here:

* every process builds the same absolute schedule (same shape, same seed) and sends its share of
  it: request i goes to process i mod N (open loop), or each process runs its part of the
  concurrency and takes the next request index from one shared counter (closed loop, sessions);
* all of them start the measured phase at one t0 on `time.perf_counter()` (CLOCK_MONOTONIC on Linux:
  one clock for every process of the host), chosen by the parent once every process has warmed
  up, so their records need no alignment;
* the runs are merged exactly: every record is kept with its global index (warm-ups renumbered), CPU
  is summed and kept per process (the saturation gate reads the busiest one), the server's /metrics
  come from process 0, which alone scrapes them.

Processes are started with "spawn" (no inherited threads or event loop). Ctrl-C is passed on to the
processes, and what each had finished is merged and raised as `LoadInterrupted`.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.context import Progress, WorkerPart
from gpuscout.loadgen.record import LoadInterrupted, LoadRun
from gpuscout.loadgen.schedule import CLOSED, LoadShape

START_MARGIN_S = 0.05  # t0 this long after the last process is ready: every one is waiting by then
READY_TIMEOUT_S = 600.0  # a process's start and warm-up
POLL_S = 0.2
RESULT_GRACE_S = 10.0  # after an interrupt, how long the processes get to hand in what finished


def split_shape(shape: LoadShape, share: int, of: int) -> LoadShape:
    """Process `share`'s part: its share of the concurrency (closed loop) and of the warm-up."""
    def part(total: int) -> int:
        return total // of + (share < total % of)

    update: dict[str, Any] = {"warmup_requests": part(shape.warmup_requests)}
    if shape.kind in CLOSED and shape.concurrency is not None:
        update["concurrency"] = max(1, part(shape.concurrency))
    return shape.model_copy(update=update)


def run_load_workers(url: str, model: str, workload: Any, shape: LoadShape, *, workers: int,
                     progress: Progress | None = None, **options: Any) -> LoadRun:
    """`run_load` in `workers` processes (fewer when the concurrency is smaller), merged into one run."""
    n = min(workers, shape.concurrency) if shape.kind in CLOSED and shape.concurrency else workers
    if n <= 1:
        return run_load_sync(url, model, workload, shape, progress=progress, **options)
    mp = multiprocessing.get_context("spawn")
    counter, done, t0 = mp.Value("q", 0), mp.Value("q", 0), mp.Value("d", 0.0)
    go, ready, results = mp.Event(), mp.Queue(), mp.Queue()
    procs = [mp.Process(target=_worker, daemon=True, name=f"gpuscout-load-{w}",
                        args=(w, n, url, model, workload, split_shape(shape, w, n),
                              options if w == 0 else options | {"metrics_url": None}, counter, done, t0, go, ready,
                              results, sum(split_shape(shape, v, n).warmup_requests for v in range(w)),
                              shape.warmup_requests)) for w in range(n)]
    for proc in procs:
        proc.start()
    try:
        _start_together(procs, ready, t0, go)
        runs = _collect(procs, results, n, lambda: progress and progress(int(done.value), _total(shape)))
    except KeyboardInterrupt as stop:
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGINT)
        finished = _collect(procs, results, n, None, grace=RESULT_GRACE_S, partial=True)
        raise LoadInterrupted(merge_runs(finished, shape) if finished else None, getattr(stop, "signum", None)) \
            from stop
    finally:
        for proc in procs:
            proc.join(2)
            if proc.is_alive():
                proc.terminate()
    return merge_runs(runs, shape)


def _total(shape: LoadShape) -> int:
    return shape.requests or 0


def _start_together(procs: list[Any], ready: Any, t0: Synchronized[float], go: Any) -> None:
    """Wait until every process has warmed up, then give them one t0 just ahead."""
    waiting = len(procs)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        try:
            ready.get(timeout=POLL_S)
            waiting -= 1
        except queue.Empty:
            if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                break
    t0.value = time.perf_counter() + START_MARGIN_S
    go.set()


def _collect(procs: list[Any], results: Any, n: int, tick: Callable[[], object] | None, *, grace: float | None = None,
             partial: bool = False) -> list[LoadRun]:
    """Every process's run (as JSON on the queue); a process's error is raised here, as it was raised there."""
    runs: list[LoadRun] = []
    got = 0
    until = None if grace is None else time.monotonic() + grace
    while got < n:
        try:
            share, data, error = results.get(timeout=POLL_S)
        except queue.Empty:
            if tick is not None:
                tick()
            ended = (until is not None and time.monotonic() > until) or not any(p.is_alive() for p in procs)
            if ended and results.empty():
                break
            continue
        got += 1
        if data is not None:
            runs.append(LoadRun.model_validate_json(data))
        if error is not None and not partial:
            raise SpecError(*error) if isinstance(error, tuple) else RuntimeError(f"load worker {share}: {error}")
    if got < n and not partial:
        raise RuntimeError(f"{n - got} load worker process(es) ended without a result")
    return runs


def merge_runs(runs: list[LoadRun], shape: LoadShape) -> LoadRun:
    """One run from the processes' runs of one level: records by global index, CPU per process."""
    measured = sorted((r for run in runs for r in run.records if not r.warmup), key=lambda r: r.index)
    warm = [r for run in runs for r in run.records if r.warmup]
    warm = [r.model_copy(update={"index": -1 - i}) for i, r in enumerate(warm)]
    first = min(runs, key=lambda r: r.started_at)
    lead = next((r for r in runs if r.server), first)
    wall = max((r.end_s if r.end_s is not None else r.sent_s for r in measured), default=0.0)
    notes = list(dict.fromkeys(n for run in runs for n in run.notes))
    return first.model_copy(update={
        "records": (*warm, *measured), "shape": shape, "wall_s": wall,
        "client_cpu_s": sum(r.client_cpu_s for r in runs), "notes": tuple(notes),
        "loop_lag_s": tuple(x for r in runs for x in r.loop_lag_s),
        "loop_lag_busy": tuple(x for r in runs for x in r.loop_lag_busy),
        "loop_cpu_s": tuple(x for r in runs for x in r.loop_cpu_s),
        "loop_wait_s": tuple(x for r in runs for x in r.loop_wait_s),
        "worker_cpu_s": tuple(r.client_cpu_s for r in runs), "server": lead.server, "server_engine": lead.server_engine,
        "stopped": next((r.stopped for r in runs if r.stopped), None)})


def _worker(share: int, of: int, url: str, model: str, workload: Any, shape: LoadShape, options: dict[str, Any],
            counter: Synchronized[int], done: Synchronized[int], t0: Synchronized[float], go: Any, ready: Any,
            results: Any, warmup_first: int, warmup_total: int) -> None:
    """One process: warm up, say so, start at the common t0, hand back its run as JSON."""
    def on_ready() -> float:
        ready.put(share)
        go.wait()
        return float(t0.value)

    def next_index() -> int:
        with counter.get_lock():
            index = int(counter.value)
            counter.value = index + 1
        return index

    def progress(_: int, __: int) -> None:
        with done.get_lock():
            done.value = int(done.value) + 1

    part = WorkerPart(share, of, on_ready, next_index if shape.kind in CLOSED else None, warmup_first=warmup_first,
                      warmup_total=warmup_total)
    try:
        run = run_load_sync(url, model, workload, shape, progress=progress, _part=part, **options)
        results.put((share, run.model_dump_json(), None))
    except LoadInterrupted as stop:
        results.put((share, stop.run.model_dump_json() if stop.run else None, "interrupted"))
    except GpuscoutError as exc:
        results.put((share, None, (exc.what, exc.why, exc.fix)))
    except Exception as exc:  # a bug: the parent raises it with its text
        results.put((share, None, f"{type(exc).__name__}: {exc}"))
