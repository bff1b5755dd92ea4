"""Reading a file or a stored run's id into a document, by the shape of its JSON.

`estimate --json` has `screening`, `pick --json` has `pick`, `compare --format json` has
`comparison` and `verdict`, and a result (bench, load, doctor; a file `-o` wrote or `--json`
printed) has `cases` and `schema_version`. Extras a command prints beside its result (bench's
`estimate`, load's `costs`, `search` and `slo`) are read too; keys added for display only
(`in_currency`, `calibration`) are recomputed from the rest and skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuscout.cost.load_cost import LoadCost
from gpuscout.cost.measured import MeasuredCost
from gpuscout.cost.pick import PickResult
from gpuscout.documents.kinds import (
    CaseCost,
    CheckCase,
    CheckMetric,
    ChecksDoc,
    CompareDoc,
    Document,
    EstimateDoc,
    PickDoc,
    RunDoc,
    SearchOutcome,
)
from gpuscout.errors import SpecError
from gpuscout.estimator.screen import Screening
from gpuscout.hardware.currency import DisplayCurrency
from gpuscout.results.beside import EstimateBeside
from gpuscout.results.compare import Comparison
from gpuscout.results.database import fetch, run_id_of
from gpuscout.results.entries import describe
from gpuscout.results.schema import BenchResult
from gpuscout.results.store import parse_result
from gpuscout.results.verdict import Verdict
from gpuscout.userfile import MAX_RESULT_BYTES, first_invalid_field, printable, read_user_json
from gpuscout.workload.job import Slo

# Kinds with a view of their own (distributions, sweeps); any other kind is drawn as checks.
RUN_KINDS = frozenset({"finetune", "inference", "image", "video", "load"})
_FIX = ("Pass what a gpuscout command wrote: `estimate --json`, `pick --json`, `compare --format json`, a bench or "
        "load result (-o FILE or --json), or a stored run's id (`gpuscout results list`).")
# Where a result may give a metric's expected band: flat pairs, or one nested mapping or [low, high].
_BAND_KEYS = (("expected_low", "expected_high"), ("expected_min", "expected_max"), ("low", "high"),
              ("min", "max"), ("lower", "upper"))
_NESTED_BAND = ("expected", "band", "expected_band", "range")
_STATUS_WORDS = ("status", "verdict", "outcome", "result", "state")
_STATUS_FLAGS = ("passed", "ok", "pass", "within")
Model = TypeVar("Model", bound=BaseModel)


def read_documents(refs: Sequence[str | Path], store: Path) -> list[Document]:
    return [read_ref(ref, store) for ref in refs]


def read_ref(ref: str | Path, store: Path) -> Document:
    """A file, or the id of a run in the results store (an existing file of that name wins)."""
    run_id = run_id_of(ref)
    if run_id is not None:
        _, payload = fetch(store, run_id)
        return to_document(payload, f"run {run_id}")
    path = Path(ref)
    return to_document(read_user_json(path, "gpuscout output", _FIX, max_bytes=MAX_RESULT_BYTES), str(path))


def to_document(data: Any, label: str) -> Document:
    if not isinstance(data, dict):
        raise _foreign(label, "it is not a JSON object")
    if "screening" in data:
        return EstimateDoc(label=label, screening=_valid(Screening, data["screening"], label, "screening"))
    if "pick" in data:
        return _pick(data, label)
    if "comparison" in data and "verdict" in data:
        return _compare(data, label)
    if data.get("kind") == "trial":  # a trial draws as the comparison of its candidates; without one, nothing
        raise SpecError(f"{label} is a trial that compared nothing: fewer than two candidates finished their bench.",
                        "report draws a trial as the comparison of its candidates' bench results.",
                        "Draw the one bench result it kept (under the trial's -o folder, <candidate>/results/"
                        "bench.json), or rerun the trial.")
    if "cases" in data and "schema_version" in data:
        return _result(data, label)
    raise _foreign(label, "it has none of the keys gpuscout's outputs have (screening, pick, comparison, cases)")


def _pick(data: dict[str, Any], label: str) -> PickDoc:
    pick = data["pick"] if isinstance(data["pick"], dict) else {}
    rows = _each(pick.get("rows"), lambda r: _without(r, "in_currency"))
    trial = {"trial": _without(pick["trial"], "in_currency")} if isinstance(pick.get("trial"), dict) else {}
    notes = [str(n) for n in _items(data.get("offers_notes"))]
    return PickDoc(label=label, pick=_valid(PickResult, {**pick, "rows": rows, **trial}, label, "pick"),
                   notes=tuple(notes))


def _compare(data: dict[str, Any], label: str) -> CompareDoc:
    costs = [_valid(MeasuredCost, _without(c, "in_currency"), label, "costs")
             for c in _strict_items(data, "costs", label)]
    currency = data.get("currency")
    return CompareDoc(label=label, comparison=_valid(Comparison, data["comparison"], label, "comparison"),
                      verdict=_valid(Verdict, data["verdict"], label, "verdict"), costs=tuple(costs),
                      warnings=tuple(str(w) for w in _items(data.get("warnings"))),
                      **({"currency": _valid(DisplayCurrency, currency, label, "currency")} if currency else {}))


def _result(data: dict[str, Any], label: str) -> RunDoc | ChecksDoc:
    kind = str(data.get("kind"))
    if kind == "doctor":
        return _doctor(parse_result(_result_part(data), label), data, label)
    if kind not in RUN_KINDS:
        if kind == "probe":  # a kind this version's schema knows: check it as a result file is checked
            parse_result(_result_part(data), label)
        return _checks(data, label, kind)
    extras: dict[str, Any] = {}
    if data.get("estimate"):
        estimate = dict(data["estimate"]) if isinstance(data["estimate"], dict) else data["estimate"]
        if isinstance(estimate, dict):  # each row's `ratio` is computed from the others, not read
            estimate["rows"] = _each(estimate.get("rows"), lambda r: _without(r, "ratio"))
        extras["estimate"] = _valid(EstimateBeside, estimate, label, "estimate")
    if data.get("search"):
        extras["search"] = _valid(SearchOutcome, data["search"], label, "search")
    if data.get("slo"):
        extras["slo"] = _valid(Slo, data["slo"], label, "slo")
    costs = [CaseCost(case=str(c.get("case")), cost=_valid(LoadCost, _without(c, "case"), label, "costs"))
             for c in _strict_items(data, "costs", label) if isinstance(c, dict)]
    return RunDoc(label=label, result=parse_result(_result_part(data), label), costs=tuple(costs), **extras)


def _result_part(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in BenchResult.model_fields}


# ---------------------------------------------------------------- any other kind --------------

def _checks(data: dict[str, Any], label: str, kind: str) -> ChecksDoc:
    """Every case and metric of a result this version has no view for, read field by field."""
    cases = [_check_case(c) for c in _items(data.get("cases")) if isinstance(c, Mapping)]
    return ChecksDoc(label=label, result_kind=printable(kind, 40), name=_text(data.get("name")) or kind,
                     created_at=_text(data.get("created_at")), machine=describe(kind, data).machine,
                     cases=tuple(cases), notes=tuple(_text(n) for n in _items(data.get("notes"))))


def _doctor(result: BenchResult, data: dict[str, Any], label: str) -> ChecksDoc:
    """A doctor result: its verdict's findings first (each against its band, with the doctor's own status),
    then every measured case; the verdict's sentence leads the notes."""
    generic = _checks(data, label, "doctor")
    verdict = result.doctor
    if verdict is None:
        return generic
    findings = CheckCase(name="findings", status=verdict.outcome, message=verdict.text, metrics=tuple(
        CheckMetric(name=f.check + (f" (GPU {f.gpu})" if f.gpu is not None else ""), unit=f.unit, value=f.value,
                    low=f.band_low, high=f.band_high, status=f.status, note=f.message)
        for f in verdict.findings))
    return generic.model_copy(update={"cases": (findings, *generic.cases),
                                      "verdict": f"{verdict.outcome.upper()}: {verdict.text}"})


def _check_case(case: Mapping[str, Any]) -> CheckCase:
    failure = case.get("failure")
    message = _text(failure.get("message")) if isinstance(failure, Mapping) else ""
    notes = "; ".join(_text(n) for n in _items(case.get("notes")))
    metrics = [_check_metric(m) for m in _items(case.get("metrics")) if isinstance(m, Mapping)]
    return CheckCase(name=_text(case.get("name")), status=_status(case) or ("failed" if failure else ""),
                     message=message or notes, metrics=tuple(metrics))


def _check_metric(metric: Mapping[str, Any]) -> CheckMetric:
    low, high = _band(metric)
    return CheckMetric(name=_text(metric.get("name")), unit=_text(metric.get("unit")),
                       value=_number(metric.get("value")), low=low, high=high, status=_status(metric),
                       note=_text(metric.get("note")))


def _band(metric: Mapping[str, Any], depth: int = 0) -> tuple[float | None, float | None]:
    for low, high in _BAND_KEYS:
        if low in metric or high in metric:
            return _number(metric.get(low)), _number(metric.get(high))
    for key in _NESTED_BAND if depth == 0 else ():
        inner = metric.get(key)
        if isinstance(inner, Mapping):
            return _band(inner, depth + 1)
        if isinstance(inner, list | tuple) and len(inner) == 2:
            return _number(inner[0]), _number(inner[1])
    return None, None


def _status(item: Mapping[str, Any]) -> str:
    for key in _STATUS_WORDS:
        if isinstance(item.get(key), str):
            return _text(item[key], 40)
    for key in _STATUS_FLAGS:
        if isinstance(item.get(key), bool):
            return "pass" if item[key] else "fail"
    return ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _text(value: Any, limit: int = 2000) -> str:
    return "" if value is None or isinstance(value, Mapping | list) else printable(str(value), limit)


# ---------------------------------------------------------------- checking -------------------

def _valid(model: type[Model], data: Any, label: str, part: str) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _damaged(label, first_invalid_field(exc, part)) from None


def _damaged(label: str, detail: str) -> SpecError:
    return SpecError(f"{label} is not a valid gpuscout output: {detail}.",
                     "It does not match what this gpuscout writes: it was edited, damaged, or written by another "
                     "version.", "Re-run the command that wrote it with this gpuscout.")


def _items(value: Any) -> Sequence[Any]:
    """A JSON list read leniently: anything else (a number, a string, an object) holds no items. A hand-edited
    file's `"cases": 5` must not reach a loop as the number 5."""
    return value if isinstance(value, list | tuple) else ()


def _each(value: Any, fn: Callable[[Any], Any]) -> Any:
    """A list that a model validates next: each item mapped, and anything that is not a list passed on as it
    is, so that the validation names the field instead of a loop failing on it."""
    if value is None:
        return []
    return [fn(item) for item in value] if isinstance(value, list | tuple) else value


def _strict_items(data: Mapping[str, Any], key: str, label: str) -> Sequence[Any]:
    value = data.get(key)
    if value is None or isinstance(value, list | tuple):
        return value or ()
    raise _damaged(label, f"{key}: must be a list, not {type(value).__name__}")


def _without(item: Any, key: str) -> Any:
    return {k: v for k, v in item.items() if k != key} if isinstance(item, dict) else item


def _foreign(label: str, why: str) -> SpecError:
    return SpecError(f"{label} is not a gpuscout output: {why}.", "gpuscout report draws what its commands write.",
                     _FIX)
