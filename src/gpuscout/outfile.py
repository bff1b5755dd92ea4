"""Output files (`-o`), checked before any work starts and written so nothing is ever half-written.

`check_output_path` refuses, before any work starts, an output path that is not a regular file or
a new file in a writable folder (a folder, a symlink, a FIFO, a device, a name over 255 bytes);
`write_atomic` writes through a temporary file in the same folder (fsync, then `os.replace`),
removes its temporary file on every way out and the ones an earlier, killed write left behind, and
holds stop signals back until the file is whole (docs/design.md §4.10).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from gpuscout.errors import SpecError
from gpuscout.interrupts import deferred_signals
from gpuscout.userfile import MAX_NAME_BYTES, file_kind, shown

_TEMP_SUFFIX = ".tmp"
_TEMP_NAME_BYTES = 200  # keeps `.NAME.XXXXXXXX.tmp` within MAX_NAME_BYTES

def _refuse_output(path: Path, what: str, problem: str, why: str,
                   fix: str = "Pass a file path in a folder you can write to, e.g. -o results/run.json.") -> SpecError:
    return SpecError(f"Cannot write the {what} to {shown(str(path), 240)}: {problem}.", why, fix)


def _check_target(path: Path, what: str) -> bool:
    """Whether a regular file is at `path` (False: nothing is); anything else is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise _refuse_output(path, what, "a folder on the path is a file",
                             "Only a folder can hold the output file.") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _refuse_output(path, what, "the path cannot be checked", f"The operating system said: {why}.") from None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse_output(path, what, "it is a symbolic link",
                             "gpuscout replaces its output file atomically, which would replace the link itself "
                             "rather than write where it points; it refuses rather than guess.",
                             "Pass the link's target path, or a new file name.")
    if not stat.S_ISREG(info.st_mode):
        raise _refuse_output(path, what, f"it is {file_kind(info.st_mode)}",
                             "gpuscout writes only regular files: writing over a folder, a pipe or a device "
                             "would destroy it or never finish.")
    return True


def _writable_folder(path: Path, what: str) -> None:
    """The nearest folder that exists above `path` must be a writable folder (the rest is created)."""
    folder = path.parent
    while True:
        try:
            info = os.stat(folder)
            break
        except FileNotFoundError:
            if folder.parent == folder:
                break
            folder = folder.parent
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _refuse_output(path, what, "its folder cannot be checked", f"The operating system said: {why}.") \
                from None
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse_output(path, what, f"{shown(str(folder))} is a file, not a folder",
                             "Only a folder can hold the output file.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refuse_output(path, what, f"the folder {shown(str(folder))} is not writable",
                             "This user may not create files there.")


def check_output_path(path: Path, what: str) -> Path:
    """`path` if a `what` can be written there; else a SpecError. Call it before any work starts.

    Accepted: a regular file (replaced) or a new file in a writable folder (a missing folder is
    created by `write_atomic` when its nearest existing ancestor is a writable folder). Refused:
    an empty path, a folder (`/`, `.`), a symbolic link, a FIFO, device or socket, a name longer
    than 255 bytes, a parent that is a file, a folder this user cannot write.
    """
    text = os.fspath(path)
    if not text.strip():
        raise _refuse_output(path, what, "the path is empty", "An output needs a file name.")
    if path.name in ("", ".", "..") or text.endswith(os.sep):
        raise _refuse_output(path, what, "it names a folder", "The output is a file inside a folder.",
                             f"Add a file name, e.g. {os.path.join(text, 'result.json')}.")
    if len(os.fsencode(path.name)) > MAX_NAME_BYTES:
        raise _refuse_output(path, what, f"the file name is longer than {MAX_NAME_BYTES} bytes",
                             f"File systems refuse names past {MAX_NAME_BYTES} bytes (NAME_MAX).",
                             "Use a shorter file name.")
    _check_target(path, what)
    _writable_folder(path, what)
    return path


def _temp_prefix(name: str) -> str:
    """`.NAME.`; a long name is cut (with a hash of the whole) so the temporary name stays legal."""
    if len(os.fsencode(name)) <= _TEMP_NAME_BYTES:
        return f".{name}."
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:8]
    cut = os.fsdecode(os.fsencode(name)[: _TEMP_NAME_BYTES - 10])
    return f".{cut}~{digest}."


def clean_stale_temps(path: Path, *, keep: str = "") -> int:
    """Remove the `.NAME.XXXXXXXX.tmp` files an earlier, killed write of `path` left; return how many."""
    pattern = re.compile(re.escape(_temp_prefix(path.name)) + r"[a-z0-9_]{8}" + re.escape(_TEMP_SUFFIX))
    removed = 0
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return 0
    for entry in entries:
        if entry.name != keep and pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


def write_atomic(path: Path, text: str, *, what: str = "output file") -> None:
    """Write `text` so that readers see the old file or the whole new one, never a part.

    The target must pass `check_output_path`. A temporary file in the same folder is written,
    fsync'd and renamed over `path`; it is removed on every way out. A stop signal (Ctrl-C, SIGTERM,
    SIGHUP) that arrives meanwhile is held back until the file is written whole, then acts
    (`interrupts.deferred_signals`): a second Ctrl-C never costs the result being saved.
    """
    check_output_path(path, what)
    with deferred_signals():
        _replace(path, text, what)
    clean_stale_temps(path)


def _replace(path: Path, text: str, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=_TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise _refuse_output(path, what, "the file cannot be created",
                             f"The operating system said: {exc.strerror or exc}.") from None
    try:
        _fill(fd, path, text)
        _check_target(path, what)  # a symlink or FIFO put there meanwhile is not written over
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _refuse_output(path, what, "writing failed",
                                 f"The operating system said: {exc.strerror or exc}.",
                                 "Free some disk space or choose another folder, then run again.") from None
        raise
    _sync_folder(path.parent)


def _fill(fd: int, path: Path, text: str) -> None:
    """Write and fsync the temporary file; it keeps the mode of the file it replaces (else 0644)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = 0o644
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _sync_folder(folder: Path) -> None:
    """fsync the folder so the rename itself survives a power cut (best effort: not every OS allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
