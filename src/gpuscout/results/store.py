"""Reading and writing result files: atomic writes, clear messages for old or foreign files."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from gpuscout.errors import SpecError
from gpuscout.results.schema import SCHEMA_VERSION, BenchResult
from gpuscout.userfile import read_user_text, write_atomic


def save_result(result: BenchResult, path: Path) -> None:
    """Write atomically (a partial file is never left behind, even on Ctrl-C)."""
    write_atomic(path, result.model_dump_json(indent=2))


def load_result(path: Path) -> BenchResult:
    text = read_user_text(path, "result file", "Pass a JSON file written by `gpuscout bench` or `gpuscout load`.")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
                        "Result files are JSON written by gpuscout.",
                        "Pass a file written by `gpuscout bench -o FILE`; re-run the benchmark if it was cut off.",
                        ) from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise SpecError(
            f"{path} has result schema version {version!r}; this gpuscout reads version {SCHEMA_VERSION}.",
            "Older results lack fields compare needs; newer ones were written by a newer gpuscout."
            if isinstance(version, int) else "The file has no schema_version: it was not written by gpuscout.",
            "Re-run the benchmark with this gpuscout, or use the gpuscout version that wrote the file.",
        )
    try:
        return BenchResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"{path} is not a valid gpuscout result: {where}: {first['msg']}.",
                        f"{len(exc.errors())} field(s) do not match schema version {SCHEMA_VERSION}.",
                        "Re-run the benchmark; do not edit result files by hand.") from None
