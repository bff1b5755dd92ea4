"""Running a `LoadPlan`: build the workload, measure one level, a sweep or an SLO search, keep it all.

The result (kind "load", one case per measured level) is built by `run.build_result`. Nothing that
was measured is lost:

* after each completed level `checkpoint` receives the result so far (complete=False), so a caller
  that writes it loses at most the level in flight, even to SIGKILL;
* Ctrl-C, SIGTERM or SIGHUP (a KeyboardInterrupt, `interrupts.stop_on_signals`) end the run: the
  requests of the level in flight that had finished become one more case, marked interrupted (and
  so invalid), and the result says complete=False (`LoadOutcome.interrupted`).

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

from gpuscout.loadgen.client import LoadInterrupted, Progress, endpoint_url
from gpuscout.loadgen.metrics import mark_interrupted, summarize_load
from gpuscout.loadgen.plan import LoadPlan, shape_at
from gpuscout.loadgen.run import build_result, file_sha256, measure_case
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.search import SearchResult, search_max_load, sweep
from gpuscout.loadgen.workload import Workload, dataset_workload, save_workload, synthetic_workload
from gpuscout.results.schema import BenchResult, Case

# A progress display for one level: a context giving the client's progress callback (or None).
ProgressFactory = Callable[[LoadShape], AbstractContextManager[Progress | None]]
Checkpoint = Callable[[BenchResult], None]
SEARCH_STEPS = 6  # bisection steps of an SLO search (each one measured level)
SEARCH_CEILING = 64  # highest level a search tries when the plan names none


@dataclass(frozen=True)
class LoadOutcome:
    """What a load test produced: the result, the search's conclusion when one ran, whether it was cut short."""

    result: BenchResult
    search: SearchResult | None = None
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP ended it; the result holds what finished


def run_plan(plan: LoadPlan, *, output: Path | None = None, progress: ProgressFactory | None = None,
             checkpoint: Checkpoint | None = None) -> LoadOutcome:
    """Measure the plan against its endpoint; the workload is saved beside `output` when given.

    `checkpoint` gets the result so far after every completed level. An interrupt is not raised: the
    outcome says `interrupted` and its result holds the finished levels and requests.
    """
    workload = build_workload(plan)
    url = endpoint_url(plan.url, plan.endpoint)
    shapes: list[LoadShape] = []
    cases: list[Case] = []
    saved: list[str | None] = []  # the workload file's sha256, once written

    def result(complete: bool, notes: tuple[str, ...] = ()) -> BenchResult:
        if cases and not saved:
            saved.append(_save_workload(workload, output))
        return build_result(url=url, model=plan.model, workload=workload, workload_hash=saved[0] if saved else None,
                            cases=cases, shapes=shapes[:len(cases)] or shapes[:1] or [_first_shape(plan)],
                            endpoint=plan.endpoint, stream=plan.stream, notes=notes, complete=complete)

    def run_one(shape: LoadShape) -> Case:
        shapes.append(shape)
        with progress(shape) if progress else nullcontext() as update:
            case = measure_case(plan.url, plan.model, workload, shape, endpoint=plan.endpoint, stream=plan.stream,
                                api_key_env=plan.api_key_env, timeout_s=plan.request_timeout_s, slo=plan.slo,
                                percentile=plan.percentile, progress=update)[1]
        cases.append(case)
        if checkpoint is not None:
            checkpoint(result(False, (f"partial: {len(cases)} level(s) measured so far; the run has not "
                                      "finished",)))
        return case

    try:
        found = _measure(plan, run_one)
    except KeyboardInterrupt as stop:
        complete_levels = len(cases)
        how = signal.Signals(getattr(stop, "signum", None) or signal.SIGINT).name
        run = stop.run if isinstance(stop, LoadInterrupted) else None
        if run is not None and len(shapes) > len(cases):
            case = summarize_load(run, slo=plan.slo, percentile_needed=plan.percentile)
            finished = sum(1 for r in run.records if not r.warmup)
            cases.append(mark_interrupted(case, f"interrupted by {how} with {finished} request(s) finished"))
        note = (f"interrupted by {how}: {complete_levels} level(s) complete"
                + (", the level in flight kept with its finished requests" if len(cases) > complete_levels else ""))
        return LoadOutcome(result=result(False, (note,)), interrupted=True)
    return LoadOutcome(result=result(True), search=found)


def _measure(plan: LoadPlan, run_one: Callable[[LoadShape], Case]) -> SearchResult | None:
    def make_shape(level: float) -> LoadShape:
        return shape_at(plan, level)

    if plan.sweep:
        sweep(list(plan.sweep), make_shape, run_one)
        return None
    if plan.search:
        assert plan.slo is not None  # LoadPlan refuses a search without targets
        hi = plan.level if plan.level is not None else SEARCH_CEILING
        lo = 1 if plan.closed_loop else hi / 16
        return search_max_load(run_one, make_shape, slo=plan.slo, lo=lo, hi=hi, steps=SEARCH_STEPS,
                               latency_from="intended")
    run_one(make_shape(plan.level if plan.level is not None else 1))
    return None


def _first_shape(plan: LoadPlan) -> LoadShape:
    """The shape of the plan's first level (for a result in which no level finished)."""
    return shape_at(plan, plan.sweep[0] if plan.sweep else plan.level if plan.level is not None else 1)


def build_workload(plan: LoadPlan) -> Workload:
    """The prompts of the plan: the user's dataset, or synthetic prompts of exact token lengths."""
    if plan.dataset is not None:
        return dataset_workload(plan.dataset, n=None, output_tokens=plan.output_tokens,
                                tokenizer_path=plan.tokenizer, seed=plan.seed)
    return synthetic_workload(plan.prompts_needed, prompt_tokens=plan.prompt_tokens, output_tokens=plan.output_tokens,
                              distribution=plan.prompt_dist, spread=plan.prompt_spread,
                              tokenizer_path=plan.tokenizer, seed=plan.seed)


def workload_path(output: Path) -> Path:
    """Where the workload of a result saved at `output` goes: FILE.workload.json beside it."""
    return output.with_name(output.stem + ".workload.json")


def _save_workload(workload: Workload, output: Path | None) -> str | None:
    if output is None:
        return None
    path = workload_path(output)
    save_workload(workload, path)
    return file_sha256(path)
