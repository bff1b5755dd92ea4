"""Fuzzing `-o`: every kind of output path, what `write_atomic` (and `check_output_path`) must do with it.

A path that names a regular file, or a new file in a folder that exists or can be created, is
written whole; anything else (empty, a folder, `/`, a symlink, a FIFO, a device node, a name over
255 bytes, a parent that is a file) is refused with a GpuscoutError and left exactly as it was.
A write never leaves `.NAME.*.tmp` files behind, also when it is interrupted, and it removes
the ones an earlier, killed write left.
"""

from __future__ import annotations

import os
import random
import stat
import time
from pathlib import Path
from unittest import mock

from gpuscout import outfile
from gpuscout.errors import GpuscoutError

from .corpus import make_device
from .invariants import MAX_MESSAGE
from .targets import Hang, Verdict, time_limit

KINDS = ("new", "existing", "missing_parent", "unicode", "name_255", "stale", "interrupted", "parent_is_file",
         "symlink_file", "symlink_dangling", "symlink_dir", "fifo", "device", "dir", "root", "empty", "dot",
         "long_name")
ACCEPTED = {"new", "existing", "missing_parent", "unicode", "name_255", "stale", "interrupted"}


def _setup(kind: str, folder: Path) -> Path:
    """Create what `kind` needs under `folder` and return the output path to pass."""
    (folder / "real.json").write_text("keep me")
    match kind:
        case "new" | "interrupted":
            return folder / "out.json"
        case "existing":
            (folder / "out.json").write_text("old")
            return folder / "out.json"
        case "missing_parent":
            return folder / "a" / "b" / "out.json"
        case "unicode":
            return folder / "résultat ✓.json"
        case "name_255":
            return folder / ("n" * 250 + ".json")
        case "stale":
            (folder / ".out.json.k1ll3d00.tmp").write_text("half")
            return folder / "out.json"
        case "parent_is_file":
            return folder / "real.json" / "out.json"
        case "symlink_file":
            (folder / "out.json").symlink_to(folder / "real.json")
        case "symlink_dangling":
            (folder / "out.json").symlink_to(folder / "nowhere.json")
        case "symlink_dir":
            (folder / "sub").mkdir()
            (folder / "out.json").symlink_to(folder / "sub")
        case "fifo":
            os.mkfifo(folder / "out.json")
        case "device":
            make_device(folder / "out.json")
        case "dir":
            (folder / "out.json").mkdir()
        case "root":
            return Path("/")
        case "empty":
            return Path("")
        case "dot":
            return Path(".")
        case "long_name":
            return folder / ("x" * 300 + ".json")
    return folder / "out.json"


def _snapshot(path: Path) -> tuple[int, str] | None:
    """The kind of file at `path` (not following links) and a link's target, to see it left alone."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
    return stat.S_IFMT(info.st_mode), target


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*.tmp")]


def judge_output(kind: str, folder: Path, *, hang_s: float = 5.0) -> Verdict:
    """Run `check_output_path` (when this gpuscout has it) and `write_atomic` on one kind of path."""
    path = _setup(kind, folder)
    before = _snapshot(path) if kind not in ("root", "empty", "dot") else None
    accepted = kind in ACCEPTED
    start = time.perf_counter()
    checker = getattr(outfile, "check_output_path", None)
    try:
        with time_limit(hang_s):
            if checker is not None:
                verdict = _check_agrees(checker, path, accepted)
                if verdict is not None:
                    return verdict
            if kind == "interrupted":
                return _interrupted(path, folder)
            outfile.write_atomic(path, '{"fuzz": true}')
    except Hang as exc:
        return Verdict("hang", str(exc))
    except GpuscoutError as exc:
        if accepted:
            return Verdict("nonsense", f"refused a valid output path ({kind}): {exc.what}")
        after = _snapshot(path) if before is not None else None
        if after != before or (folder / "real.json").read_text() != "keep me":
            return Verdict("nonsense", f"{kind}: refused, but the file was changed anyway")
        if len(str(exc)) > MAX_MESSAGE:
            return Verdict("nonsense", "an over-long error message")
        str(exc).encode("utf-8", "surrogateescape")
        return Verdict("error", exc.what[:120], time.perf_counter() - start)
    except Exception as exc:
        return Verdict("crash", f"{kind}: {type(exc).__name__}: {str(exc)[:160]}")
    seconds = time.perf_counter() - start
    if not accepted:
        return Verdict("nonsense", f"{kind}: written over (was {before}, now {_snapshot(path)})", seconds)
    if path.read_text() != '{"fuzz": true}' or not stat.S_ISREG(os.lstat(path).st_mode):
        return Verdict("nonsense", f"{kind}: the written file is not the text", seconds)
    if _leftovers(folder):
        return Verdict("nonsense", f"{kind}: temporary files left: {_leftovers(folder)}", seconds)
    return Verdict("parsed", "", seconds)


def _check_agrees(checker: object, path: Path, accepted: bool) -> Verdict | None:
    try:
        checker(path, "result file")  # type: ignore[operator]
    except GpuscoutError as exc:
        if accepted:
            return Verdict("nonsense", f"check_output_path refused a valid path: {exc.what}")
        raise
    if not accepted:
        return Verdict("nonsense", f"check_output_path accepted {str(path)[:80]!r}")
    return None


def _interrupted(path: Path, folder: Path) -> Verdict:
    """Ctrl-C in the middle of a write: the old file stays and no temporary file is left."""
    path.write_text("old")
    with mock.patch("os.fsync", side_effect=KeyboardInterrupt):
        try:
            outfile.write_atomic(path, '{"fuzz": true}')
        except KeyboardInterrupt:
            pass
        else:
            return Verdict("nonsense", "the interrupt was swallowed")
    if path.read_text() != "old" or _leftovers(folder):
        return Verdict("nonsense", f"interrupted write left {_leftovers(folder)} / changed the file")
    path.unlink()
    return Verdict("parsed")


def random_kind(rng: random.Random) -> str:
    return rng.choice(KINDS)
