"""What the results store lists about a run: its kind, job, machine, time and a one-line summary.

Read from the run's JSON payload, whatever command wrote it: a result (bench, load, doctor: `cases`,
`fingerprint`, `created_at`) or a ranking (pick: `job`, `pick.rows`). The payload is read
defensively, field by field, so a kind this version does not know yet (or a field it lacks) still
gets an entry; nothing here refuses a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuscout.frozen import Frozen
from gpuscout.host import package_version

_MAX_TEXT = 200  # characters kept of a name, job or machine in the index (the payload keeps all)


class Entry(Frozen):
    kind: str
    result_kind: str
    created_at: datetime
    recorded_at: datetime
    job: str
    machine: str
    name: str
    summary: str
    complete: bool
    gpuscout_version: str


def describe(kind: str, payload: Mapping[str, Any], *, now: datetime | None = None) -> Entry:
    """The index entry of a run: a result-shaped payload, or a pick ranking."""
    recorded = now or datetime.now(UTC)
    if isinstance(payload.get("pick"), Mapping):
        return _pick_entry(kind, payload, recorded)
    fingerprint = _mapping(payload.get("fingerprint"))
    fixed, job = _mapping(payload.get("fixed")), _mapping(payload.get("job"))
    result_kind = _text(payload.get("kind")) or kind
    name = _text(payload.get("name")) or kind
    return Entry(kind=kind, result_kind=result_kind, created_at=_when(payload.get("created_at"), recorded),
                 recorded_at=recorded, job=_text(job.get("name")) or _text(fixed.get("model")) or name,
                 machine=_machine(result_kind, fingerprint, job), name=name, summary=_result_summary(payload),
                 complete=payload.get("complete") is not False,
                 gpuscout_version=_text(fingerprint.get("gpuscout_version")) or _version())


def _pick_entry(kind: str, payload: Mapping[str, Any], recorded: datetime) -> Entry:
    job = _text(_mapping(payload.get("job")).get("name")) or "job"
    rows = [r for r in _items(_mapping(payload.get("pick")).get("rows")) if isinstance(r, Mapping)]
    ranked = [r for r in rows if r.get("excluded") is None]
    summary = f"{len(ranked)} ranked, {len(rows) - len(ranked)} excluded"
    if ranked:
        summary += f", cheapest{_pick_total(ranked[0])}" if _pick_total(ranked[0]) else ""
    return Entry(kind=kind, result_kind="", created_at=recorded, recorded_at=recorded, job=job,
                 machine=_text(ranked[0].get("offer_id")) if ranked else "", name=f"pick {job}", summary=summary,
                 complete=True, gpuscout_version=_version())


def _pick_total(row: Mapping[str, Any]) -> str:
    shown = _mapping(row.get("in_currency"))
    total, code = shown.get("total"), _text(shown.get("currency"), 8)
    return f" {total:.4g} {code}" if isinstance(total, int | float) and code else ""


def _machine(result_kind: str, fingerprint: Mapping[str, Any], job: Mapping[str, Any]) -> str:
    """The machine measured: a load test's server, else the GPU (or CPU) the run was made on."""
    if result_kind == "load" and _text(job.get("url")):
        return _text(job.get("url"))
    gpu, count = _text(fingerprint.get("gpu_name")), fingerprint.get("gpu_count")
    if gpu:
        return f"{count}× {gpu}" if isinstance(count, int) and count > 1 else gpu
    cpu = _text(fingerprint.get("cpu_model"))
    return f"CPU: {cpu}" if cpu else ""


def _result_summary(payload: Mapping[str, Any]) -> str:
    trial = _mapping(payload.get("trial"))
    if payload.get("kind") == "trial":  # the decision: what to rent, or why nothing was named
        rent = _text(trial.get("rent"), 60)
        return f"{_text(trial.get('outcome'), 20)}" + (f": rent {rent}" if rent else "")
    cases = [c for c in _items(payload.get("cases")) if isinstance(c, Mapping)]
    failed = sum(1 for c in cases if c.get("failure"))
    parts = [f"{len(cases)} case{'s' if len(cases) != 1 else ''}"]
    verdict = _mapping(payload.get("doctor"))
    if payload.get("kind") == "doctor" and _text(verdict.get("outcome"), 20):  # doctor: keep / return first
        parts.insert(0, _text(verdict.get("outcome"), 20))
    if failed:
        parts.append(f"{failed} failed")
    if payload.get("kind") == "load" and cases:  # a load's verdict: the levels the validity gate passed
        valid = sum(1 for c in cases if "valid" in _items(c.get("notes")))
        parts.append(f"{valid}/{len(cases)} level{'s' if len(cases) != 1 else ''} valid")
    search = _mapping(payload.get("search"))
    if search.get("best_level") is not None:
        parts.append(f"best level {_text(search.get('best_level'), 20)}")
    if payload.get("complete") is False:
        parts.append("incomplete")
    return ", ".join(parts)


def _when(value: Any, default: datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return default
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> Sequence[Any]:
    """A hand-edited `"cases": 5` lists nothing rather than failing a loop."""
    return value if isinstance(value, list | tuple) else ()


def _text(value: Any, limit: int = _MAX_TEXT) -> str:
    if value is None or isinstance(value, Mapping | list | tuple):
        return ""
    text = " ".join(str(value).split())  # one line: no newline or tab reaches a table cell
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _version() -> str:
    return package_version("gpuscout") or "unknown"
