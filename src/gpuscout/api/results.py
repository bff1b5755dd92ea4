"""The results store: record a run, list, show and export stored runs, and read what `report` draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscout.api.inputs import checked_output

if TYPE_CHECKING:
    from gpuscout.documents.kinds import Document
    from gpuscout.results.database import StoredRun
    from gpuscout.results.schema import BenchResult


def store_path(store: str | Path | None = None) -> Path:
    """The results store: `store`, else $GPUSCOUT_STORE, else $XDG_DATA_HOME (~/.local/share)/gpuscout/."""
    from gpuscout.results.database import default_store_path, store_path_from

    return store_path_from(str(store), "--store") if store is not None else default_store_path()


def record_run(kind: str, run: BenchResult | Mapping[str, Any], *, store: str | Path | None = None) -> StoredRun:
    """Record one run in the results store, in one transaction: the one entry point for every command
    that records (bench, load, pick, doctor). `run` is a result or the JSON its command prints with
    --json; the store keeps all of it with its kind, job, machine and time (docs/results.md §2)."""
    from gpuscout.results.database import record
    from gpuscout.results.schema import BenchResult

    payload = run.model_dump(mode="json") if isinstance(run, BenchResult) else dict(run)
    return record(store_path(store), kind, payload)


@dataclass(frozen=True)
class ResultsList:
    runs: tuple[StoredRun, ...]  # oldest first
    matched: int  # how many runs matched (more than `runs` when a limit cut the list)
    store: Path


def list_results(*, kind: str | None = None, job: str | None = None, since: str | datetime | None = None,
                 limit: int | None = None, store: str | Path | None = None) -> ResultsList:
    """The stored runs that match: of a kind (bench, load, pick, doctor, or a result kind), whose job or
    name contains `job`, made since a moment ('7d', '2026-11-24'); the newest `limit` of them."""
    from gpuscout.results.database import list_runs
    from gpuscout.results.query import check_kind, parse_since

    path = store_path(store)
    checked = check_kind(kind, path) if kind else None
    moment = parse_since(since) if isinstance(since, str) else since
    runs, matched = list_runs(path, kind=checked, job=job, since=moment, limit=limit)
    return ResultsList(runs=tuple(runs), matched=matched, store=path)


@dataclass(frozen=True)
class StoredRunReport:
    entry: StoredRun
    payload: dict[str, Any]  # the run's JSON, as its command printed it
    store: Path


def show_result(run_id: int, *, store: str | Path | None = None) -> StoredRunReport:
    """One stored run, its payload checked against the SHA-256 stored with it."""
    from gpuscout.results.database import fetch

    path = store_path(store)
    entry, payload = fetch(path, run_id)
    return StoredRunReport(entry=entry, payload=payload, store=path)


def export_result(run_id: int, output: str | Path, *, store: str | Path | None = None) -> Path:
    """Write a stored run to a file, atomically: a bench, load or doctor run as the result file `-o`
    writes (so compare, calibrate and report read it), a pick as the JSON it printed."""
    from gpuscout.outfile import write_atomic
    from gpuscout.results.query import export_text

    path = checked_output(output, "exported result")
    assert path is not None
    shown = show_result(run_id, store=store)
    write_atomic(path, export_text(shown.entry, shown.payload), what="exported result")
    return path


@dataclass(frozen=True)
class ReportInputs:
    documents: tuple[Document, ...]  # one per source, in order
    store: Path


def report_inputs(sources: Sequence[str | Path], *, store: str | Path | None = None) -> ReportInputs:
    """The documents `gpuscout report` draws: files gpuscout wrote, or ids of stored runs."""
    from gpuscout.documents.read import read_documents
    from gpuscout.errors import SpecError

    if not sources:
        raise SpecError("report needs at least one file or stored run.",
                        "It draws what gpuscout's commands wrote.",
                        "Pass files (gpuscout estimate --json > e.json; bench -o a.json) or ids from "
                        "`gpuscout results list`.")
    path = store_path(store)
    return ReportInputs(documents=tuple(read_documents(sources, path)), store=path)
