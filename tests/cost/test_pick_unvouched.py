"""`pick` on inputs it cannot vouch for: a placeholder price is never the silent winner, and a spot row
without an interruption rate says so and is priced under a band (docs/cost.md §4, §2.11). Run on the
bundled example sheet, whose AutoDL row is a placeholder and the cheapest of all for the default job."""

from __future__ import annotations

import json
from datetime import date
from functools import cache
from pathlib import Path

import pytest

from gpuscout import api
from gpuscout.cost.pick import PLACEHOLDER_NOT_RANKED
from gpuscout.cost.pick_row import PickRow
from gpuscout.cost.spot_prior import DEFAULT_PRIOR
from gpuscout.hardware.price_sheet import default_price_sheet
from gpuscout.report.payload import pick_payload
from gpuscout.report.pick import pick_screen
from gpuscout.report.unvouched import unvouched_lines
from report.screens import render

TODAY = date(2026, 12, 1)
PLACEHOLDER = "autodl-rtx4090-placeholder"
GCP_SPOT = "gcp-a2-highgpu-1g-us-central1-spot"


@cache
def sheet_without_spot_rates(folder: Path) -> Path:
    """The bundled sheet with the rate of the two GCP spot rows left out, as a SkyPilot import has none."""
    text = default_price_sheet().read_text(encoding="utf-8")
    cut = text.replace("interruptions_per_hour = 0.05\nrestart_overhead_s = 900\ncheckpoint_interval_s = 1800\n"
                       "observed_at = 2026-07-30", "restart_overhead_s = 900\ncheckpoint_interval_s = 1800\n"
                       "observed_at = 2026-07-30")
    assert cut.count("interruptions_per_hour = ") == text.count("interruptions_per_hour = ") - 1
    path = folder / "prices.toml"
    path.write_text(cut, encoding="utf-8")
    return path


def by_id(report: api.PickReport) -> dict[str, PickRow]:
    return {r.offer_id: r for r in report.pick.rows}


@cache
def default_pick() -> api.PickReport:
    return api.pick(None, today=TODAY)


def test_the_placeholder_is_priced_but_not_ranked() -> None:
    report = default_pick()
    row = by_id(report)[PLACEHOLDER]
    assert row.placeholder and row.excluded == PLACEHOLDER_NOT_RANKED and row.total_usd is not None
    ranked = [r for r in report.pick.rows if r.excluded is None]
    assert ranked[0].offer_id != PLACEHOLDER and not any(r.placeholder for r in ranked)
    assert row.total_usd < ranked[0].total_usd  # it would have been the silent winner


def test_asked_for_it_is_ranked_and_marked() -> None:
    report = api.pick(None, today=TODAY, include_placeholders=True)
    first = report.pick.rows[0]
    assert (first.offer_id, first.placeholder, first.excluded) == (PLACEHOLDER, True, None)
    assert unvouched_lines(report.pick.rows)[0].startswith("ranked on placeholder prices (nobody observed them): "
                                                           f"{PLACEHOLDER};")


def test_a_placeholder_excluded_for_its_own_reason_keeps_it() -> None:
    report = api.pick(None, today=TODAY, budget_usd=1.0)
    assert by_id(report)[PLACEHOLDER].excluded.startswith("over budget")  # type: ignore[union-attr]


def test_the_screen_shows_its_own_line_and_no_exclusion_for_it() -> None:
    text = render(pick_screen(default_pick().pick), 80)
    line = ("not ranked: placeholder prices (nobody observed them): \n"
            f"{PLACEHOLDER}; add --include-placeholders to rank them")
    assert line in text
    assert f"excluded, {PLACEHOLDER_NOT_RANKED}" not in text
    assert max(len(s) for s in text.splitlines()) <= 80


def test_json_lists_what_it_cannot_vouch_for() -> None:
    report = default_pick()
    payload = json.loads(json.dumps(pick_payload(report.job, report.pick, report.offers_notes), default=str))
    assert payload["unvouched"]["placeholders_not_ranked"] == [PLACEHOLDER]
    assert payload["unvouched"]["interruption_risk_unknown"] == []
    row = next(r for r in payload["pick"]["rows"] if r["offer_id"] == PLACEHOLDER)
    assert row["placeholder"] is True and row["excluded"] == PLACEHOLDER_NOT_RANKED


def test_spot_without_a_rate_says_risk_unknown_and_widens_its_p95(tmp_path: Path) -> None:
    stated = by_id(default_pick())[GCP_SPOT]  # 0.05 an hour, as the sheet assumes
    report = api.pick(None, offers=sheet_without_spot_rates(tmp_path), today=TODAY)
    row = by_id(report)[GCP_SPOT]
    assert row.interruption_risk_unknown and row.interruption_prior == DEFAULT_PRIOR
    assert row.total_usd is not None and row.total_p95_usd is not None and stated.total_p95_usd is not None
    assert row.total_p95_usd > row.total_usd
    assert row.total_p95_usd > stated.total_p95_usd  # simulated at one per 5.5 h, not one per 20 h
    lines = unvouched_lines(report.pick.rows)
    assert any(s.startswith(f"interruption risk unknown (no rate given): {GCP_SPOT}; interruptions "
                            "priced at 1 per 24 h, P95 at 1 per 5.5 h") for s in lines)
    text = render(pick_screen(report.pick), 80)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(GCP_SPOT))
    assert lines[at + 1].startswith("GCP spot, 1 × a100-sxm4-40gb") and lines[at + 2].startswith("risk unknown ")


def test_a_rate_from_the_user_replaces_the_prior(tmp_path: Path) -> None:
    report = api.pick(None, offers=sheet_without_spot_rates(tmp_path), today=TODAY, interruptions_per_hour=0.0)
    row = by_id(report)[GCP_SPOT]
    assert not row.interruption_risk_unknown and row.interruption_prior is not None
    assert row.interruption_prior.basis == "--interruptions-per-hour"
    assert row.total_p95_usd == row.total_usd  # zero, said by the user: riskless because they said so


def test_an_advisor_band_prices_its_instance_type(tmp_path: Path) -> None:
    advisor = tmp_path / "advisor.toml"
    advisor.write_text('observed_at = 2026-11-30\nsource = "aws.amazon.com/ec2/spot/instance-advisor/"\n'
                       '[[band]]\ninstance_type = "a2-highgpu-1g"\nregion = "us-central1"\nfrequency = ">20%"\n')
    report = api.pick(None, offers=sheet_without_spot_rates(tmp_path), today=TODAY, spot_advisor=advisor)
    row = by_id(report)[GCP_SPOT]
    assert row.interruption_prior is not None and row.interruption_prior.basis == "spot advisor"
    # the 20% edge read over the default day of running: -ln(0.8) / 24 h (docs/cost.md §2.11)
    assert row.interruption_prior.expected_per_hour == pytest.approx(9.29765e-3, rel=1e-5)
    assert not row.interruption_risk_unknown
    assert any("Spot Advisor band a2-highgpu-1g in us-central1: >20% a month" in s
               for s in unvouched_lines(report.pick.rows))


@pytest.mark.parametrize("rate", [-0.1, 30.5, float("nan"), float("inf")])
def test_a_rate_out_of_bounds_is_an_input_error(rate: float) -> None:
    with pytest.raises(api.InputError) as err:
        api.pick(None, today=TODAY, interruptions_per_hour=rate)
    assert "out of range" in err.value.what and "0.05" in err.value.fix


def test_the_html_report_read_back_from_json_says_it_too(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from gpuscout.documents.read import to_document
    from gpuscout.report.html.page import render_report

    report = api.pick(None, offers=sheet_without_spot_rates(tmp_path), today=TODAY)
    payload = json.loads(json.dumps(pick_payload(report.job, report.pick, report.offers_notes), default=str))
    doc = to_document(payload, "p.json")
    html = render_report([doc]).html
    assert "not ranked: placeholder prices (nobody observed them): autodl-rtx4090-placeholder" in html
    assert f"interruption risk unknown (no rate given): {GCP_SPOT}" in html
    assert by_id(report)[GCP_SPOT].interruption_prior == DEFAULT_PRIOR  # the band survives the round trip
    read_back = {r.offer_id: r for r in doc.pick.rows}[GCP_SPOT]  # type: ignore[attr-defined]
    assert read_back.interruption_prior == DEFAULT_PRIOR and read_back.interruption_risk_unknown


def test_a_skypilot_import_has_no_rates_and_an_advisor_file_gives_its_pools_one(tmp_path: Path) -> None:
    catalog = Path(__file__).parents[1] / "hardware" / "data" / "skypilot_aws_vms.csv"
    plain = by_id(api.pick(None, offers=catalog, cloud="aws", today=TODAY))
    spot = {i: r for i, r in plain.items() if r.tier == "spot" and r.excluded is None}
    assert spot and all(r.interruption_risk_unknown for r in spot.values())
    advisor = tmp_path / "advisor.toml"
    advisor.write_text('observed_at = 2026-11-30\nsource = "aws.amazon.com/ec2/spot/instance-advisor/"\n'
                       '[[band]]\ninstance_type = "p4d.24xlarge"\nregion = "us-east-1"\nfrequency = "<5%"\n')
    told = by_id(api.pick(None, offers=catalog, cloud="aws", today=TODAY, spot_advisor=advisor))
    p4d, g6e = told["aws-p4d.24xlarge-us-east-1a-spot"], told["aws-g6e.xlarge-us-east-1a-spot"]
    assert p4d.interruption_prior is not None and p4d.interruption_prior.basis == "spot advisor"
    assert g6e.interruption_risk_unknown  # the file has no band for it
    unknown_p4d = plain["aws-p4d.24xlarge-us-east-1a-spot"]
    assert p4d.total_p95_usd is not None and unknown_p4d.total_p95_usd is not None
    assert p4d.total_p95_usd < unknown_p4d.total_p95_usd  # "<5%" a month is far calmer than the prior
