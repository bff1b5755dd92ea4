"""Running a `LoadPlan`: build the workload, measure one level, a sweep or an SLO search, keep it all.

The result (kind "load", one case per measured level) is built by `run.build_result`. Nothing that
was measured is lost:

* after each completed run of a level `checkpoint` receives the result so far (complete=False), so a
  caller that writes it loses at most the run in flight, even to SIGKILL;
* Ctrl-C, SIGTERM or SIGHUP (a KeyboardInterrupt, `interrupts.stop_on_signals`) end the run: when
  the level in flight has no complete run, its finished requests become its case, marked
  interrupted (and so invalid); otherwise its complete runs stand. The result says complete=False
  (`LoadOutcome.interrupted`).

A trace replay waits for the trace's arrival times (up to 7 days ÷ --speedup): before the first request
`on_replay` receives the plan's `ReplaySpan` when one replay takes longer than `schedule.LONG_WAIT_S` of
wall time, so the wait is said up front, and every trace level's case records its planned span in its
params (`replay_span_s`).

With an output path the workload is saved next to it as FILE.workload.json and its sha256 recorded,
so the run can be repeated exactly. It is written with the first result handed out (a checkpoint or
the end), never before: a run that fails before measuring anything leaves an earlier result's
workload file as it was. Pricing is not done here: cost is an opinion computed from the stored result
(docs/design.md §3).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.interrupts import deferred_signals
from gpuscout.loadgen.client import LoadInterrupted, endpoint_url
from gpuscout.loadgen.context import Progress
from gpuscout.loadgen.metrics import mark_interrupted, summarize_load
from gpuscout.loadgen.plan import LoadPlan, shape_at
from gpuscout.loadgen.run import build_result, file_sha256, measure_case
from gpuscout.loadgen.schedule import LONG_WAIT_S, LoadShape, arrivals_of, replay_span_s
from gpuscout.loadgen.search import SearchResult, search_max_load
from gpuscout.loadgen.trace import trace_workload
from gpuscout.loadgen.traffic import conversation_workload, shared_prefix_workload, sharegpt_workload
from gpuscout.loadgen.workload import Workload, dataset_workload, save_workload, synthetic_workload
from gpuscout.results.runs import merge_runs
from gpuscout.results.schema import BenchResult, Case

# A progress display for one level: a context giving the client's progress callback (or None).
ProgressFactory = Callable[[LoadShape], AbstractContextManager[Progress | None]]
Checkpoint = Callable[[BenchResult], None]
SEARCH_STEPS = 6  # bisection steps of an SLO search (each one measured level)
SEARCH_CEILING = 64  # highest level a search tries when the plan names none


@dataclass(frozen=True)
class ReplaySpan:
    """How long the plan's replays take in wall time, said before the first request when one is long."""

    requests: int  # requests one replay sends
    trace_s: float  # the trace's own span over those requests (its last arrival − its first)
    speedup: float  # the speed-up of the longest replay (the plan's slowest level)
    replay_s: float  # that replay's wall time: trace_s / speedup, cut at --duration
    total_s: float  # every replay the plan runs (levels × runs); for a search, the most it can take
    search: bool  # total_s is a bound: a search picks its levels as it goes


@dataclass(frozen=True)
class LoadOutcome:
    """What a load test produced: the result, the search's conclusion when one ran, whether it was cut short."""

    result: BenchResult
    search: SearchResult | None = None
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP ended it; the result holds what finished
    workload: Workload | None = None  # the prompts the levels sent (their lengths feed the simulator's prediction)


def run_plan(plan: LoadPlan, *, output: Path | None = None, progress: ProgressFactory | None = None,
             checkpoint: Checkpoint | None = None,
             on_replay: Callable[[ReplaySpan], None] | None = None) -> LoadOutcome:
    """Measure the plan against its endpoint; the workload is saved beside `output` when given.

    Every level runs `plan.runs` times, each a fresh client; a sweep interleaves them (run 1: every
    level; run 2: every level …) so a slow period of the server hits every level, and the runs of
    a level are merged into one case (`results.runs.merge_runs`). `checkpoint` gets the result so
    far after every completed run of a level. An interrupt is not raised: the outcome says
    `interrupted` and its result holds the finished runs (and requests). `on_replay` gets the plan's
    `ReplaySpan` before the first request when a trace replay takes longer than `LONG_WAIT_S`.
    """
    session = _Session(plan, build_workload(plan), output, progress, checkpoint)
    span = replay_plan(plan, session.workload)
    if on_replay is not None and span is not None and span.replay_s > LONG_WAIT_S:
        on_replay(span)
    try:
        found = _measure(plan, session)
        return LoadOutcome(result=session.result(True), search=found, workload=session.workload)
    except KeyboardInterrupt as stop:
        return session.interrupted(stop)


Key = tuple[float, bool]  # (level, the control run without shared prefixes)
CONTROL = ", no shared prefix"


def replay_plan(plan: LoadPlan, workload: Workload) -> ReplaySpan | None:
    """The wall time of the plan's trace replays (None without a trace): each level's replay is its arrivals
    divided by its speed-up; a search measures its lowest and highest level, then at most `SEARCH_STEPS`
    between them, none slower than the lowest."""
    if plan.trace is None:
        return None

    def span(level: float) -> float:
        shape = shape_at(plan, level, len(workload.prompts))
        return replay_span_s(shape, arrivals_of(shape, workload.prompts))

    if plan.search:
        hi = plan.level if plan.level is not None else SEARCH_CEILING
        levels = [hi / 16, hi]
        total = plan.runs * ((SEARCH_STEPS + 1) * span(hi / 16) + span(hi))
    else:
        levels = list(plan.sweep) or [plan.speedup]
        total = plan.runs * sum(span(level) for level in levels)
    slowest = min(levels)
    shape = shape_at(plan, slowest, len(workload.prompts))
    arrivals = [p.arrival_s or 0.0 for p in workload.prompts[:shape.requests or len(workload.prompts)]]
    return ReplaySpan(requests=len(arrivals), trace_s=max(arrivals) - min(arrivals), speedup=slowest,
                      replay_s=span(slowest), total_s=total, search=plan.search)


def level_of(shape: LoadShape) -> float:
    """The level a shape measures: users or concurrency, rate, or a trace's speed-up."""
    if shape.kind == "trace":
        return shape.speedup
    return float(shape.concurrency if shape.concurrency is not None else shape.rate_rps or 0)


class _Session:
    """The runs measured so far, by level, and the result they make."""

    def __init__(self, plan: LoadPlan, workload: Workload, output: Path | None, progress: ProgressFactory | None,
                 checkpoint: Checkpoint | None) -> None:
        self.plan, self.workload, self.output = plan, workload, output
        self.control = build_workload(plan, unshared=True) if plan.prefix_control else None
        self.progress, self.checkpoint = progress, checkpoint
        self.url = endpoint_url(plan.url, plan.endpoint)
        self.runs: dict[Key, list[Case]] = {}  # level → its runs, in the order first measured
        self.shapes: dict[Key, LoadShape] = {}
        self.in_flight: tuple[LoadShape, bool] | None = None
        self.saved: list[str | None] = []  # the workload file's sha256, once written

    def cases(self) -> list[Case]:
        return [merge_runs(runs) for runs in self.runs.values()]

    def result(self, complete: bool, notes: tuple[str, ...] = ()) -> BenchResult:
        cases = self.cases()
        if cases and not self.saved:
            self.saved.append(_save_workload(self.workload, self.output))
        plan = self.plan
        return build_result(url=self.url, model=plan.model, workload=self.workload,
                            workload_hash=self.saved[0] if self.saved else None, cases=cases,
                            shapes=[self.shapes[key] for key in self.runs] or [self.first_shape()],
                            endpoint=plan.endpoint, stream=plan.stream, notes=notes, complete=complete,
                            region=plan.region, billing=plan.billing, extra_settings=traffic_settings(plan),
                            server_gpu=plan.server_gpu, server_gpus=plan.server_gpus)

    def shape(self, level: float) -> LoadShape:
        return shape_at(self.plan, level, len(self.workload.prompts))

    def first_shape(self) -> LoadShape:
        """The shape of the plan's first level (for a result in which no level finished)."""
        plan = self.plan
        return self.shape(plan.sweep[0] if plan.sweep else plan.level if plan.level is not None else 1)

    def run_once(self, level: float) -> Case:
        """One run of one level (and of its control, with --prefix-control), kept and checkpointed."""
        case = self._run(level, False)
        if self.control is not None:
            self._run(level, True)
        return case

    def _run(self, level: float, control: bool) -> Case:
        key = (level, control)
        shape = self.shapes.setdefault(key, self.shape(level))
        self.in_flight = (shape, control)
        plan = self.plan
        measured: list[Case] = []
        try:
            with self.progress(shape) if self.progress else nullcontext() as update:
                measured.append(measure_case(
                    plan.url, plan.model, self.control if control and self.control else self.workload, shape,
                    endpoint=plan.endpoint, stream=plan.stream, api_key_env=plan.api_key_env,
                    timeout_s=plan.request_timeout_s, slo=plan.slo, percentile=plan.percentile, progress=update,
                    extra_body=_extra_body(plan), metrics_url=plan.metrics_url, workers=plan.workers)[1])
        finally:
            if measured:  # kept even when a stop signal came while the progress display closed
                with deferred_signals():
                    self._keep(key, measured[0], control)
        case = measured[0]
        if self.checkpoint is not None:
            done = sum(len(r) for r in self.runs.values())
            self.checkpoint(self.result(False, (f"partial: {done} run(s) of {len(self.runs)} level(s) measured so "
                                                "far; the run has not finished",)))
        return case

    def _keep(self, key: Key, case: Case, control: bool) -> None:
        case = self.spanned(case, self.shapes[key])
        if control:
            case = case.model_copy(update={"name": case.name + CONTROL, "params": case.params | {"prefix": "unshared"}})
        self.in_flight = None
        self.runs.setdefault(key, []).append(case)

    def spanned(self, case: Case, shape: LoadShape) -> Case:
        """A trace level's case with the wall time its replay was planned to take (its last send's offset)."""
        if shape.kind != "trace":
            return case
        span = replay_span_s(shape, arrivals_of(shape, self.workload.prompts))
        return case.model_copy(update={"params": case.params | {"replay_span_s": span}})

    def run_level(self, shape: LoadShape) -> Case:
        """Every run of one level, back to back (an SLO search needs the level's verdict at once)."""
        level = level_of(shape)
        for _ in range(self.plan.runs):
            self.run_once(level)
        return merge_runs(self.runs[(level, False)])

    def interrupted(self, stop: KeyboardInterrupt) -> LoadOutcome:
        how = signal.Signals(getattr(stop, "signum", None) or signal.SIGINT).name
        run = stop.run if isinstance(stop, LoadInterrupted) else None
        levels = len(self.runs)
        kept = ""
        if run is not None and self.in_flight is not None:
            shape, control = self.in_flight
            key = (level_of(shape), control)
            finished = sum(1 for r in run.records if not r.warmup)
            if key not in self.runs:  # the level's only data: keep it, marked (and so invalid)
                case = summarize_load(run, slo=self.plan.slo, percentile_needed=self.plan.percentile)
                if control:
                    case = case.model_copy(update={"name": case.name + CONTROL})
                case = mark_interrupted(self.spanned(case, shape), f"interrupted by {how} with {finished} request(s) "
                                        "finished")
                self.runs[key] = [case]
                kept = ", the level in flight kept with its finished requests"
            else:  # its complete runs stand; the cut-short one would bias them
                kept = f", the run in flight dropped ({finished} request(s) finished; the level's earlier runs stand)"
        note = f"interrupted by {how}: {levels} level(s) with at least one complete run{kept}"
        return LoadOutcome(result=self.result(False, (note,)), interrupted=True)


def _measure(plan: LoadPlan, session: _Session) -> SearchResult | None:
    def make_shape(level: float) -> LoadShape:
        return session.shape(level)

    if plan.sweep:
        for _ in range(plan.runs):  # interleaved: run 1 of every level, then run 2 …
            for level in plan.sweep:
                session.run_once(level)
        return None
    if plan.search:
        assert plan.slo is not None  # LoadPlan refuses a search without targets
        hi = plan.level if plan.level is not None else SEARCH_CEILING
        lo = 1 if plan.closed_loop else hi / 16  # a trace's speed-up searches like a rate
        return search_max_load(session.run_level, make_shape, slo=plan.slo, lo=lo, hi=hi, steps=SEARCH_STEPS,
                               latency_from="intended")
    session.run_level(make_shape(plan.level if plan.level is not None else 1))
    return None


def build_workload(plan: LoadPlan, *, unshared: bool = False) -> Workload:
    """The prompts of the plan: a trace, a ShareGPT file, the user's dataset, conversations, shared-prefix or
    plain synthetic prompts; `unshared`: the shared-prefix prompts' control, every prefix its own."""
    if plan.trace is not None:
        return trace_workload(plan.trace, tokenizer_path=plan.tokenizer, seed=plan.seed, limit=plan.requests)
    if plan.sharegpt is not None:
        return sharegpt_workload(plan.sharegpt, output_tokens=plan.output_tokens, tokenizer_path=plan.tokenizer,
                                 seed=plan.seed, multi_turn=plan.multi_turn, at_most=plan.prompts_sampled)
    if plan.dataset is not None:
        return dataset_workload(plan.dataset, n=None, at_most=plan.prompts_sampled, output_tokens=plan.output_tokens,
                                tokenizer_path=plan.tokenizer, seed=plan.seed)
    if plan.turns is not None:
        users = max((int(x) for x in plan.sweep), default=plan.concurrency or 1)
        conversations = max(users, -(-plan.prompts_needed // plan.turns))
        return conversation_workload(conversations, turns=plan.turns, prompt_tokens=plan.prompt_tokens,
                                     output_tokens=plan.output_tokens, tokenizer_path=plan.tokenizer, seed=plan.seed)
    if plan.prefix_share:
        return shared_prefix_workload(plan.prompts_needed, prompt_tokens=plan.prompt_tokens,
                                      output_tokens=plan.output_tokens, prefix_share=plan.prefix_share,
                                      groups=plan.prefix_groups, tokenizer_path=plan.tokenizer, seed=plan.seed,
                                      unshared=unshared)
    return synthetic_workload(plan.prompts_needed, prompt_tokens=plan.prompt_tokens, output_tokens=plan.output_tokens,
                              distribution=plan.prompt_dist, spread=plan.prompt_spread,
                              tokenizer_path=plan.tokenizer, seed=plan.seed)


def _extra_body(plan: LoadPlan) -> dict[str, Any]:
    """Fields added to every request: an image size; llama.cpp's cache_prompt where prefixes are shared."""
    extra: dict[str, Any] = {}
    if plan.endpoint == "images" and plan.image_size:
        extra["size"] = plan.image_size
    return extra


def traffic_settings(plan: LoadPlan) -> dict[str, str | int | float | bool | None]:
    """The fixed variables of the traffic beyond the shape (two results compare only when these match)."""
    return {"prefix_share": plan.prefix_share or None, "prefix_groups": plan.prefix_groups if plan.prefix_share
            else None, "turns": plan.turns, "think_s": plan.think_s or None,
            "trace": str(plan.trace) if plan.trace else None, "speedup": plan.speedup if plan.trace else None,
            "sharegpt": str(plan.sharegpt) if plan.sharegpt else None, "image_size": plan.image_size}


def workload_path(output: Path) -> Path:
    """Where the workload of a result saved at `output` goes: FILE.workload.json beside it."""
    return output.with_name(output.stem + ".workload.json")


def _save_workload(workload: Workload, output: Path | None) -> str | None:
    if output is None:
        return None
    path = workload_path(output)
    save_workload(workload, path)
    return file_sha256(path)
