"""The results store as a user meets it: real subprocesses record, list, show, export, compare and report by id.

Each test's subprocesses get the data folder conftest gives the test (XDG_DATA_HOME), so the default
store lives there; the first test checks exactly that, so no test can write to the developer's store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from results import A100, BASE_TPS, bench_result, write

ROOT = Path(__file__).parent.parent.parent


def gpuscout(*args: str | Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"COLUMNS": "120", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    if store is not None:
        env["GPUSCOUT_STORE"] = str(store)
    return subprocess.run([sys.executable, "-m", "gpuscout", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def default_store() -> Path:
    return Path(os.environ["XDG_DATA_HOME"]) / "gpuscout" / "results.sqlite"


def test_pick_is_recorded_in_the_data_folder_and_shown_back_exactly() -> None:
    home_store = Path.home() / ".local" / "share" / "gpuscout" / "results.sqlite"
    home_before = home_store.stat().st_mtime_ns if home_store.exists() else None
    picked = gpuscout("pick", "--json")
    assert picked.returncode == 0, picked.stderr
    assert "recorded in the results store as run 1" in picked.stderr
    assert default_store().is_file()  # in the test's own data folder, which the subprocess was given
    assert (home_store.stat().st_mtime_ns if home_store.exists() else None) == home_before
    listed = json.loads(gpuscout("results", "list", "--json").stdout)
    assert [(r["id"], r["kind"]) for r in listed["runs"]] == [(1, "pick")]
    shown = json.loads(gpuscout("results", "show", "1", "--json").stdout)
    assert shown["payload"] == json.loads(picked.stdout)  # the full result, as the command printed it


def test_no_store_and_store_choose_where_or_whether(tmp_path: Path) -> None:
    assert gpuscout("pick", "--no-store").returncode == 0
    assert not default_store().exists()
    mine = tmp_path / "mine.sqlite"
    assert gpuscout("pick", "--store", mine).returncode == 0
    assert mine.is_file() and not default_store().exists()
    listed = gpuscout("results", "list", "--store", mine)
    assert listed.returncode == 0 and "1 stored run(s)" in listed.stdout and "pick" in listed.stdout


def test_a_bench_run_is_exported_compared_and_reported_by_id(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    bench = ("bench", "tiny-finetune", "--device", "cpu", "--warmup", "0", "--repeats", "2", "--runs", "1")
    for _ in range(2):
        done = gpuscout(*bench, store=store)
        assert done.returncode == 0, done.stderr
        assert "Result kept in the results store as run" in done.stdout
    listed = gpuscout("results", "list", "--kind", "finetune", store=store)
    assert listed.returncode == 0 and "bench finetune" in listed.stdout
    exported = tmp_path / "a.json"
    assert gpuscout("results", "export", "1", "-o", exported, store=store).returncode == 0
    assert json.loads(exported.read_text())["kind"] == "finetune"
    compared = gpuscout("compare", exported, "2", "--format", "json", store=store)  # a file and an id
    outcome = json.loads(compared.stdout)["verdict"]["outcome"]  # CPU timings: any verdict; its exit code follows
    assert compared.returncode == (0 if outcome in ("winner", "no difference") else 4), compared.stderr
    assert json.loads(compared.stdout)["comparison"]["machines"][1]["label"] == "B"
    report = tmp_path / "r.html"
    drawn = gpuscout("report", "1", "2", "-o", report, "--json", store=store)
    assert drawn.returncode == 0, drawn.stderr
    assert json.loads(drawn.stdout)["plots"] >= 1 and "<svg" in report.read_text()


def test_list_filters_and_mistakes_are_three_part_errors(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    assert gpuscout("pick", store=store).returncode == 0
    assert json.loads(gpuscout("results", "list", "--since", "1d", "--json", store=store).stdout)["matched"] == 1
    assert json.loads(gpuscout("results", "list", "--since", "2099-01-01", "--json",
                               store=store).stdout)["matched"] == 0
    for args, words in ((("--kind", "benhc"), "Did you mean: bench"), (("--since", "soon"), "--since 'soon'")):
        done = gpuscout("results", "list", *args, store=store)
        assert done.returncode == 1 and words in done.stderr and "To fix" in done.stderr
        assert "Traceback" not in done.stderr
    missing = gpuscout("results", "show", "99", store=store)
    assert missing.returncode == 1 and "No stored run 99" in missing.stderr


def test_a_damaged_store_is_reported_and_left_alone_while_the_run_still_prints(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    store.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4000)
    before = store.read_bytes()
    picked = gpuscout("pick", "--json", store=store)
    assert picked.returncode == 0 and json.loads(picked.stdout)["pick"]["rows"]  # the ranking is not lost
    assert "not recorded in the results store" in picked.stderr and "damaged" in picked.stderr
    listed = gpuscout("results", "list", store=store)
    assert listed.returncode == 1 and "damaged" in listed.stderr and "Traceback" not in listed.stderr
    assert store.read_bytes() == before


def test_a_store_from_a_newer_gpuscout_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    assert gpuscout("pick", store=store).returncode == 0
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA user_version = 99")
    listed = gpuscout("results", "list", store=store)
    assert listed.returncode == 1 and "written by a newer gpuscout (store version 99" in listed.stderr


def test_compare_by_id_refuses_a_pick(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    assert gpuscout("pick", store=store).returncode == 0
    a = write(bench_result("A-a100", gpu=A100), tmp_path)
    write(bench_result("B-h100", tps=[t * 2 for t in BASE_TPS]), tmp_path)
    done = gpuscout("compare", a, "1", store=store)
    assert done.returncode == 1 and "is a pick run, not a measurement" in done.stderr
