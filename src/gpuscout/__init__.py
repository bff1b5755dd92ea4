"""gpuscout: which rented GPU finishes your job for the least total money.

The same steps as the command line, as Python (docs/api.md):

    from gpuscout import estimate, pick, bench, compare, load, make_plan

    report = estimate("llama3-8b-qlora", gpus=["rtx-4090"])
    ranked = pick("llama3-8b-qlora")

Names are imported on first use, so `import gpuscout` (and the CLI's start-up) stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name → the module that defines it.
_EXPORTS = {
    **dict.fromkeys(("estimate", "pick", "cost", "bench", "compare", "load", "probe", "describe_model", "gpus",
                     "load_job", "doctor", "EstimateReport", "PickReport", "CostReport", "BenchReport", "CompareReport",
                     "LoadReport", "ModelReport", "DoctorReport"), "gpuscout.api"),
    **dict.fromkeys(("LoadPlan", "make_plan"), "gpuscout.loadgen.plan"),
    **dict.fromkeys(("BenchSettings", "bench_settings"), "gpuscout.measure.harness"),
    **dict.fromkeys(("FinetuneJob", "InferenceJob", "ImageJob"), "gpuscout.workload.job"),
    "CostOptions": "gpuscout.cost.billing",
    "GpuscoutError": "gpuscout.errors",
}

__all__ = [
    "BenchReport", "BenchSettings", "CompareReport", "CostOptions", "CostReport", "DoctorReport", "EstimateReport",
    "FinetuneJob", "GpuscoutError", "ImageJob", "InferenceJob", "LoadPlan", "LoadReport", "ModelReport", "PickReport",
    "bench", "bench_settings", "compare", "cost", "describe_model", "doctor", "estimate", "gpus", "load", "load_job",
    "make_plan", "pick", "probe",
]

if TYPE_CHECKING:
    from gpuscout.api import (
        BenchReport,
        CompareReport,
        CostReport,
        DoctorReport,
        EstimateReport,
        LoadReport,
        ModelReport,
        PickReport,
        bench,
        compare,
        cost,
        describe_model,
        doctor,
        estimate,
        gpus,
        load,
        load_job,
        pick,
        probe,
    )
    from gpuscout.cost.billing import CostOptions
    from gpuscout.errors import GpuscoutError
    from gpuscout.loadgen.plan import LoadPlan, make_plan
    from gpuscout.measure.harness import BenchSettings, bench_settings
    from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuscout' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
