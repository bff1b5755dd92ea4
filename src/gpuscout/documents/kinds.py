"""The documents a report can draw, one model per kind of gpuscout output."""

from __future__ import annotations

from typing import Literal

from gpuscout.cost.load_cost import LoadCost
from gpuscout.cost.measured import MeasuredCost
from gpuscout.cost.pick import PickResult
from gpuscout.estimator.screen import Screening
from gpuscout.frozen import Frozen
from gpuscout.hardware.currency import USD, DisplayCurrency
from gpuscout.results.beside import EstimateBeside
from gpuscout.results.compare import Comparison
from gpuscout.results.schema import BenchResult
from gpuscout.results.verdict import Verdict
from gpuscout.workload.job import Slo


class EstimateDoc(Frozen):
    kind: Literal["estimate"] = "estimate"
    label: str  # where it came from: a file path, or "run 12"
    screening: Screening


class PickDoc(Frozen):
    kind: Literal["pick"] = "pick"
    label: str
    pick: PickResult
    notes: tuple[str, ...] = ()


class CompareDoc(Frozen):
    kind: Literal["compare"] = "compare"
    label: str
    comparison: Comparison
    verdict: Verdict
    costs: tuple[MeasuredCost, ...] = ()
    currency: DisplayCurrency = USD
    warnings: tuple[str, ...] = ()


class SearchOutcome(Frozen):
    """What `load --search` concluded (the `search` part of `load --json`)."""

    best_level: int | float | None
    goodput_rps: float | None
    outcome: str
    message: str


class CaseCost(Frozen):
    case: str
    cost: LoadCost


class RunDoc(Frozen):
    """A bench or load result, with what its command printed beside it."""

    kind: Literal["run"] = "run"
    label: str
    result: BenchResult
    estimate: EstimateBeside | None = None  # bench --json: the estimate for this GPU
    costs: tuple[CaseCost, ...] = ()  # load --json with a price
    search: SearchOutcome | None = None  # load --search
    slo: Slo | None = None  # the targets the run was judged against, where known


class CheckMetric(Frozen):
    name: str
    unit: str
    value: float | None
    low: float | None = None  # the expected band, where the result gives one
    high: float | None = None
    status: str = ""  # the result's own word for it (pass, warn, fail …), where it gives one
    note: str = ""


class CheckCase(Frozen):
    name: str
    status: str = ""
    message: str = ""  # its failure, or its notes
    metrics: tuple[CheckMetric, ...] = ()


class ChecksDoc(Frozen):
    """A result of a kind drawn generically (doctor, probe, …): cases × metrics against their bands."""

    kind: Literal["checks"] = "checks"
    label: str
    result_kind: str
    name: str
    created_at: str
    machine: str
    cases: tuple[CheckCase, ...]
    notes: tuple[str, ...] = ()
    verdict: str = ""  # the result's own verdict in one line (doctor: "keep: …"), shown first


Document = EstimateDoc | PickDoc | CompareDoc | RunDoc | ChecksDoc
