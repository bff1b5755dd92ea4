"""What `gpuscout results` reads from the user: which runs (`--kind`, `--since`), and what `export` writes."""

from __future__ import annotations

import difflib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuscout.errors import SpecError, UnknownNameError
from gpuscout.results.database import StoredRun, kinds_stored
from gpuscout.units import iso_time, parse_duration_s

# The commands that record runs, and the kinds of result they write.
KNOWN_KINDS = ("bench", "load", "pick", "doctor", "finetune", "inference", "image", "video", "probe")
_AGO = re.compile(r"\s*[0-9.]+\s*[a-zA-Z]+\s*")  # '7d', '12h', '90 min': a time back from now
_SCHEMA_KINDS = ("finetune", "inference", "image", "video", "probe", "load")


def check_kind(kind: str, store: Path) -> str:
    """`--kind`, lower-cased; a kind neither gpuscout nor the store knows is a typo, with suggestions."""
    known = {*KNOWN_KINDS, *kinds_stored(store)}
    if kind.lower() in known:
        return kind.lower()
    close = difflib.get_close_matches(kind.lower(), sorted(known), n=3, cutoff=0.5)
    raise UnknownNameError(f"No runs are of kind {kind!r}." + (f" Did you mean: {', '.join(close)}?" if close else ""),
                           "--kind matches the command that recorded a run (bench, load, pick, doctor) or the "
                           "kind of its result (finetune, inference, image, video, probe).",
                           f"Use one of: {', '.join(sorted(known))}.")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'7d', '12h', '90m' back from now, or an ISO date or time ('2026-11-24', '2026-11-24T09:00Z', UTC if
    no zone is given)."""
    moment = now or datetime.now(UTC)
    if _AGO.fullmatch(text):
        return moment - timedelta(seconds=parse_duration_s(text.strip()))
    when = iso_time(text)
    if when is None:
        raise SpecError(f"--since {text!r} is neither a time back from now nor a date.",
                        "--since keeps the runs made after a moment.",
                        "Write it like 7d, 12h or 90m (back from now), or 2026-11-24 or 2026-11-24T09:00Z.")
    return when


def export_text(entry: StoredRun, payload: dict[str, Any]) -> str:
    """What `results export` writes: a measurement as the result file `-o` writes, with what its command
    wrote beside it (`store.BESIDE_KEYS`: load's costs, SLO and search, bench's estimate), so `report` draws
    the export as it draws the stored run (the result checked as a result file is when its kind is one this
    gpuscout reads); any other run as the JSON its command printed."""
    from gpuscout.results.schema import BenchResult  # numpy and the schema: only an export needs them
    from gpuscout.results.store import BESIDE_KEYS, parse_result

    if "cases" not in payload or "schema_version" not in payload:
        return json.dumps(payload, indent=2, allow_nan=False) + "\n"
    part = {k: v for k, v in payload.items() if k in BenchResult.model_fields}
    beside = {k: payload[k] for k in BESIDE_KEYS if payload.get(k) is not None}
    if part.get("kind") in _SCHEMA_KINDS:
        result = parse_result(part, f"stored run {entry.id}")
        if not beside:
            return result.model_dump_json(indent=2)
        part = result.model_dump(mode="json")
    return json.dumps({**part, **beside}, indent=2, allow_nan=False) + "\n"
