"""The one number formatter: units, significant digits, money with cents, no exponents or raw floats."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscout.report import numbers
from gpuscout.units import parse_time_s


def test_significant_digits_without_exponents() -> None:
    assert [numbers.sig(v) for v in (12345.6, 12.3456, 0.012345, 0.00001234, 0.0)] == [
        "12,346", "12.3", "0.0123", "0.0000123", "0"]
    assert numbers.sig(9.996) == "10.0" and numbers.sig(99.96) == "100" and numbers.sig(-0.5) == "-0.500"


@given(st.floats(min_value=1e-9, max_value=1e15, allow_nan=False))
def test_no_figure_ever_prints_an_exponent(value: float) -> None:
    for text in (numbers.sig(value), numbers.size(value), numbers.rate(value), numbers.seconds(value),
                 numbers.count(value), numbers.money(value)):
        assert "e+" not in text and "e-" not in text and "inf" not in text


@given(st.floats(min_value=-1e15, max_value=1e15, allow_nan=False))
def test_a_negative_time_prints_with_its_sign(value: float) -> None:
    """A difference of two times can be negative; seconds(-200) used to recurse with duration() forever
    (found by the compare_pair fuzz surface)."""
    for show in (numbers.seconds, numbers.duration):
        assert show(value).startswith("-") == (value < 0)


def test_money_has_cents_and_more_digits_only_below_a_cent() -> None:
    assert numbers.money(1234.5) == "$1,234.50"
    assert numbers.money(0.0036) == "$0.0036"
    assert numbers.money(0.00004321) == "$0.000043"
    assert numbers.money(0) == "$0.00" and numbers.money(None) == "-"
    assert numbers.money(12.0, "CNY") == "CN¥12.00" and numbers.money(3.5, "SGD") == "SGD 3.50"
    assert numbers.money(1.0, "JPY") == "JP¥1.00" and numbers.money_in(14.0, "CNY", 0.14) == "CN¥100.00"
    assert numbers.money(-2.5) == "-$2.50"


def test_units() -> None:
    assert numbers.size(512) == "512 B" and numbers.size(3.5 * 2**20) == "3.50 MiB"
    assert numbers.gib(76.9 * 2**30) == "76.9 GiB"
    assert numbers.rate(1.9e9) == "1.90 GB/s" and numbers.rate(850e6) == "850 MB/s"
    assert numbers.seconds(0.00085) == "850 µs" and numbers.seconds(0.0123) == "12.3 ms"
    assert numbers.duration(45) == "45 s" and numbers.duration(3600 * 5.6) == "5.6 h"
    assert numbers.count(8_030_261_248) == "8.03 B" and numbers.flops(989e12) == "989 TFLOP/s"
    assert numbers.value_in(2e9, "bytes/s") == "2.00 GB/s" and numbers.value_in(0.5, "fraction") == "50.0%"
    assert numbers.sig(math.nan) == "n/a"


def test_times_parse_as_iso_8601_in_utc_without_a_zone() -> None:
    assert parse_time_s("2025-06-01T12:00:00Z", "--created-at") == 1748779200.0
    assert parse_time_s("2025-06-01T12:00:00", "--created-at") == 1748779200.0
    with pytest.raises(Exception, match="not an ISO 8601 time"):
        parse_time_s("June", "--created-at")


def test_a_quantity_takes_its_unit_from_its_name() -> None:
    assert numbers.quantity("step_s", 38.98) == "39.0 s" and numbers.quantity("ttft_s", 0.4568) == "457 ms"
    assert numbers.quantity("tokens_per_s", 1681.2) == "1,681/s" and numbers.quantity("mfu", 0.3408) == "34.1%"
    assert numbers.quantity("achieved_tflops", 81.72) == "81.7 TFLOP/s"
    assert numbers.quantity("download_bytes_per_s", 1.9e9) == "1.90 GB/s"
    assert numbers.quantity("s_per_image", 7.025) == "7.03 s" and numbers.quantity("steps", 763.0) == "763"


def test_a_column_gets_one_unit_that_suits_its_largest_value() -> None:
    assert numbers.common_unit([0.0235, 0.0567], "s") == ("ms", 1e-3)
    assert numbers.common_unit([0.0004], "s") == ("µs", 1e-6) and numbers.common_unit([1.5, 0.2], "s") == ("s", 1.0)
    assert numbers.common_unit([20 * 2**30], "bytes") == ("GiB", float(2**30))
    assert numbers.common_unit([0.5], "fraction") == ("%", 0.01)
    assert numbers.common_unit([1001.0], "tokens/s") == ("tokens/s", 1.0) and numbers.common_unit([], "s")[0] == "µs"
    assert numbers.in_unit(0.0235, 1e-3) == "23.5" and numbers.in_unit(None, 1.0) == "—"


def test_bands_name_their_unit_once_when_both_ends_share_it() -> None:
    assert numbers.duration_band(3.3 * 3600, 7.0 * 3600) == "3.3–7.0 h"
    assert numbers.duration_band(82 * 60, 2.9 * 3600) == "82 min–2.9 h"
    assert numbers.ratio_band(1.994, 2.011) == "1.99–2.01×" and numbers.ratio_band(math.nan, 1.0) == "n/a"


def test_exact_counts_keep_every_digit() -> None:
    assert numbers.exact(8_030_261_248) == "8,030,261,248" and numbers.exact(3) == "3"


def test_a_ratio_band_beyond_readable_ends_is_clamped() -> None:
    from gpuscout.report.numbers import ratio_band

    assert ratio_band(1.99, 2.01) == "1.99–2.01×"
    assert ratio_band(0.0001, 71480.15) == "<0.01–>100×"
    assert ratio_band(float("nan"), 2.0) == "n/a"
