"""The public Python API: the command line's steps as functions that return typed results.

    from gpuscout import estimate, pick, bench, compare, load

Each function takes the same inputs as its command (a job is a `Job`, a spec path, the name of
a shipped example, or None for the built-in default) and returns a frozen report; the command line
renders exactly these objects (`gpuscout.report`). One module per journey: `jobs` (jobs, models,
the catalog), `estimate`, `pick`, `cost`, `bench` (with compare and calibrate), `load` (with
probe), `results` (the results store and what `report` draws), `doctor`; `inputs` holds what
they share and `stopping` the one Ctrl-C helper. Heavy modules are imported inside the functions,
so `import gpuscout` stays cheap. docs/api.md has a runnable example.

May import every package but `cli` and `report`.
"""

from __future__ import annotations

from gpuscout.api.bench import BenchReport, CalibrateReport, CompareReport, bench, calibrate, compare
from gpuscout.api.cost import CostReport, cost
from gpuscout.api.doctor import DoctorReport, doctor
from gpuscout.api.estimate import EstimateReport, estimate
from gpuscout.api.inputs import InputError
from gpuscout.api.jobs import (
    Job,
    JobRef,
    ModelPresets,
    ModelReport,
    describe_model,
    examples_dir,
    gpus,
    load_job,
    model_presets,
)
from gpuscout.api.load import LoadReport, load, probe, where_rented
from gpuscout.api.offers import OffersList, PullReport, list_offers, pull_offers
from gpuscout.api.pick import PickReport, pick
from gpuscout.api.results import (
    ReportInputs,
    ResultsList,
    StoredRunReport,
    export_result,
    list_results,
    record_run,
    report_inputs,
    show_result,
    store_path,
)
from gpuscout.api.trial import plan_trial, run_trial

__all__ = [
    "BenchReport", "CalibrateReport", "CompareReport", "CostReport", "DoctorReport", "EstimateReport", "InputError",
    "Job", "JobRef", "LoadReport", "ModelPresets", "ModelReport", "OffersList", "PickReport", "PullReport",
    "ReportInputs", "ResultsList", "StoredRunReport", "bench", "calibrate", "compare", "cost", "describe_model",
    "doctor", "estimate", "examples_dir", "export_result", "gpus", "list_offers", "list_results", "load", "load_job",
    "model_presets", "pick", "plan_trial", "probe", "pull_offers", "record_run", "report_inputs", "run_trial",
    "show_result", "store_path", "where_rented",
]
