"""The results store: every bench, load, doctor and pick run, kept in one local SQLite file.

One entry point writes: `record(path, kind, payload)` stores the run's full JSON (what `--json`
prints; for bench and load also what `-o` writes) with its kind, job, machine and time. Reads never
create the file. Each write is one SQLite transaction (`BEGIN IMMEDIATE` … `COMMIT`), so a run
killed mid-write leaves the store as it was before; a second gpuscout writing at the same time
waits for the lock (up to `BUSY_TIMEOUT_S`).

Reads open the file read-write without creating it (SQLite opens it read-only by itself where the
file is write-protected): a writer killed inside its transaction leaves a hot journal, and SQLite
rolls it back on the next open that may write, as it would for a writer, so the store reads as it
was before that run. A store that cannot be read (damaged, write-protected with a hot journal, a
path the system refuses) is one three-part error naming the file and how to move it aside; a
command that only records a run then warns and keeps its output (cli/results.py).

The file is refused, never changed, when it is not a gpuscout store, when a newer gpuscout wrote
it (`PRAGMA user_version` above `STORE_VERSION`), or when SQLite finds it damaged. Payloads are
zlib-compressed JSON in a table of their own (so `results list` never reads them) with the SHA-256
of the JSON beside the entry, which `fetch` checks; a payload is inflated no further than the size
recorded with it (at most `MAX_RESULT_BYTES`), so an edited row cannot fill the memory. Layout and
reasons: docs/results.md §2.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import zlib
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import ValidationError

from gpuscout.errors import SpecError
from gpuscout.results.entries import Entry, describe
from gpuscout.userfile import MAX_RESULT_BYTES, decode_user_text, parse_user_json, printable, shown

if TYPE_CHECKING:
    from gpuscout.results.schema import BenchResult

STORE_VERSION = 1  # PRAGMA user_version; a store with a higher one was written by a newer gpuscout
APPLICATION_ID = 0x67737472  # PRAGMA application_id: "gstr", marks the file as a gpuscout store
BUSY_TIMEOUT_S = 30.0  # another gpuscout holding the write lock: a write takes milliseconds
FILE_NAME = "results.sqlite"
_RUN_ID = re.compile(r"[0-9]{1,18}")  # an id fits SQLite's 64-bit integer
MAX_RUN_ID = 2**63 - 1  # SQLite's largest INTEGER (https://www.sqlite.org/datatype3.html §2)
_SQLITE_HEADER = b"SQLite format 3\x00"  # https://www.sqlite.org/fileformat.html §1.3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    result_kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    job TEXT NOT NULL,
    machine TEXT NOT NULL,
    name TEXT NOT NULL,
    summary TEXT NOT NULL,
    complete INTEGER NOT NULL,
    gpuscout_version TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL,
    payload_sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS payloads (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id),
    encoding TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(created_at);
"""
_COLUMNS = ("id, kind, result_kind, created_at, recorded_at, job, machine, name, summary, complete, "
            "gpuscout_version, payload_bytes")


class StoredRun(Entry):
    """One entry of the store, without its payload: the index line (`entries.Entry`), its id and size.
    `kind` is the command that ran (bench, load, pick, doctor), `result_kind` the result's own kind
    ("" for pick), `created_at` when the run was made and `recorded_at` when it was stored."""

    id: int
    payload_bytes: int


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """$GPUSCOUT_STORE, else $XDG_DATA_HOME/gpuscout/results.sqlite, else ~/.local/share/gpuscout/….

    The XDG Base Directory spec says a relative XDG_DATA_HOME is invalid and must be ignored."""
    env = os.environ if environ is None else environ
    if env.get("GPUSCOUT_STORE"):
        return store_path_from(env["GPUSCOUT_STORE"], "GPUSCOUT_STORE")
    base = env.get("XDG_DATA_HOME", "")
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return folder / "gpuscout" / FILE_NAME


def store_path_from(text: str, where: str) -> Path:
    """The store path given as `where` (--store, GPUSCOUT_STORE), with ~ expanded: a clear error when
    it cannot be (a ~user that does not exist, no home folder)."""
    try:
        return Path(text).expanduser()
    except RuntimeError as exc:  # pathlib: "Could not determine home directory."
        raise SpecError(f"{where} {shown(text, 200)} cannot be used as the results store path: {exc}",
                        "A path starting with ~ names a home folder, and this one is not known here.",
                        f"Give {where} an absolute path, or pass --no-store.") from None


def _exists(path: Path) -> bool:
    """Whether something is at `path`; a path the system refuses outright (a name too long, a loop of
    links, no permission to look) is a clear error rather than a traceback."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise SpecError(f"Cannot use {shown(str(path), 200)} as the results store: {exc.strerror or exc}.",
                        "gpuscout keeps every run in that one SQLite file (--store, else GPUSCOUT_STORE, else "
                        "$XDG_DATA_HOME/gpuscout/results.sqlite).",
                        "Pass --store FILE with a path this system accepts (or fix GPUSCOUT_STORE), or --no-store."
                        ) from None
    except ValueError:  # a NUL byte in the path
        raise SpecError(f"The results store path {shown(str(path), 200)} holds a NUL byte.",
                        "No file name can hold one.", "Pass --store FILE with another path, or --no-store.") from None
    return True


# ---------------------------------------------------------------- writing --------------------

def record(path: Path, kind: str, payload: Mapping[str, Any], *, now: datetime | None = None) -> StoredRun:
    """Store one run (its full JSON payload) in one transaction, creating the store when needed."""
    entry = describe(kind, payload, now=now)
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=str).encode()
    body = zlib.compress(data, 6)
    with _open(path, create=True) as db, _transaction(db):
        cursor = db.execute(
            "INSERT INTO runs (kind, result_kind, created_at, recorded_at, job, machine, name, summary, complete, "
            "gpuscout_version, payload_bytes, payload_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*_entry_row(entry), len(data), hashlib.sha256(data).hexdigest()))
        run_id = int(cursor.lastrowid or 0)
        db.execute("INSERT INTO payloads (run_id, encoding, body) VALUES (?, 'zlib+json', ?)", (run_id, body))
    return _stored(run_id, entry, len(data))


def _entry_row(e: Entry) -> tuple[Any, ...]:
    return (e.kind, e.result_kind, _iso(e.created_at), _iso(e.recorded_at), e.job, e.machine, e.name, e.summary,
            int(e.complete), e.gpuscout_version)


def _stored(run_id: int, e: Entry, payload_bytes: int) -> StoredRun:
    return StoredRun(id=run_id, payload_bytes=payload_bytes, **e.model_dump())


# ---------------------------------------------------------------- reading --------------------

def list_runs(path: Path, *, kind: str | None = None, job: str | None = None, since: datetime | None = None,
              limit: int | None = None) -> tuple[list[StoredRun], int]:
    """The entries that match in the order they were made (the newest `limit` when given), and how many matched."""
    if not _exists(path):
        return [], 0
    where, args = _filters(kind, job, since)
    with _open(path, create=False) as db:
        total = int(db.execute(f"SELECT count(*) FROM runs {where}", args).fetchone()[0])
        # A limit past SQLite's largest integer is no limit: no store holds that many runs.
        tail, bound = (" LIMIT ?", [min(int(limit), MAX_RUN_ID)]) if limit and limit > 0 else ("", [])
        rows = db.execute(f"SELECT {_COLUMNS} FROM runs {where} ORDER BY created_at DESC, id DESC{tail}",
                          [*args, *bound]).fetchall()
    return [_row(path, r) for r in reversed(rows)], total


def _filters(kind: str | None, job: str | None, since: datetime | None) -> tuple[str, list[Any]]:
    clauses, args = [], []
    if kind:
        clauses.append("(kind = ? OR result_kind = ?)")
        args += [kind.lower(), kind.lower()]
    if job:
        clauses.append("(instr(lower(job), lower(?)) > 0 OR instr(lower(name), lower(?)) > 0)")
        args += [job, job]
    if since is not None:
        clauses.append("created_at >= ?")
        args.append(_iso(since))
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


def kinds_stored(path: Path) -> set[str]:
    """Every kind and result kind in the store (for did-you-mean on `--kind`)."""
    if not _exists(path):
        return set()
    with _open(path, create=False) as db:
        rows = db.execute("SELECT DISTINCT kind, result_kind FROM runs").fetchall()
    return {k for row in rows for k in row if k}


def fetch(path: Path, run_id: int) -> tuple[StoredRun, dict[str, Any]]:
    """One entry and its payload, checked against the size and SHA-256 stored with it."""
    if not 1 <= run_id <= MAX_RUN_ID:
        raise _no_run(path, run_id, f"ids are whole numbers from 1 to {MAX_RUN_ID:,} (2^63 − 1)")
    if not _exists(path):
        raise _no_run(path, run_id, "there is no store there yet")
    with _open(path, create=False) as db:
        row = db.execute(f"SELECT {_COLUMNS}, payload_sha256 FROM runs WHERE id = ?", (run_id,)).fetchone()
        body = db.execute("SELECT encoding, body FROM payloads WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise _no_run(path, run_id, "no entry has that id")
    entry = _row(path, row[:-1])
    if body is None or body[0] != "zlib+json" or not isinstance(body[1], bytes):
        raise _damaged_entry(path, run_id, "it has no readable payload")
    text = _inflate(path, run_id, body[1], entry.payload_bytes)
    if hashlib.sha256(text).hexdigest() != row[-1]:
        raise _damaged_entry(path, run_id, "its payload does not match the SHA-256 stored with it")
    fix = "Export another run, or delete this entry (see below)."
    try:
        payload = parse_user_json(decode_user_text(text, f"entry {run_id}", fix), f"entry {run_id}", fix)
    except SpecError as exc:
        raise _damaged_entry(path, run_id, f"its payload is not gpuscout's JSON ({exc.what.rstrip('.')})") from None
    if not isinstance(payload, dict):
        raise _damaged_entry(path, run_id, "its payload is not a JSON object")
    return entry, payload


def _inflate(path: Path, run_id: int, body: bytes, size: int) -> bytes:
    """The payload, decompressed no further than the size recorded with it (a zlib bomb, or an edited
    row, stops at that size, and never past MAX_RESULT_BYTES)."""
    if not 0 <= size <= MAX_RESULT_BYTES:
        raise _damaged_entry(path, run_id, f"its recorded payload size, {size:,} bytes, is outside 0 to "
                             f"{MAX_RESULT_BYTES:,}")
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(body, size + 1)
    except zlib.error:
        raise _damaged_entry(path, run_id, "its payload does not decompress") from None
    if len(text) > size or inflater.unconsumed_tail:
        raise _damaged_entry(path, run_id, f"its payload inflates past the {size:,} bytes recorded with it")
    if not inflater.eof:
        raise _damaged_entry(path, run_id, "its payload is cut off")
    return text


def fetch_result(path: Path, run_id: int) -> BenchResult:
    """A stored bench, load or doctor run as the result file `-o` would have written (checked the same way)."""
    from gpuscout.results.schema import BenchResult  # numpy and the whole schema: not needed to list runs
    from gpuscout.results.store import parse_result

    entry, payload = fetch(path, run_id)
    if "cases" not in payload or "schema_version" not in payload:
        raise SpecError(f"Stored run {run_id} is a {entry.kind} run, not a measurement.",
                        "compare and calibrate read measured results: bench, load and doctor runs.",
                        "Pass the id of a bench or load run (`gpuscout results list --kind bench`).")
    # The payload is what --json printed: the result plus the command's extras (estimate, costs, search).
    data = {k: v for k, v in payload.items() if k in BenchResult.model_fields}
    return parse_result(data, f"stored run {run_id} in {path}")


def run_id_of(ref: str | Path) -> int | None:
    """The store id a command-line argument names ("12"), or None: an existing file always wins."""
    text = str(ref).strip()
    if not _RUN_ID.fullmatch(text) or Path(text).exists():
        return None
    return int(text)


def _row(path: Path, r: tuple[Any, ...]) -> StoredRun:
    names = [c.strip() for c in _COLUMNS.split(",")]
    values = dict(zip(names, r, strict=True))
    try:
        return StoredRun.model_validate({**values, "complete": bool(values["complete"])})
    except ValidationError as exc:  # an edited row: name the entry, so the rest of the store stays usable
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _damaged_entry(path, values.get("id"), f"its {printable(where, 40)} does not read back "
                             f"({printable(first['msg'], 120)})") from None


def _id_text(run_id: object) -> str:
    return str(run_id) if isinstance(run_id, int) and abs(run_id) <= 10**30 else shown(run_id, 40)


def _no_run(path: Path, run_id: int, why: str) -> SpecError:
    return SpecError(f"No stored run {_id_text(run_id)} in {shown(str(path), 200)}: {why}.",
                     "Ids are those `gpuscout results list` shows for this store (--store or GPUSCOUT_STORE "
                     "choose another).",
                     "Run `gpuscout results list` to see the ids, or pass a result file instead.")


# ---------------------------------------------------------------- the file --------------------

@contextmanager
def _open(path: Path, *, create: bool) -> Iterator[sqlite3.Connection]:
    """A connection to a checked store; every SQLite failure becomes a three-part error naming the file."""
    _check_file(path, create=create)
    try:
        with closing(_connect(path, create=create)) as db:
            _check_schema(path, db, create=create)
            yield db
    except sqlite3.DatabaseError as exc:
        raise _sqlite_error(path, exc) from None
    except UnicodeDecodeError:
        # Python decodes SQLite's own error text; a damaged schema puts the file's raw bytes into it.
        raise _damaged(path, "SQLite reports its schema as malformed (with bytes that are not text)") from None


def _connect(path: Path, *, create: bool) -> sqlite3.Connection:
    db = _connect_file(path, create=create)
    # A hand-edited or damaged TEXT cell need not be UTF-8; Python's default decoding would raise from inside
    # any query (even the schema check), refusing the whole store. Replaced characters keep it readable.
    db.text_factory = _text_of
    return db


def _text_of(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _connect_file(path: Path, *, create: bool) -> sqlite3.Connection:
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(f"Cannot create the folder of the results store {shown(str(path), 200)}: "
                            f"{exc.strerror or exc}.", "gpuscout records every bench, load, doctor and pick run there.",
                            "Pass --store FILE in a folder you can write to, set GPUSCOUT_STORE, or pass --no-store."
                            ) from None
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    # mode=rw: a read never creates the file, and SQLite may roll back the hot journal a killed writer
    # left (a read-only connection cannot, and refuses every read); it opens a write-protected file
    # read-only by itself (https://www.sqlite.org/c3ref/open.html, SQLITE_OPEN_READWRITE).
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def _check_file(path: Path, *, create: bool) -> None:
    """The path is a regular file that starts like an SQLite database (or, to write, is not there yet)."""
    if not _exists(path):
        if not create:
            raise _no_run(path, 0, "there is no store there yet")
        return
    if not path.is_file():
        raise SpecError(f"The results store {shown(str(path), 200)} is not a file.",
                        "The store is one SQLite file.", "Pass --store FILE with a file path, or --no-store.")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise SpecError(f"Cannot read the results store {shown(str(path), 200)}: {exc.strerror}.",
                        "gpuscout needs to read and write its store.",
                        "Fix its permissions, or pass --store FILE elsewhere, or --no-store.") from None
    if head and head != _SQLITE_HEADER:
        raise _not_a_store(path, "it does not start with SQLite's header")


def _check_schema(path: Path, db: sqlite3.Connection, *, create: bool) -> None:
    """A gpuscout store this version can read; an empty file or a new one is set up (in a transaction)."""
    app_id = int(db.execute("PRAGMA application_id").fetchone()[0])
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id == 0 and not tables:
        if create:
            _create(db)
        return
    if app_id != APPLICATION_ID:
        raise _not_a_store(path, "its SQLite application id is not gpuscout's")
    if version > STORE_VERSION:
        raise SpecError(
            f"The results store {shown(str(path), 200)} was written by a newer gpuscout (store version {version}; "
            f"this gpuscout reads version {STORE_VERSION}).",
            "A newer gpuscout may have changed the tables; reading or writing them with this one could "
            "misread or damage your results, so the file is left as it is.",
            "Upgrade gpuscout (pip install -U gpuscout), or pass --store FILE for another store, or --no-store.")


def _create(db: sqlite3.Connection) -> None:
    """The tables and marks, in one transaction; IF NOT EXISTS: another gpuscout may have just made them."""
    with _transaction(db):
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {STORE_VERSION}")


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (take the write lock first) … COMMIT; anything raised, Ctrl-C too, rolls back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _not_a_store(path: Path, why: str) -> SpecError:
    return SpecError(f"{shown(str(path), 200)} is not a gpuscout results store: {why}.",
                     "gpuscout writes its store only into a file it created, so it will not touch this one.",
                     "Pass --store FILE with another path (or set GPUSCOUT_STORE), or --no-store; move the file "
                     "aside if it should not be there.")


def _damaged_entry(path: Path, run_id: object, detail: str) -> SpecError:
    """One entry that does not read back: the others stay readable, so the fix removes just that one."""
    shown_path, ident = shown(str(path), 120), _id_text(run_id)
    return SpecError(
        f"Entry {ident} of the results store {shown(str(path), 200)} is damaged: {detail}.",
        "gpuscout never writes such an entry: the file was edited or damaged; the other entries are unaffected.",
        f"Keep a copy of the file, then delete the entry: sqlite3 {shown_path} \"DELETE FROM payloads WHERE "
        f"run_id = {ident}; DELETE FROM runs WHERE id = {ident};\" (or move the file aside: a new store starts "
        "on the next run).")


def _damaged(path: Path, detail: str) -> SpecError:
    return SpecError(
        f"The results store {shown(str(path), 200)} is damaged: {detail}.",
        "SQLite could not read it as written; gpuscout leaves the file exactly as it is, so nothing more is lost.",
        f"Keep a copy, try `sqlite3 {shown(str(path), 120)} .recover` to save what is readable, then move the file "
        "aside (a new store starts on the next run); meanwhile pass --store FILE elsewhere or --no-store.")


def _sqlite_error(path: Path, exc: sqlite3.DatabaseError) -> SpecError:
    message = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in message:
        return SpecError(f"The results store {shown(str(path), 200)} is locked: {message}.",
                         f"Another gpuscout held its write lock for more than {BUSY_TIMEOUT_S:g} s.",
                         "Wait for the other run to finish and retry, or pass --no-store.")
    journal = path.with_name(path.name + "-journal")
    if "readonly" in message and _exists(journal):
        return SpecError(f"The results store {shown(str(path), 200)} holds an unfinished write "
                         f"({shown(journal.name, 80)}), and this process may not change the file to undo it.",
                         "A gpuscout was stopped while it wrote; SQLite rolls that write back the next time the "
                         "store is opened by a process that may write the file and its folder.",
                         "Run any `gpuscout results list` as the user that owns the store (the store then reads as "
                         "before that run), or copy the file and its -journal together elsewhere and pass --store "
                         "COPY; --no-store meanwhile.")
    if isinstance(exc, sqlite3.OperationalError) and ("readonly" in message or "unable to open" in message):
        return SpecError(f"Cannot write the results store {shown(str(path), 200)}: {message}.",
                         "gpuscout records every bench, load, doctor and pick run there.",
                         "Fix the folder's permissions, or pass --store FILE elsewhere, or --no-store.")
    return _damaged(path, f"SQLite says {message!r}")


def _iso(when: datetime) -> str:
    """UTC, to the microsecond, one fixed width: text order is time order."""
    aware = when if when.tzinfo else when.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="microseconds")
