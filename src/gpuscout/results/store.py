"""Reading and writing result files: atomic writes, clear messages for old, foreign or broken files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscout.errors import SpecError
from gpuscout.outfile import write_atomic
from gpuscout.results.schema import MAX_MAGNITUDE, READABLE_VERSIONS, SCHEMA_VERSION, BenchResult, check_samples
from gpuscout.userfile import MAX_RESULT_BYTES, first_invalid_field, printable, read_user_json, walk

_FIX = "Pass a file written by `gpuscout bench -o FILE` or `gpuscout load -o FILE`; re-run it if it was cut off."
_MAX_INT = 2**63  # results are int64 everywhere they are read (numpy, pandas, JSON tools)
# What a command writes beside its result, in the file as in the results store, so that `gpuscout report`
# draws a file as it draws the stored run: bench's estimate for the GPU, load's per-level costs, its
# search verdict and the SLO it was judged against. Readers of the measurement itself pass over them
# (`documents.read` reads and checks them); any other key is still refused as a typo or a foreign file.
BESIDE_KEYS = ("estimate", "costs", "search", "slo")


def save_result(result: BenchResult, path: Path, beside: Mapping[str, Any] | None = None) -> None:
    """Write atomically (a partial file is never left behind, even on Ctrl-C), with what its command
    printed beside the result (keys in `BESIDE_KEYS` only)."""
    extra = dict(beside or {})
    unknown = sorted(set(extra) - set(BESIDE_KEYS))
    if unknown:
        raise ValueError(f"not a key written beside a result: {', '.join(unknown)}")
    if not extra:
        write_atomic(path, result.model_dump_json(indent=2), what="result file")
        return
    data = {**result.model_dump(mode="json"), **extra}
    write_atomic(path, json.dumps(data, indent=2, allow_nan=False), what="result file")


def load_result(path: Path) -> BenchResult:
    """A result file, checked: at most 512 MiB, finite numbers in range, the schema version, the schema
    (what was written beside the result, `BESIDE_KEYS`, is passed over)."""
    return parse_result(measurement_part(read_user_json(path, "result file", _FIX, max_bytes=MAX_RESULT_BYTES)),
                        path)


def measurement_part(data: Any) -> Any:
    """The result without what its command wrote beside it."""
    return {k: v for k, v in data.items() if k not in BESIDE_KEYS} if isinstance(data, dict) else data


def parse_result(data: Any, path: Path | str) -> BenchResult:
    """A result's JSON data (from a file, or the results store), checked as `load_result` checks a file."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise SpecError(
            f"{path} has result schema version {printable(repr(version), 60)}; this gpuscout reads versions "
            f"{READABLE_VERSIONS[0]} to {SCHEMA_VERSION}.",
            "Older results lack fields compare needs; newer ones were written by a newer gpuscout."
            if isinstance(version, int) else "The file has no schema_version: it was not written by gpuscout.",
            "Re-run the benchmark with this gpuscout, or use the gpuscout version that wrote the file.",
        )
    if version == 1:
        data = _from_version_1(data)
    try:
        result = BenchResult.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{path} is not a valid gpuscout result: {first_invalid_field(exc)}.",
                        f"{len(exc.errors())} field(s) do not match schema version {SCHEMA_VERSION}.",
                        "Re-run the benchmark; do not edit result files by hand.") from None
    # On the validated model, not the JSON: pydantic reads the string "nan" or "1e999" as a float.
    _check_magnitudes(path, result.model_dump())
    problem = check_samples(result)
    if problem:
        raise SpecError(f"{path} is not a valid gpuscout result: {problem}.",
                        "gpuscout never writes such a number: the file was damaged or edited.",
                        "Re-run the benchmark; do not edit result files by hand.")
    return result


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 result as version 2: each case is one run; region and billing (recorded with the
    machine in version 1, never set by its commands) become fixed variables."""
    fingerprint = dict(data.get("fingerprint") or {})
    fixed = dict(data.get("fixed") or {})
    for key in ("region", "billing"):
        if key in fingerprint:
            fixed[key] = fingerprint.pop(key)
    return {**data, "schema_version": SCHEMA_VERSION, "fingerprint": fingerprint, "fixed": fixed}


def _check_magnitudes(path: Path | str, data: Any) -> None:
    """Every float finite and within ±1e30, every integer within ±2^63: sums and ratios must stay finite."""
    for where, value in walk(data):
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        limit = MAX_MAGNITUDE if isinstance(value, float) else _MAX_INT
        if not abs(value) <= limit:  # NaN fails this test too
            shown = f"{value:.3g}" if isinstance(value, float) or value.bit_length() < 100 else "a huge integer"
            raise SpecError(
                f"{path}: {printable(where, 120)} is {shown}, beyond ±{limit:.0e}.",
                "No quantity gpuscout measures comes near it; sums and ratios of such numbers overflow.",
                "Re-run the benchmark; do not edit result files by hand.",
            )
