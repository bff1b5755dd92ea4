"""No input crashes, hangs or fools a parser: it gives a sane object or a clean three-part error.

Each parser gets structure-aware inputs (a valid document with hostile values, then maybe byte-level
damage), raw bytes, and every kind of special file. `benchmarks/fuzz_parsers.py` runs the same
generators for 10,000+ inputs per parser; these tests keep `make test` quick.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .corpus import PARSERS, SPECIAL_KINDS, STRUCTURED, FileCase, generate, special_case
from .targets import judge

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RAW = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _assert_clean(case: FileCase) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-") as folder:
        verdict = judge(case, Path(folder))
    assert verdict.outcome in ("parsed", "error"), f"{case.parser} ({case.label}): {verdict.outcome}: {verdict.detail}"


@pytest.mark.parametrize("parser", PARSERS)
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_mutated_documents_parse_or_fail_cleanly(parser: str, rng: random.Random) -> None:
    """Structure-aware and byte-level mutations of valid documents (the benchmark's mix)."""
    _assert_clean(generate(parser, rng))


@pytest.mark.parametrize("parser", PARSERS)
@RAW
@given(data=st.binary(max_size=3000))
def test_raw_bytes_parse_or_fail_cleanly(parser: str, data: bytes) -> None:
    entry = STRUCTURED[parser](random.Random(0)).entry
    name = "model/model.safetensors" if entry == "model" else entry
    _assert_clean(FileCase(parser, {name: data}, entry, {"cloud": "aws"}, "raw"))


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("parser", PARSERS)
def test_special_files_are_refused_without_blocking(parser: str, kind: str) -> None:
    """A FIFO, a folder, /dev/zero, a device or a file past the size cap: a clean error, at once.

    An empty file may parse (an empty dataset for bench is plain text), and a symlink to a real
    input is read like the input itself.
    """
    case = special_case(parser, random.Random(kind), kind)
    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-") as folder:
        verdict = judge(case, Path(folder), hang_s=5.0)
    allowed = ("parsed", "error") if kind in ("symlink", "empty") else ("error",)
    assert verdict.outcome in allowed, f"{parser} {kind}: {verdict.outcome}: {verdict.detail}"
    assert verdict.seconds < 5.0


@settings(max_examples=100, deadline=None, derandomize=True)
@given(ref=st.text(max_size=400))
def test_any_model_reference_resolves_or_fails_cleanly(ref: str) -> None:
    """A job's `model` (a preset id or a path, up to 4,096 characters) never crashes the lookup."""
    from gpuscout.errors import GpuscoutError
    from gpuscout.workload.resolve import resolve_any

    try:
        resolve_any(ref)
    except GpuscoutError as exc:
        str(exc).encode("utf-8")
        assert len(str(exc)) < 4000
