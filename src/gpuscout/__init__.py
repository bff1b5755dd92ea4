"""gpuscout: which rented GPU finishes your job for the least total money.

The same steps as the command line, as Python (docs/api.md):

    from gpuscout import estimate, pick, bench, compare, load, make_plan

    report = estimate("llama3-8b-qlora", gpus=["rtx-4090"])
    ranked = pick("llama3-8b-qlora")

Names are imported on first use, so `import gpuscout` (and the CLI's start-up) stays cheap.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Every public name, once, under the module that defines it: `__all__` and the lazy imports both
# come from here. The api's names are `gpuscout.api.__all__` (tests/test_api.py holds them equal);
# the rest are the types and option builders its calls take and return.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "gpuscout.api": (
        "BenchReport", "CalibrateReport", "CompareReport", "CostReport", "DoctorReport", "EstimateReport",
        "InputError", "Job", "JobRef", "LoadReport", "ModelPresets", "ModelReport", "OffersList", "PickReport",
        "PullReport", "ReportInputs", "ResultsList", "StoredRunReport", "bench", "calibrate", "compare", "cost",
        "describe_model", "doctor", "estimate", "examples_dir", "export_result", "gpus", "list_offers",
        "list_results", "load", "load_job", "model_presets", "pick", "plan_trial", "probe", "pull_offers",
        "record_run", "report_inputs", "run_trial", "show_result", "store_path", "where_rented",
    ),
    "gpuscout.loadgen.plan": ("LoadPlan", "make_plan"),
    "gpuscout.loadgen.probe": ("ProbeResult",),
    "gpuscout.measure.harness": ("BenchSettings", "bench_settings"),
    "gpuscout.workload.job": ("FinetuneJob", "ImageJob", "InferenceJob", "VideoJob"),
    "gpuscout.cost.billing": ("CostOptions",),
    "gpuscout.results.schema": ("BenchResult",),
    "gpuscout.results.database": ("StoredRun",),
    "gpuscout.errors": ("GpuscoutError",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:  # for type checkers, which cannot read the table; tests/test_api.py holds the two equal
    from gpuscout.api import *  # noqa: F403
    from gpuscout.cost.billing import CostOptions as CostOptions
    from gpuscout.errors import GpuscoutError as GpuscoutError
    from gpuscout.loadgen.plan import LoadPlan as LoadPlan
    from gpuscout.loadgen.plan import make_plan as make_plan
    from gpuscout.loadgen.probe import ProbeResult as ProbeResult
    from gpuscout.measure.harness import BenchSettings as BenchSettings
    from gpuscout.measure.harness import bench_settings as bench_settings
    from gpuscout.results.database import StoredRun as StoredRun
    from gpuscout.results.schema import BenchResult as BenchResult
    from gpuscout.workload.job import FinetuneJob as FinetuneJob
    from gpuscout.workload.job import ImageJob as ImageJob
    from gpuscout.workload.job import InferenceJob as InferenceJob
    from gpuscout.workload.job import VideoJob as VideoJob


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuscout' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


class _Package(ModuleType):
    """`gpuscout` itself. `cost` and `doctor` are api functions and also subpackages: on a
    subpackage's first import, Python sets it as an attribute of its parent, which would hide the
    function from a later `from gpuscout import cost`. The public name is the function; the
    subpackages stay reachable through `sys.modules` (`from gpuscout.cost import pick`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and name in _MODULE_OF:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
