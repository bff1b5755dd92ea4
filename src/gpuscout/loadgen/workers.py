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

Processes are started with "spawn" (no inherited threads or event loop). A stop signal (Ctrl-C,
SIGTERM, SIGHUP) is passed on to the processes (as SIGTERM), and what each had finished is merged and
raised as `LoadInterrupted`; a process that a signal reached first stops the level the same way. The processes
die with the parent, SIGKILL included (`interrupts.die_with_parent`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.interrupts import (
    begin_stop,
    die_with_parent,
    hold_stop_signals,
    ignore_stop_signals,
    signals_blocked,
    unblock_stop_signals,
)
from gpuscout.loadgen.client import run_load_sync
from gpuscout.loadgen.context import Progress, WorkerPart
from gpuscout.loadgen.record import LoadInterrupted, LoadRun
from gpuscout.loadgen.schedule import (
    CLOSED,
    LoadShape,
    arrivals_of,
    long_gap_end,
    planned_requests,
    send_offsets,
)

START_MARGIN_S = 0.05  # t0 this long after the last process is ready: every one is waiting by then
READY_TIMEOUT_S = 600.0  # a process's start and warm-up
POLL_S = 0.2
RESULT_GRACE_S = 10.0  # after an interrupt, how long the processes get to hand in what finished
STOP_WORKER = signal.SIGTERM  # how the parent stops its processes: taken even where SIGINT is ignored (nohup, &)


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
    with signals_blocked():  # multiprocessing's resource tracker, if the shared values start it, too
        counter, done, t0 = mp.Value("q", 0), mp.Value("q", 0), mp.Value("d", 0.0)
    go, ready, results = mp.Event(), mp.Queue(), mp.Queue()
    procs = [mp.Process(target=_worker, daemon=True, name=f"gpuscout-load-{w}",
                        args=(w, n, url, model, workload, split_shape(shape, w, n),
                              options if w == 0 else options | {"metrics_url": None}, counter, done, t0, go, ready,
                              results, sum(split_shape(shape, v, n).warmup_requests for v in range(w)),
                              shape.warmup_requests, os.getpid())) for w in range(n)]
    handed = _HandedIn()
    try:
        with signals_blocked():  # each process takes Ctrl-C once its handlers are set (_worker)
            for proc in procs:
                proc.start()
        _start_together(procs, ready, results, t0, go)
        offsets = send_offsets(shape, planned_requests(shape), arrivals_of(shape, workload.prompts))
        _collect(procs, results, n, handed, lambda: _show(progress, int(done.value), shape, offsets, t0.value))
    except KeyboardInterrupt as stop:
        signum = getattr(stop, "signum", None)
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, STOP_WORKER)
        _collect(procs, results, n, handed, None, grace=RESULT_GRACE_S, partial=True)
        raise LoadInterrupted(merge_runs(handed.runs, shape) if handed.runs else None, signum) from stop
    finally:
        for proc in procs:
            if proc.pid is None:  # never started
                continue
            proc.join(2)
            if proc.is_alive():  # SIGKILL: a worker that has handed in ignores the stop signals
                proc.kill()
                proc.join(2)
    return merge_runs(handed.runs, shape)


@dataclass
class _HandedIn:
    """What the processes have handed in so far: their runs, and how many have answered."""

    runs: list[LoadRun] = field(default_factory=list)
    answered: int = 0


class _WorkerStopped(KeyboardInterrupt):
    """A process handed in an interrupted run (a stop signal reached it first): the level stops, as if
    this process had been signalled."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _total(shape: LoadShape) -> int:
    return shape.requests or 0


def _show(progress: Progress | None, finished: int, shape: LoadShape, offsets: list[float] | None,
          t0: float) -> None:
    """The requests the processes finished, and a wait longer than `LONG_WAIT_S` in the schedule they share
    (each process is idle then: the next send, whichever process it falls to, is that far away)."""
    if progress is None:
        return
    now = time.perf_counter()
    end = long_gap_end(offsets, now - t0, shape.duration_s) if offsets and t0 else None
    if end is None:
        progress(finished, _total(shape))
    else:
        progress(finished, _total(shape), waiting_until=time.time() + t0 + end - now)


def _start_together(procs: list[Any], ready: Any, results: Any, t0: Synchronized[float], go: Any) -> None:
    """Wait until every process has warmed up, then give them one t0 just ahead. A process that ended
    or answered already (an error, an interrupt) does not hold the others: they start, and `_collect`
    hears what happened."""
    waiting = len(procs)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        try:
            ready.get(timeout=POLL_S)
            waiting -= 1
        except queue.Empty:
            if time.monotonic() > deadline or not all(p.is_alive() for p in procs) or not results.empty():
                break
    t0.value = time.perf_counter() + START_MARGIN_S
    go.set()


def _collect(procs: list[Any], results: Any, n: int, handed: _HandedIn, tick: Callable[[], object] | None, *,
             grace: float | None = None, partial: bool = False) -> None:
    """Every process's run (as JSON on the queue) into `handed`; a process's error is raised here, as it
    was raised there. A process stopped by a signal stops the level (`_WorkerStopped`), its run kept."""
    until = None if grace is None else time.monotonic() + grace
    while handed.answered < n:
        try:
            share, data, error = results.get(timeout=POLL_S)
        except queue.Empty:
            if tick is not None:
                tick()
            ended = (until is not None and time.monotonic() > until) or not any(p.is_alive() for p in procs)
            if ended and results.empty():
                break
            continue
        handed.answered += 1
        if data is not None:
            handed.runs.append(LoadRun.model_validate_json(data))
        if partial:
            continue
        if isinstance(error, int):  # the signal that stopped that process
            begin_stop(error)  # this process is stopping now: a signal that reaches it later is a repeat
            raise _WorkerStopped(error)
        if error is not None:
            raise SpecError(*error) if isinstance(error, tuple) else RuntimeError(f"load worker {share}: {error}")
    if handed.answered < n and not partial:
        raise RuntimeError(f"{n - handed.answered} load worker process(es) ended without a result")


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
            results: Any, warmup_first: int, warmup_total: int, parent: int) -> None:
    """One process: warm up, say so, start at the common t0, hand back its run as JSON.

    The first stop signal (the terminal's Ctrl-C reaches every process of the group; the parent sends
    STOP_WORKER when it stops) ends the run with what finished; later ones are ignored until the run is
    handed in.
    The process dies with the parent, even on SIGKILL (`interrupts.die_with_parent`).
    """
    hold_stop_signals(also=(STOP_WORKER,))  # the parent stops it with STOP_WORKER, even under nohup
    run: LoadRun | None = None
    try:
        unblock_stop_signals()  # started with them blocked: one that came meanwhile lands here
        die_with_parent(parent)
        run = _run(share, of, url, model, workload, shape, options, counter, done, t0, go, ready, warmup_first,
                   warmup_total)
        ignore_stop_signals()  # finished: nothing left to stop, the run is handed in whatever comes
        message: tuple[int, str | None, Any] = (share, run.model_dump_json(), None)
    except LoadInterrupted as stop:
        message = (share, stop.run.model_dump_json() if stop.run else None, stop.signum or signal.SIGINT)
    except KeyboardInterrupt as stop:  # before the run began, or just after it ended (then it is whole)
        message = (share, run.model_dump_json(), None) if run is not None else \
            (share, None, getattr(stop, "signum", None) or signal.SIGINT)
    except GpuscoutError as exc:
        message = (share, None, (exc.what, exc.why, exc.fix))
    except Exception as exc:  # a bug: the parent raises it with its text
        message = (share, None, f"{type(exc).__name__}: {exc}")
    ignore_stop_signals()
    results.put(message)
    results.close()
    results.join_thread()  # the run is in the pipe before this process may end


def _run(share: int, of: int, url: str, model: str, workload: Any, shape: LoadShape, options: dict[str, Any],
         counter: Synchronized[int], done: Synchronized[int], t0: Synchronized[float], go: Any, ready: Any,
         warmup_first: int, warmup_total: int) -> LoadRun:
    def on_ready() -> float:
        ready.put(share)
        go.wait()
        return float(t0.value)

    def next_index() -> int:
        with counter.get_lock():
            index = int(counter.value)
            counter.value = index + 1
        return index

    counted = [0]  # this process's finished requests already added to the shared count

    def progress(finished: int, _: int, waiting_until: float | None = None) -> None:
        del waiting_until  # the parent shows the waits, from the schedule every process shares
        with done.get_lock():
            done.value = int(done.value) + finished - counted[0]
        counted[0] = finished

    part = WorkerPart(share, of, on_ready, next_index if shape.kind in CLOSED else None, warmup_first=warmup_first,
                      warmup_total=warmup_total)
    return run_load_sync(url, model, workload, shape, progress=progress, _part=part, **options)
