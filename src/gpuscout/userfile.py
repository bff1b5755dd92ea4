"""The user's files, checked at the boundary: every read of a spec, sheet, config, dataset or result.

Reading (docs/design.md §4.10 lists the limits):

* only regular files: a FIFO, a device, a socket or a folder is refused from `os.stat` before it is
  opened, and the file is opened with O_NONBLOCK, so a FIFO swapped in between cannot block;
* a size cap per kind of file, read in bounded chunks, so /dev/zero or a runaway file cannot
  exhaust memory;
* UTF-8 only; an invalid byte is reported by line, never echoed;
* TOML and JSON nested at most `MAX_NESTING` levels, checked by a linear scan of the brackets
  before the recursive parser runs; JSON numbers finite (no NaN, Infinity or 1e999) and strings
  free of unpaired surrogates (they cannot be printed or sent as UTF-8).

Writing goes through `outfile`.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import reprlib
import stat
import tomllib
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from gpuscout.errors import SpecError

if TYPE_CHECKING:
    from pydantic import ValidationError

MIB = 2**20
# config.json, safetensors indexes and headers: JSON, parsed in C (tens of MB/s). Real ones are a
# few kilobytes to a few hundred (a DeepSeek-V3 index is ~1 MB); 16 MiB is far past any.
MAX_SPEC_BYTES = 16 * MIB
# TOML is parsed in pure Python (tomllib) at ~1 MB/s, so its caps are tighter: a job spec is ~1 KB,
# and 4 MiB of price sheet is ~4,500 fully described offers.
MAX_JOB_BYTES = 1 * MIB
MAX_SHEET_BYTES = 4 * MIB
# A SkyPilot vms.csv holds every instance type in every zone of a cloud: tens of MB at most.
MAX_CATALOG_BYTES = 256 * MIB
# A load test keeps every chunk gap as a raw sample: 10,000 requests x 256 tokens is ~70 MB.
MAX_RESULT_BYTES = 512 * MIB
# Prompt and training-text datasets (JSONL or plain text).
MAX_DATASET_BYTES = 1024 * MIB
# One element of a large JSON list read piece by piece (a ShareGPT conversation is kilobytes).
MAX_ITEM_BYTES = 16 * MIB
# No file gpuscout reads nests more than six levels; Python's parsers recurse once per level.
MAX_NESTING = 64
# The longest file name Linux, macOS and Windows file systems accept (NAME_MAX), in bytes.
MAX_NAME_BYTES = 255

_CHUNK_BYTES = MIB


# --- reading ------------------------------------------------------------------------------------


def file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _not_regular(path: Path, what: str, mode: int) -> SpecError:
    return SpecError(
        f"Cannot read the {what} {path}: it is {file_kind(mode)}, not a file.",
        "gpuscout reads only regular files: a pipe or a device may block or never end, and a folder "
        "holds no document.",
        f"Pass the path of the {what} file itself.",
    )


def _os_error(path: Path, what: str, fix: str, exc: OSError | ValueError) -> SpecError:
    if isinstance(exc, FileNotFoundError):
        why = "There is no file at that path."
    elif isinstance(exc, OSError):
        why = f"The operating system refused: {exc.strerror or exc}."
    else:  # ValueError: a NUL byte in the path
        why = "The path contains a NUL character."
    return SpecError(f"Cannot read the {what} {path}.", why, fix)


def _check_regular(path: Path, what: str, fix: str) -> os.stat_result:
    """The file's status, after refusing anything but a regular file (symlinks are followed)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        raise _os_error(path, what, fix, exc) from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, what, info.st_mode)
    return info


@contextmanager
def open_user_file(path: Path, what: str, fix: str) -> Iterator[tuple[BinaryIO, int]]:
    """An unbuffered binary handle on a regular file and its size in bytes; anything else is a SpecError.

    O_NONBLOCK: should a FIFO replace the file between the stat and the open, the open returns
    at once instead of waiting for a writer; the fstat that follows then refuses it.
    """
    _check_regular(path, what, fix)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        raise _os_error(path, what, fix, exc) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, what, info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb", buffering=0) as handle:
        yield handle, info.st_size


def _too_big(path: Path, what: str, max_bytes: int) -> SpecError:
    return SpecError(
        f"The {what} {path} is larger than {max_bytes // MIB:,} MiB.",
        f"gpuscout reads at most {max_bytes // MIB:,} MiB of a {what} (docs/design.md §4.10), so a wrong "
        "path or a runaway file cannot exhaust memory.",
        f"Check that this is the {what} you meant; split or trim it if it really is that large.",
    )


def read_bounded(handle: BinaryIO, limit: int) -> bytes:
    """Up to `limit` bytes from `handle`, read in chunks of at most 1 MiB (fewer at end of file)."""
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = handle.read(min(_CHUNK_BYTES, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_user_bytes(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else is a SpecError naming `what`."""
    with open_user_file(path, what, fix) as (handle, size):
        if size > max_bytes:
            raise _too_big(path, what, max_bytes)
        try:
            data = read_bounded(handle, max_bytes + 1)  # one byte more tells a file that grew past the cap
        except OSError as exc:
            raise _os_error(path, what, fix, exc) from None
    if len(data) > max_bytes:
        raise _too_big(path, what, max_bytes)
    return data


def decode_user_text(data: bytes, where: str, fix: str) -> str:
    """UTF-8 text; an invalid byte is reported by its line, without showing it."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"{where} is not UTF-8 text: an invalid byte on line {line}.",
            "gpuscout reads user files as UTF-8 (lone surrogates and other encodings are refused).",
            f"Save the file as UTF-8. {fix}",
        ) from None


def user_lines(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SPEC_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a regular UTF-8 file of at most `max_bytes`, read 1 MiB at a time.

    For the large files only part of which is used (a dataset sampled, a trace cut at --requests): memory
    holds one chunk and the line being assembled, never the file. Lines end at "\n" (a "\r" before it is
    dropped), as JSON Lines defines them; a byte that is not UTF-8 is reported by its line number."""
    number = 0
    pending: list[bytes] = []
    for chunk in _chunks(path, what, fix, max_bytes):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            pending.append(chunk[start:end])
            number += 1
            yield number, _line_text(b"".join(pending), f"The {what} {path}", fix, number)
            pending, start = [], end + 1
        pending.append(chunk[start:])
    if any(pending):
        yield number + 1, _line_text(b"".join(pending), f"The {what} {path}", fix, number + 1)


def _line_text(data: bytes, where: str, fix: str, number: int) -> str:
    try:
        return data.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(
            f"{where} is not UTF-8 text: an invalid byte on line {number}.",
            "gpuscout reads user files as UTF-8 (lone surrogates and other encodings are refused).",
            f"Save the file as UTF-8. {fix}",
        ) from None


def read_user_text(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """The file's UTF-8 text; a missing, special, oversized, unreadable or non-UTF-8 file is a SpecError."""
    return decode_user_text(read_user_bytes(path, what, fix, max_bytes=max_bytes), f"The {what} {path}", fix)


# --- nesting ------------------------------------------------------------------------------------

# Escapes first (so every remaining quote delimits a string), then strings and comments, then
# everything but brackets: each step linear, on bytes (multi-byte UTF-8 never holds an ASCII byte).
_TOML_SKIP = re.compile(rb'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"[^"\n]*"|\'[^\'\n]*\'|#[^\n]*')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_AS_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1, +1, -1, -1


def nesting_exceeds(text: str, limit: int, *, toml: bool = False) -> bool:
    """Whether brackets outside strings (and TOML comments) nest deeper than `limit`; linear time.

    The depth is the running count of open brackets (+1 for `[` `{`, -1 for `]` `}`), summed in C
    by `itertools.accumulate`: a 16 MiB file of nothing but brackets takes under a second.
    Unclosed brackets of a truncated file count as nesting, as the parser would recurse into them.
    """
    if text.count("[") + text.count("{") <= limit:  # depth never exceeds the openers: the common case, fast
        return False
    data = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = _TOML_SKIP.sub(b"", data) if toml else b"".join(data.split(b'"')[::2])  # JSON: odd parts are strings
    steps = outside.translate(None, _NOT_BRACKETS).translate(_AS_STEPS)
    if b"\x01" * (limit + 1) in steps:  # that many openers in a row: too deep whatever follows
        return True
    return len(steps) > limit and max(accumulate(array("b", steps))) > limit


def _deepest_exceeds(value: Any, limit: int) -> bool:
    """Whether a parsed document nests deeper than `limit` (TOML dotted keys nest without brackets)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return False


def _too_deep(where: str, fix: str) -> SpecError:
    return SpecError(
        f"{where} nests tables, arrays or objects more than {MAX_NESTING} levels deep.",
        "gpuscout refuses deeper nesting before parsing (docs/design.md §4.10); no file it reads needs "
        "more than a few levels, and each level costs the parser stack.",
        f"Check that this is the right file. {fix}",
    )


# --- TOML ---------------------------------------------------------------------------------------


def parse_user_toml(text: str, where: str, fix: str) -> dict[str, Any]:
    """TOML text as a dict; a syntax error points at its line and column, deep nesting is refused."""
    if nesting_exceeds(text, MAX_NESTING, toml=True):
        raise _too_deep(where, fix)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(
            f"{where} is not valid TOML: {exc}.",
            "The TOML parser stopped at the line and column shown.",
            "Fix the syntax at that line (quotes around strings, '=' between key and value, "
            "dates as YYYY-MM-DD without quotes).",
        ) from None
    except RecursionError:  # a nesting the scan could not see; the same answer
        raise _too_deep(where, fix) from None
    except ValueError:  # Python refuses integers of more than 4,300 digits
        raise _too_many_digits(where, fix) from None
    if _deepest_exceeds(document, MAX_NESTING):
        raise _too_deep(where, fix)
    return document


def read_user_toml(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SHEET_BYTES) -> dict[str, Any]:
    """The file parsed as TOML (see `read_user_text` and `parse_user_toml`)."""
    return parse_user_toml(read_user_text(path, what, fix, max_bytes=max_bytes), str(path), fix)


def _too_many_digits(where: str, fix: str) -> SpecError:
    return SpecError(
        f"{where} holds an integer with more than 4,300 digits.",
        "Python refuses to convert integers that long (sys.get_int_max_str_digits); no real value has them.",
        fix,
    )


# --- JSON ---------------------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_user_json(text: str, where: str, fix: str, *, finite: bool = True, surrogates: bool = False) -> Any:
    """JSON text as Python values, checked: nesting first, then syntax, numbers and strings.

    `finite`: NaN, Infinity and numbers past the float range (1e999) are refused, naming where they
    are. `surrogates=False`: strings with an unpaired UTF-16 surrogate escape (\\ud800) are refused.
    """
    if nesting_exceeds(text, MAX_NESTING):
        raise _too_deep(where, fix)
    non_finite: list[str] = []

    def constant(token: str) -> float:
        non_finite.append(token)
        return math.nan

    def number(token: str) -> float:
        value = float(token)
        if not math.isfinite(value):
            non_finite.append(token[:24])
        return value

    try:
        value = json.loads(text, parse_constant=constant, parse_float=number)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
                        "The JSON parser stopped at that line and column.", fix) from None
    except RecursionError:
        raise _too_deep(where, fix) from None
    except ValueError:
        raise _too_many_digits(where, fix) from None
    if finite and non_finite:
        raise _not_finite(where, fix, value, non_finite[0])
    if not surrogates and _SURROGATE_ESCAPE.search(text):
        _check_surrogates(value, where, fix)
    return value


def user_json_items(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SPEC_BYTES,
                    max_item_bytes: int = MAX_ITEM_BYTES) -> Iterator[Any]:
    """The elements of a file holding one JSON list, one at a time, each nested at most `MAX_NESTING` levels
    (numbers may be NaN and strings may hold unpaired surrogates, as datasets may: the caller checks what it
    uses).

    For a large list only part of which is used (a ShareGPT file sampled): memory holds one chunk and one
    element, never the file. An element is parsed once the bytes read hold all of it; one larger than
    `max_item_bytes` is refused (a conversation of 16 MiB is not one a server is sent)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    chunks = _chunks(path, what, fix, max_bytes)
    buffer, at, number = "", 0, 0
    expect = "["  # then "item or ]", "item", ", or ]", and "end" once the list is closed
    while True:
        at = _skip_space(buffer, at)
        if at == len(buffer):
            more = next(chunks, None)
            if more is None:
                if expect != "end":
                    raise SpecError(f"The {what} {path} ends before its list does.", "It is one JSON list.", fix)
                return
            buffer, at = buffer[at:] + _decoded(decoder, more, path, what, fix), 0
            continue
        char = buffer[at]
        if expect == "[" and char == "[":
            expect, at = "item or ]", at + 1
        elif expect in ("item or ]", ", or ]") and char == "]":
            expect, at = "end", at + 1
        elif expect == ", or ]" and char == ",":
            expect, at = "item", at + 1
        elif expect in ("item or ]", "item"):
            complete, rest, value = _one_item(buffer, at, chunks, decoder, path, what, fix, max_item_bytes)
            if not complete:  # more of the file was needed: the element starts the longer buffer
                buffer, at = rest, 0
                continue
            number += 1
            if nesting_exceeds(buffer[at:rest], MAX_NESTING):
                raise _too_deep(f"{path} element {number}", fix)
            yield value
            expect, at = ", or ]", rest
        else:
            where = "after its list ends" if expect == "end" else f"where {expect!r} should be"
            raise SpecError(f"The {what} {path} is not one JSON list: {shown(char)} {where}.",
                            "A ShareGPT file is one JSON list of conversations.", fix)


_SPACE = re.compile(r"[ \t\r\n]*")


def _skip_space(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    return found.end() if found else at


def _chunks(path: Path, what: str, fix: str, max_bytes: int) -> Iterator[bytes]:
    with open_user_file(path, what, fix) as (handle, size):
        if size > max_bytes:
            raise _too_big(path, what, max_bytes)
        total = 0
        while True:
            try:
                chunk = handle.read(_CHUNK_BYTES)
            except OSError as exc:
                raise _os_error(path, what, fix, exc) from None
            if not chunk:
                return
            total += len(chunk)
            if total > max_bytes:  # the file grew past the cap while it was read
                raise _too_big(path, what, max_bytes)
            yield chunk


def _decoded(decoder: codecs.IncrementalDecoder, data: bytes, path: Path, what: str, fix: str) -> str:
    try:
        return str(decoder.decode(data))
    except UnicodeDecodeError:
        raise SpecError(f"The {what} {path} is not UTF-8 text.",
                        "gpuscout reads user files as UTF-8 (other encodings are refused).",
                        f"Save the file as UTF-8. {fix}") from None


_DECODER = json.JSONDecoder()


def _one_item(buffer: str, at: int, chunks: Iterator[bytes], decoder: codecs.IncrementalDecoder, path: Path,
              what: str, fix: str, max_item_bytes: int) -> tuple[bool, Any, Any]:
    """(True, end, value) when buffer[at:] starts with a whole JSON value ending at `end`; (False, a longer buffer
    from `at`, None) when more of the file is needed; a SpecError when the value is malformed or too large."""
    try:
        value, end = _DECODER.raw_decode(buffer, at)
        if end < len(buffer):
            return True, end, value
    except (RecursionError, ValueError) as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise _too_deep(f"{path}", fix) from None
    more = next(chunks, None)
    if more is None:  # the whole file is here: the element is what it is
        try:
            value, end = _DECODER.raw_decode(buffer, at)
            return True, end, value
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path} is not valid JSON: {exc.msg} at character {exc.pos:,}.",
                            "The JSON parser stopped there.", fix) from None
        except (RecursionError, ValueError):
            raise _too_deep(f"{path}", fix) from None
    if len(buffer) - at > max_item_bytes:
        raise SpecError(f"The {what} {path} holds an element larger than {max_item_bytes // MIB} MiB.",
                        "Each element is one conversation; none that a server is sent is that long.", fix)
    return False, buffer[at:] + _decoded(decoder, more, path, what, fix), None


def read_user_json(path: Path, what: str, fix: str, *, max_bytes: int = MAX_SPEC_BYTES) -> Any:
    """The file parsed as JSON, with finite numbers and printable strings (see `parse_user_json`)."""
    return parse_user_json(read_user_text(path, what, fix, max_bytes=max_bytes), str(path), fix)


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf and key in a parsed document, without recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            for key, child in reversed(node.items()):
                yield f"{where}.{key}" if where else str(key), key
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(node, list | tuple):
            stack.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(node))))
        else:
            yield where, node


def _not_finite(where: str, fix: str, value: Any, token: str) -> SpecError:
    field = next((p for p, v in walk(value) if isinstance(v, float) and not math.isfinite(v)), "")
    return SpecError(
        f"{where}: {shown(field) if field else 'a value'} is {shown(token)}, not a finite number.",
        "NaN, Infinity and numbers past ±1.8e308 (e.g. 1e999) are not numbers gpuscout can compute with.",
        f"Write a finite number there. {fix}",
    )


def _check_surrogates(value: Any, where: str, fix: str) -> None:
    for path, leaf in walk(value):
        if isinstance(leaf, str) and _SURROGATE.search(leaf):
            raise SpecError(
                f"{where}: {shown(path) if path else 'a string'} holds an unpaired UTF-16 surrogate "
                "(a \\ud800-\\udfff escape).",
                "Such a string has no UTF-8 form, so it could neither be printed nor sent.",
                f"Replace the broken escape (often half of an emoji). {fix}",
            )


def replace_surrogates(text: str) -> str:
    """`text` with every unpaired surrogate replaced by U+FFFD (the Unicode replacement character)."""
    return _SURROGATE.sub("\ufffd", text)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 2, 4, 4, 3


def printable(text: str, limit: int = 200) -> str:
    """`text` safe to print in a message: cut to `limit` characters, unpaired surrogates escaped."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: object, limit: int = 80) -> str:
    """A value for an error message: repr'd (control characters and surrogates escaped) and short."""
    text = _SHOWN.repr(value) if not isinstance(value, str) else repr(value[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_invalid_field(exc: ValidationError, *within: str) -> str:
    """The first field a file failed validation on, as 'where: why' safe to print; `within` names
    the part of the file the model was read from. One wording for every file gpuscout reads back."""
    first = exc.errors()[0]
    where = ".".join(printable(str(part), 40) for part in (*within, *first["loc"]))
    return f"{where}: {printable(first['msg'])}"
