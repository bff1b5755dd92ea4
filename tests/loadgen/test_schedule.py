from __future__ import annotations

import statistics
from itertools import pairwise

import pytest
from pydantic import ValidationError

from gpuscout.loadgen.schedule import LoadShape, send_offsets


def test_closed_loop_has_no_schedule() -> None:
    assert send_offsets(LoadShape(kind="concurrency", concurrency=4, requests=10), 10) is None


def test_constant_rate_is_exact_and_absolute() -> None:
    assert send_offsets(LoadShape(kind="constant", rate_rps=4, requests=5), 5) == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("kind", ["poisson", "gamma"])
def test_random_arrivals_are_seeded_and_absolute(kind: str) -> None:
    shape = LoadShape(kind=kind, rate_rps=50, burstiness=0.5, requests=2000, seed=7)  # type: ignore[arg-type]
    a, b = send_offsets(shape, 2000), send_offsets(shape, 2000)
    other = send_offsets(shape.model_copy(update={"seed": 8}), 2000)
    assert a == b and a != other and a is not None
    assert a[0] == 0.0 and all(y >= x for x, y in pairwise(a))  # offsets from t0, not gaps
    gaps = [y - x for x, y in pairwise(a)]
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.1)
    cv = statistics.stdev(gaps) / statistics.fmean(gaps)  # Gamma(k): CV = 1/√k
    assert cv == pytest.approx(1.0 if kind == "poisson" else 2**0.5, rel=0.15)


def test_shape_needs_a_limit_and_a_level() -> None:
    with pytest.raises(ValidationError):
        LoadShape(kind="concurrency", requests=3)
    with pytest.raises(ValidationError):
        LoadShape(kind="poisson", rate_rps=1)
