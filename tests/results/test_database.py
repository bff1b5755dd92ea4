"""The results store on a real SQLite file: round trips, filters, transactions, and files it must refuse.

Every refusal checks that the file is byte for byte what it was: a store gpuscout cannot read is
reported, never replaced or "repaired".
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.results import database
from gpuscout.results.database import STORE_VERSION, default_store_path, fetch, fetch_result, list_runs, record
from gpuscout.results.query import check_kind, export_text, parse_since
from gpuscout.results.store import load_result
from results import bench_result, runs_case

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def bench_payload(name: str = "a100 run", days_ago: float = 0) -> dict[str, Any]:
    result = bench_result(name, cases=[runs_case([[1000.0, 1010.0], [995.0, 1003.0]])])
    result = result.model_copy(update={"created_at": NOW - timedelta(days=days_ago)})
    return {**result.model_dump(mode="json"), "estimate": None}


def pick_payload(job: str = "llama qlora") -> dict[str, Any]:
    rows = [{"offer_id": "lambda-h100", "excluded": None, "in_currency": {"total": 12.5, "currency": "USD"}},
            {"offer_id": "tiny-gpu", "excluded": "does not fit"}]
    return {"job": {"name": job}, "pick": {"rows": rows}}


def test_a_run_comes_back_whole_with_its_entry(tmp_path: Path) -> None:
    store = tmp_path / "deep" / "folder" / "results.sqlite"
    payload = bench_payload()
    entry = record(store, "bench", payload, now=NOW)
    assert entry.id == 1 and entry.kind == "bench" and entry.result_kind == "finetune"
    assert entry.machine == "NVIDIA H100 80GB HBM3" and entry.job == "tiny fine-tune"
    got, back = fetch(store, entry.id)
    assert back == payload and got == entry
    # As the result file -o writes: the command's extras (the estimate) are not part of it.
    assert fetch_result(store, entry.id).model_dump(mode="json") == {k: v for k, v in payload.items()
                                                                     if k != "estimate"}


def test_pick_entries_name_the_cheapest_offer(tmp_path: Path) -> None:
    entry = record(tmp_path / "s.sqlite", "pick", pick_payload(), now=NOW)
    assert entry.machine == "lambda-h100" and entry.job == "llama qlora"
    assert entry.summary == "1 ranked, 1 excluded, cheapest 12.5 USD"
    with pytest.raises(SpecError, match="pick run, not a measurement"):
        fetch_result(tmp_path / "s.sqlite", entry.id)


def test_a_kind_gpuscout_does_not_know_yet_is_still_recorded(tmp_path: Path) -> None:
    doctor = {"schema_version": 2, "kind": "doctor", "name": "doctor on h100", "created_at": "2026-11-30T08:00:00Z",
              "fingerprint": {"gpu_name": "H100", "gpu_count": 8}, "cases": [{"name": "nccl", "failure": {"x": 1}}]}
    entry = record(tmp_path / "s.sqlite", "doctor", doctor, now=NOW)
    assert (entry.result_kind, entry.machine, entry.summary) == ("doctor", "8× H100", "1 case, 1 failed")
    assert entry.created_at == datetime(2026, 11, 30, 8, tzinfo=UTC)


def test_a_doctor_run_is_listed_with_its_verdict_first(tmp_path: Path) -> None:
    doctor = {"schema_version": 2, "kind": "doctor", "name": "doctor", "created_at": "2026-11-30T08:00:00Z",
              "cases": [{"name": "disk"}, {"name": "matmul"}], "doctor": {"outcome": "return", "text": "x"}}
    assert record(tmp_path / "s.sqlite", "doctor", doctor, now=NOW).summary == "return, 2 cases"


def test_filters_by_kind_job_and_time_and_keeps_the_newest_when_limited(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    for days in (10, 5, 1):
        record(store, "bench", bench_payload(f"run {days}d ago", days), now=NOW)
    record(store, "pick", pick_payload("serving 70b"), now=NOW)
    # In the order the runs were made, whatever order they were recorded in.
    record(store, "bench", bench_payload("run 20d ago", 20), now=NOW)
    assert [r.name for r in list_runs(store)[0]] == ["run 20d ago", "run 10d ago", "run 5d ago", "run 1d ago",
                                                      "pick serving 70b"]
    assert [r.id for r in list_runs(store, kind="pick")[0]] == [4]
    assert [r.id for r in list_runs(store, kind="finetune")[0]] == [5, 1, 2, 3]
    assert [r.id for r in list_runs(store, job="SERVING")[0]] == [4]
    assert [r.id for r in list_runs(store, since=parse_since("7d", NOW))[0]] == [2, 3, 4]
    runs, matched = list_runs(store, limit=2)
    assert [r.id for r in runs] == [3, 4] and matched == 5


def test_since_reads_durations_and_dates_and_refuses_the_rest() -> None:
    assert parse_since("12h", NOW) == NOW - timedelta(hours=12)
    assert parse_since("2026-11-24", NOW) == datetime(2026, 11, 24, tzinfo=UTC)
    assert parse_since("2026-11-24T09:00+08:00", NOW) == datetime(2026, 11, 24, 1, tzinfo=UTC)
    with pytest.raises(SpecError, match="neither a time back from now nor a date"):
        parse_since("last tuesday", NOW)


def test_a_mistyped_kind_suggests_the_real_one(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="Did you mean: bench"):
        check_kind("benhc", tmp_path / "s.sqlite")


def test_reads_never_create_a_store(tmp_path: Path) -> None:
    store = tmp_path / "none.sqlite"
    assert list_runs(store) == ([], 0)
    with pytest.raises(SpecError, match="no store there yet"):
        fetch(store, 1)
    assert not store.exists()


def test_an_interrupted_write_leaves_no_half_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between the entry's row and its payload's row: the transaction rolls both back."""
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload(), now=NOW)

    class Interrupting:
        pass

    def interrupt(_: Interrupting) -> bytes:
        raise KeyboardInterrupt

    sqlite3.register_adapter(Interrupting, interrupt)
    monkeypatch.setattr(database.zlib, "compress", lambda *_: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        record(store, "pick", pick_payload("second"), now=NOW)
    monkeypatch.undo()
    assert [r.job for r in list_runs(store)[0]] == ["llama qlora"]
    # The id counter rolled back with the rows: the next run takes the id the lost one never kept.
    assert record(store, "pick", pick_payload("third"), now=NOW).id == 2
    assert fetch(store, 2)[1]["job"]["name"] == "third"


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    writer = textwrap.dedent(f"""
        from pathlib import Path
        from gpuscout.results.database import record
        for i in range(25):
            record(Path({str(store)!r}), "pick", {{"job": {{"name": f"job {{i}}"}}, "pick": {{"rows": []}}}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    runs, matched = list_runs(store)
    assert matched == 50 and len({r.id for r in runs}) == 50
    assert all(fetch(store, r.id)[1]["job"]["name"].startswith("job ") for r in runs)


def test_a_store_from_a_newer_gpuscout_is_refused_and_left_alone(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload(), now=NOW)
    with sqlite3.connect(store) as db:
        db.execute(f"PRAGMA user_version = {STORE_VERSION + 1}")
    before = store.read_bytes()
    for attempt in (lambda: record(store, "pick", pick_payload(), now=NOW), lambda: list_runs(store),
                    lambda: fetch(store, 1)):
        with pytest.raises(SpecError, match="written by a newer gpuscout") as err:
            attempt()
        assert "Upgrade gpuscout" in err.value.fix
    assert store.read_bytes() == before


@pytest.mark.parametrize("damage", ["not sqlite", "foreign database", "torn pages"])
def test_a_damaged_or_foreign_file_is_reported_and_never_replaced(tmp_path: Path, damage: str) -> None:
    store = tmp_path / "s.sqlite"
    if damage == "not sqlite":
        store.write_text("my notes, not a database\n")
    elif damage == "foreign database":
        with sqlite3.connect(store) as db:
            db.execute("CREATE TABLE photos (id INTEGER)")
    else:
        for i in range(30):
            record(store, "bench", bench_payload(f"run {i}"), now=NOW)
        data = bytearray(store.read_bytes())
        page = 4096
        data[page: page * 3] = b"\xff" * (page * 2)  # two pages of the tables' b-trees overwritten
        store.write_bytes(bytes(data))
    before = store.read_bytes()
    with pytest.raises(SpecError) as err:
        list_runs(store)
        record(store, "pick", pick_payload(), now=NOW)
    assert ("damaged" in err.value.what) or ("not a gpuscout results store" in err.value.what)
    assert store.read_bytes() == before


def test_a_payload_that_does_not_match_its_checksum_is_reported(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload(), now=NOW)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE payloads SET body = ?", (zlib.compress(b'{"job": {"name": "edited"}}'),))
    with pytest.raises(SpecError, match="does not match the SHA-256"):
        fetch(store, 1)


def test_export_writes_a_measurement_as_its_result_file(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    entry = record(store, "bench", bench_payload(), now=NOW)
    text = export_text(*fetch(store, entry.id))
    assert '"estimate"' not in text and '"schema_version": 2' in text  # a null estimate is left out
    costs = [{"case": "train", "price_source": "--usd-per-hour 3.6", "usd_per_hour": 3.6}]
    load = {**bench_payload(), "estimate": None, "slo": {"ttft_p95_s": 0.5}, "costs": costs}
    exported = json.loads(export_text(*fetch(store, record(store, "load", load, now=NOW).id)))
    assert exported["slo"] == {"ttft_p95_s": 0.5} and exported["costs"] == costs and "estimate" not in exported
    path = tmp_path / "exported.json"
    path.write_text(json.dumps(exported))
    assert load_result(path).name == "a100 run"  # what is written beside the result does not stop it reading


def test_the_default_store_follows_xdg(tmp_path: Path) -> None:
    assert default_store_path({"GPUSCOUT_STORE": str(tmp_path / "x.sqlite")}) == tmp_path / "x.sqlite"
    assert default_store_path({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "gpuscout" / "results.sqlite"
    relative = default_store_path({"XDG_DATA_HOME": "relative/dir"})  # invalid per the spec: ignored
    assert relative == Path.home() / ".local" / "share" / "gpuscout" / "results.sqlite"
