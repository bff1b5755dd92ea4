"""Running a `LoadPlan`: build the workload, measure one level, a sweep or an SLO search, keep it all.

The result (kind "load", one case per measured level) is built by `run.build_result`. With an
output path the workload is saved next to it as FILE.workload.json and its sha256 recorded, so the
run can be repeated exactly. Pricing is not done here: cost is an opinion computed from the stored
result (docs/design.md §3).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from gpuscout.loadgen.client import Progress, endpoint_url
from gpuscout.loadgen.plan import LoadPlan, shape_at
from gpuscout.loadgen.run import build_result, file_sha256, measure_case
from gpuscout.loadgen.schedule import LoadShape
from gpuscout.loadgen.search import SearchResult, search_max_load, sweep
from gpuscout.loadgen.workload import Workload, dataset_workload, save_workload, synthetic_workload
from gpuscout.results.schema import BenchResult, Case

# A progress display for one level: a context giving the client's progress callback (or None).
ProgressFactory = Callable[[LoadShape], AbstractContextManager[Progress | None]]
SEARCH_STEPS = 6  # bisection steps of an SLO search (each one measured level)
SEARCH_CEILING = 64  # highest level a search tries when the plan names none


@dataclass(frozen=True)
class LoadOutcome:
    """What a load test produced: the result, and the search's conclusion when one ran."""

    result: BenchResult
    search: SearchResult | None = None


def run_plan(plan: LoadPlan, *, output: Path | None = None,
             progress: ProgressFactory | None = None) -> LoadOutcome:
    """Measure the plan against its endpoint; the workload is saved beside `output` when given."""
    workload = build_workload(plan)
    workload_hash = _save_workload(workload, output)
    shapes: list[LoadShape] = []

    def run_one(shape: LoadShape) -> Case:
        shapes.append(shape)
        with progress(shape) if progress else nullcontext() as update:
            return measure_case(plan.url, plan.model, workload, shape, endpoint=plan.endpoint, stream=plan.stream,
                                api_key_env=plan.api_key_env, timeout_s=plan.timeout_s, slo=plan.slo,
                                percentile=plan.percentile, progress=update)[1]

    cases, found = _measure(plan, run_one)
    result = build_result(url=endpoint_url(plan.url, plan.endpoint), model=plan.model, workload=workload,
                          workload_hash=workload_hash, cases=cases, shapes=shapes, endpoint=plan.endpoint,
                          stream=plan.stream)
    return LoadOutcome(result=result, search=found)


def _measure(plan: LoadPlan, run_one: Callable[[LoadShape], Case]) -> tuple[list[Case], SearchResult | None]:
    def make_shape(level: float) -> LoadShape:
        return shape_at(plan, level)

    if plan.sweep:
        return sweep(list(plan.sweep), make_shape, run_one), None
    if plan.search:
        assert plan.slo is not None  # LoadPlan refuses a search without targets
        hi = plan.level if plan.level is not None else SEARCH_CEILING
        lo = 1 if plan.closed_loop else hi / 16
        found = search_max_load(run_one, make_shape, slo=plan.slo, lo=lo, hi=hi, steps=SEARCH_STEPS,
                                latency_from="intended")
        return list(found.cases), found
    return [run_one(make_shape(plan.level if plan.level is not None else 1))], None


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
