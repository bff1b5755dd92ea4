"""The surfaces added with load, report, the store and calibrate: no input crashes, hangs or fools them.

Each is driven as its command drives it (tests/fuzz/targets.py): /metrics pages through a level's summary
into a stored load result, Mooncake traces and ShareGPT files into workloads, result files into `report`'s
page and pairs into `compare`, a hand-edited or damaged store into `results list` and `show`, bench results
into `calibrate`, co-served and video jobs into `estimate`. `benchmarks/fuzz_parsers.py --only SURFACE`
runs the same generators for thousands of inputs.

`OPEN` lists the defects these inputs reproduce that are being fixed on other branches (the class, and one
input that shows it); an input that fails any other way fails the test, so a new defect is never hidden,
and an entry whose fix has landed is dropped once no input hits it.
"""

from __future__ import annotations

import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .corpus import SURFACES, generate
from .targets import Verdict, judge

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# surface → (outcome, what the detail says) of each open defect, with the benchmark input that shows it
# (`python benchmarks/fuzz_parsers.py --replay SURFACE:I`).
OPEN: dict[str, tuple[tuple[str, str], ...]] = {}


def _open(parser: str, verdict: Verdict) -> bool:
    return any(verdict.outcome == outcome and re.search(pattern, verdict.detail)
               for outcome, pattern in OPEN.get(parser, ()))


@pytest.mark.parametrize("parser", SURFACES)
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_each_surface_answers_sanely_or_fails_cleanly(parser: str, rng: random.Random) -> None:
    case = generate(parser, rng)
    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-") as folder:
        verdict = judge(case, Path(folder))
    if verdict.outcome in ("parsed", "error") or _open(parser, verdict):
        return
    pytest.fail(f"{parser} ({case.label}): {verdict.outcome}: {verdict.detail}")


@pytest.mark.parametrize("parser", SURFACES)
def test_the_seed_inputs_are_accepted(parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generators start from valid inputs: with the document and byte mutations switched off, each
    surface accepts what it is given (so the fuzz reaches past the first check instead of counting the
    refusals of a broken seed)."""
    from . import corpus

    monkeypatch.setattr(corpus, "mutate", lambda document, rng, count=None: corpus._deep_copy(document))
    monkeypatch.setattr(corpus, "mutate_bytes", lambda data, rng: data)
    outcomes = []
    for i in range(6):
        case = corpus.STRUCTURED[parser](random.Random(f"seed-{i}"))
        with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-") as folder:
            verdict = judge(case, Path(folder))
        outcomes.append(verdict.outcome)
        assert verdict.outcome in ("parsed", "error") or _open(parser, verdict), (parser, verdict)
    assert "parsed" in outcomes, f"{parser}: no unmutated input was accepted: {outcomes}"
