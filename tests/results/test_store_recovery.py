"""The results store recovers the way SQLite does, and a store it cannot read is one clear error.

A real SQLite file and a real writer process (gpuscout's own `record`) killed with SIGKILL inside its
transaction; edited rows, a zlib bomb, ids and limits past SQLite's integers, paths the system refuses."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gpuscout.errors import SpecError
from gpuscout.results.database import MAX_RUN_ID, default_store_path, fetch, list_runs, record, store_path_from
from gpuscout.userfile import MAX_RESULT_BYTES

ROOT = Path(__file__).parent.parent.parent

# The writer: gpuscout's `record`, with a page cache of two pages (as a large run's write overflows
# any cache) so its pages reach the file before COMMIT, and a pause at COMMIT for the kill.
WRITER = textwrap.dedent("""
    import secrets, sqlite3, sys, time
    from pathlib import Path
    from gpuscout.results import database

    class PausingAtCommit(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql == "COMMIT":
                print("inside the transaction", flush=True)
                time.sleep(120)
            return super().execute(sql, *args)

    connect = sqlite3.connect

    def small_cache(*args, **kwargs):
        db = connect(*args, factory=PausingAtCommit, **kwargs)
        sqlite3.Connection.execute(db, "PRAGMA cache_size = 2")
        return db

    database.sqlite3.connect = small_cache
    blob = secrets.token_hex(400_000)
    database.record(Path(sys.argv[1]), "pick", {"job": {"name": "killed"}, "pick": {"rows": [], "blob": blob}})
""")  # the blob: ~800 kB that zlib cannot shrink much, hundreds of pages


def pick_payload(job: str) -> dict[str, Any]:
    return {"job": {"name": job}, "pick": {"rows": []}}


def kill_a_writer_inside_its_transaction(store: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])})
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "inside the transaction"
    writer.send_signal(signal.SIGKILL)
    writer.stdout.close()
    assert writer.wait(timeout=30) == -signal.SIGKILL


def test_a_writer_killed_inside_its_transaction_is_rolled_back_on_the_next_open(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload("kept"))
    kill_a_writer_inside_its_transaction(store)
    journal = store.with_name(store.name + "-journal")
    assert journal.stat().st_size > 0
    # The journal is hot: a read-only connection cannot roll it back and refuses to read.
    with pytest.raises(sqlite3.OperationalError), sqlite3.connect(f"file:{quote(str(store))}?mode=ro", uri=True) as ro:
        ro.execute("SELECT count(*) FROM runs").fetchone()
    runs, matched = list_runs(store)
    assert matched == 1 and [r.job for r in runs] == ["kept"]
    assert not journal.exists()  # rolled back: the store is as it was before the killed run
    assert fetch(store, 1)[1]["job"]["name"] == "kept"
    assert record(store, "pick", pick_payload("next")).id == 2
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_ids_and_limits_past_sqlites_integers_are_clear_errors_on_a_healthy_store(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload("only"))
    for run_id in (MAX_RUN_ID + 1, 10**400, 0, -1):
        with pytest.raises(SpecError, match="ids are whole numbers from 1 to") as err:
            fetch(store, run_id)
        assert "damaged" not in err.value.render()
    with pytest.raises(SpecError, match="no entry has that id"):
        fetch(store, MAX_RUN_ID)
    assert list_runs(store, limit=2**63)[1] == 1 and list_runs(store, limit=10**400)[0][0].job == "only"


def edit(store: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(store) as db:
        db.execute(sql, args)


def test_an_edited_row_names_its_entry_and_leaves_the_others_readable(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    for name in ("a", "b", "c", "d"):
        record(store, "pick", pick_payload(name))
    edit(store, "UPDATE runs SET payload_bytes = -5 WHERE id = 1")
    not_json = b"\xff{not json"
    edit(store, "UPDATE payloads SET body = ? WHERE run_id = 2", zlib.compress(not_json))
    edit(store, "UPDATE runs SET payload_bytes = ?, payload_sha256 = ? WHERE id = 2", len(not_json),
         __import__("hashlib").sha256(not_json).hexdigest())
    edit(store, "UPDATE payloads SET body = 'text, not bytes' WHERE run_id = 3")
    for run_id, why in ((1, "recorded payload size, -5 bytes"), (2, "not gpuscout's JSON"),
                        (3, "no readable payload")):
        with pytest.raises(SpecError, match=f"Entry {run_id} of the results store") as err:
            fetch(store, run_id)
        assert why in err.value.what and f"DELETE FROM runs WHERE id = {run_id}" in err.value.fix
    assert fetch(store, 4)[1]["job"]["name"] == "d"
    edit(store, "UPDATE runs SET created_at = 'yesterday' WHERE id = 1")
    with pytest.raises(SpecError, match=r"Entry 1 .* its created_at does not read back"):
        list_runs(store)


def test_a_zlib_bomb_stops_at_the_size_recorded_with_the_entry(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload("bomb"))
    inflater = zlib.compressobj(9)
    bomb = inflater.compress(b"0" * (64 << 20)) + inflater.flush()  # 64 MiB of zeros in ~64 kB
    assert len(bomb) < (1 << 20)
    edit(store, "UPDATE payloads SET body = ? WHERE run_id = 1", bomb)
    with pytest.raises(SpecError, match=r"inflates past the .* bytes recorded with it"):
        fetch(store, 1)
    edit(store, "UPDATE runs SET payload_bytes = ? WHERE id = 1", MAX_RESULT_BYTES + 1)
    with pytest.raises(SpecError, match="outside 0 to"):
        fetch(store, 1)


@pytest.mark.parametrize("path", ["x" * 300 + "/s.sqlite", "~no-such-user-here/s.sqlite"])
def test_a_store_path_the_system_refuses_is_a_clear_error(tmp_path: Path, path: str) -> None:
    with pytest.raises(SpecError) as err:
        list_runs(default_store_path({"GPUSCOUT_STORE": str(tmp_path / path) if path[0] != "~" else path}))
    assert "GPUSCOUT_STORE" in err.value.render() and "Traceback" not in err.value.render()
    with pytest.raises(SpecError):
        record(store_path_from(str(tmp_path / path) if path[0] != "~" else path, "--store"), "pick",
               pick_payload("x"))


def test_the_cli_says_what_is_wrong_with_a_huge_id_or_limit(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload("only"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path]), "GPUSCOUT_STORE": str(store)}
    for args in (["results", "show", str(2**63)], ["results", "export", str(2**64), "-o", str(tmp_path / "x.json")]):
        done = subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "ids are whole numbers from 1 to" in done.stderr and "damaged" not in done.stderr
    listed = subprocess.run([sys.executable, "-m", "gpuscout", "results", "list", "--limit", str(2**63), "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0 and '"only"' in listed.stdout


def test_a_hot_journal_this_process_may_not_roll_back_says_how_to_recover(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A write-protected store (simulated: root ignores file modes) opens read-only, which cannot roll back."""
    store = tmp_path / "s.sqlite"
    record(store, "pick", pick_payload("kept"))
    kill_a_writer_inside_its_transaction(store)
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect",
                        lambda target, **kw: connect(str(target).replace("mode=rw", "mode=ro"), **kw))
    with pytest.raises(SpecError, match="holds an unfinished write") as err:
        list_runs(store)
    assert "as the user that owns the store" in err.value.fix
    monkeypatch.undo()
    assert list_runs(store)[1] == 1  # the owner's next read rolls it back


def test_text_that_is_not_utf8_reads_with_replacements_and_a_raw_byte_schema_is_named_damaged(tmp_path: Path) -> None:
    """Found by the store_file fuzz surface: a hand-edited cell in another encoding (Latin-1 'café') used to
    refuse the whole store, and a schema damaged with raw bytes raised UnicodeDecodeError from SQLite's own
    error text."""
    store = tmp_path / "s.sqlite"
    for name in ("a", "b"):
        record(store, "pick", pick_payload(name))
    edit(store, "UPDATE runs SET job = CAST(X'636166e9' AS TEXT) WHERE id = 1")
    runs, total = list_runs(store)
    assert total == 2 and {run.job for run in runs} == {"caf\ufffd", "b"}
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA writable_schema = ON")
        db.execute("UPDATE sqlite_master SET sql = CAST(X'435245415445205441424c452072756e7320a0' AS TEXT) "
                   "WHERE name = 'runs'")
    with pytest.raises(SpecError, match="is damaged") as err:
        list_runs(store)
    assert ".recover" in err.value.fix
