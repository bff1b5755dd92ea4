"""What the 80-column screens say, checked against the data they render: these hold across golden refreshes.

Each test reads a table back from the rendered text (tests/report/screens.py) and compares its
cells with the report it came from, so a view that swaps columns, inverts a mark or drops one
fails here even after `make golden` has accepted the new text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscout.report.estimate import estimate_screen
from gpuscout.report.load import load_screen
from gpuscout.report.numbers import GIB
from gpuscout.report.pick import pick_screen

from . import samples
from .screens import pick_rows, render, rows_by_header

WIDTH = 80


def figure(cell: str) -> float:
    """A rendered figure back as a number: '1,234.5' → 1234.5, '$3.13' → 3.13."""
    return float(cell.replace(",", "").replace("$", ""))


@pytest.fixture(scope="module")
def estimate() -> tuple[samples.api.EstimateReport, str]:
    report = samples.estimate_default()
    return report, render(estimate_screen(report.screening, detailed=False), WIDTH)


def test_screening_is_one_line_per_gpu(estimate: tuple[samples.api.EstimateReport, str]) -> None:
    report, text = estimate
    rows = rows_by_header(text, "GPU")
    assert [r["GPU"] for r in rows] == [v.gpu_sku for v in report.screening.verdicts]


def test_screening_cells_match_the_estimate(estimate: tuple[samples.api.EstimateReport, str]) -> None:
    report, text = estimate
    rows = {r["GPU"]: r for r in rows_by_header(text, "GPU")}
    for v in report.screening.verdicts:
        row = rows[v.gpu_sku]
        assert figure(row["usable GiB"]) == pytest.approx(v.breakdown.usable_bytes / GIB, abs=0.05), v.gpu_sku
        assert figure(row["peak GiB"]) == pytest.approx(v.breakdown.peak_bytes / GIB, abs=0.05), v.gpu_sku
        assert row["fits"] == ("yes" if v.fits else "no"), v.gpu_sku


def test_a_gpu_that_does_not_fit_shows_peak_above_usable_and_no(
        estimate: tuple[samples.api.EstimateReport, str]) -> None:
    _, text = estimate
    rows = rows_by_header(text, "GPU")
    short = [r for r in rows if figure(r["headroom GiB"]) < 0]
    assert short, "the default job is meant to overflow some GPUs"
    for row in short:
        assert figure(row["peak GiB"]) > figure(row["usable GiB"]) and row["fits"] == "no", row
        assert row["cheapest fix"].startswith("["), row  # the fix, with its footnote
    for row in rows:
        if figure(row["headroom GiB"]) >= 0:
            assert figure(row["peak GiB"]) <= figure(row["usable GiB"]) and row["fits"] == "yes", row


def test_pick_stars_exactly_the_pareto_offers() -> None:
    report = samples.pick_default()
    rows = pick_rows(render(pick_screen(report.pick, report.offers_notes), WIDTH))
    starred = {oid for oid, cells in rows.items() if "★" in cells[4]}
    expected = {r.offer_id for r in report.pick.rows if r.pareto}
    assert expected and starred == expected
    ranked = [r.offer_id for r in report.pick.rows if r.excluded is None]
    assert list(rows) == ranked  # ids whole, in rank order


def test_pick_totals_rise_down_the_table_and_each_sits_in_its_band() -> None:
    report = samples.pick_default()
    text = render(pick_screen(report.pick), WIDTH)
    rows = pick_rows(text)
    totals = [figure(cells[2]) for cells in rows.values()]
    assert totals == sorted(totals)
    for r in report.pick.rows:
        if r.excluded is None:
            assert r.total_low_usd is not None and r.total_high_usd is not None
            assert r.total_low_usd <= (r.total_usd or 0) <= r.total_high_usd
            assert f"${r.total_low_usd:.3g}" in text  # the band's low end under its total
            assert ("≈" in rows[r.offer_id][4]) == (r.separable is False)


def test_load_rows_show_p50_at_most_p95_as_measured() -> None:
    result, costs, search = samples.load_demo()
    text = render(load_screen(result, output=Path("load.json"), costs=costs, search=search), WIDTH)
    assert "latencies in ms" in text
    # The table has no vertical rules: a row is the case name, then its figures in the header's order.
    order = ("ok/sent", "req/s", "out tok/s", "TTFT P50", "TTFT P95", "TPOT P50", "TPOT P95", "valid")
    for case in result.cases:
        line = next(line for line in text.splitlines() if line.startswith(case.name + " "))
        row = dict(zip(order, line.removeprefix(case.name).split(), strict=True))
        summaries = {m.name: m.summary for m in case.metrics if m.summary is not None}
        for label, name in (("TTFT", "ttft_s"), ("TPOT", "tpot_s")):
            p50, p95 = figure(row[f"{label} P50"]), figure(row[f"{label} P95"])
            assert p50 <= p95, row
            assert p50 == pytest.approx(summaries[name].p50 * 1e3, rel=0.01), row
            assert p95 == pytest.approx(summaries[name].p95 * 1e3, rel=0.01), row
