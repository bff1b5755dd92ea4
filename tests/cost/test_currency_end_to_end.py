"""The user's currency end to end (docs/cost.md §3): ranked in USD, read in CNY.

A sheet of CNY offers ranks with a rate and names the missing flag without one; a budget is in the
display currency; screens print CN¥ (never $) and JSON carries the currency; compare and cost show
the same; negative rates are refused with what / why / fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.hardware.currency import parse_fx
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.report.compare import render_json, render_markdown, render_table
from gpuscout.report.payload import calculator_payload, pick_payload
from gpuscout.report.pick import bill_table, calculator_table, pick_screen
from report.screens import render
from results import A100, BASE_TPS, bench_result

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "llama3-8b-qlora.toml"
TODAY = date(2026, 12, 1)


def _offer(offer_id: str, gpu: str, price: float, currency: str = "CNY") -> str:
    return (f'[[offer]]\nid = "{offer_id}"\nprovider = "Yun"\ngpu = "{gpu}"\ngpu_count = 1\nprice = {price}\n'
            f'price_basis = "gpu"\ncurrency = "{currency}"\nobserved_at = 2026-11-30\nsource = "test quote"\n\n')


CNY_SHEET = _offer("yun-h100", "h100-sxm5-80gb", 20.0) + _offer("yun-l40s", "l40s", 6.0)


@pytest.fixture
def cny_sheet(tmp_path: Path) -> Path:
    path = tmp_path / "cny.toml"
    path.write_text(CNY_SHEET)
    return path


def test_a_cny_sheet_ranks_with_a_rate_and_shows_yuan(cny_sheet: Path) -> None:
    report = api.pick(JOB, offers=cny_sheet, fx=["CNY=0.14"], currency="CNY", today=TODAY)
    ranked = [r for r in report.pick.rows if r.excluded is None]
    assert {r.offer_id for r in ranked} == {"yun-h100", "yun-l40s"}
    assert report.pick.currency.code == "CNY" and report.pick.currency.usd_per_unit == 0.14
    for row in ranked:  # ranked in USD; the bill in yuan is the offer's own, unchanged by the round trip
        assert row.cost is not None and row.total_usd == pytest.approx(row.cost.total * 0.14)
    screen = render(pick_screen(report.pick), 80)
    assert "ranked by total job cost (CNY)" in screen and "CN¥" in screen and "$" not in screen
    cheapest = ranked[0].cost
    assert cheapest is not None and f"CN¥{cheapest.total:,.2f}" in screen


def test_a_cny_sheet_without_a_rate_names_the_missing_flag(cny_sheet: Path) -> None:
    rows = api.pick(JOB, offers=cny_sheet, today=TODAY).pick.rows
    assert all(r.excluded is not None for r in rows)
    for row in rows:
        assert row.excluded is not None
        assert "--fx CNY=" in row.excluded and "[[exchange_rate]] for CNY to the price sheet" in row.excluded
    with pytest.raises(SpecError, match="--currency CNY needs an exchange rate") as err:
        api.pick(JOB, offers=cny_sheet, currency="CNY", today=TODAY)
    assert "--fx CNY=" in err.value.fix and "[[exchange_rate]]" in err.value.fix


def test_a_budget_is_in_the_display_currency(cny_sheet: Path) -> None:
    totals = {r.offer_id: r.cost.total for r in api.pick(JOB, offers=cny_sheet, fx=["CNY=0.14"], currency="CNY",
                                                           today=TODAY).pick.rows if r.cost is not None}
    cheap, dear = sorted(totals, key=totals.__getitem__)
    budget = (totals[cheap] + totals[dear]) / 2  # between the two, in yuan
    rows = {r.offer_id: r for r in api.pick(JOB, offers=cny_sheet, fx=["CNY=0.14"], currency="CNY", budget=budget,
                                            today=TODAY).pick.rows}
    assert rows[cheap].excluded is None
    assert rows[dear].excluded == f"over budget (CN¥{totals[dear]:,.2f} > CN¥{budget:,.2f})"
    # The same number read as USD would have let both through: the budget really is in yuan.
    as_usd = api.pick(JOB, offers=cny_sheet, fx=["CNY=0.14"], budget_usd=budget, today=TODAY).pick.rows
    assert all(r.excluded is None for r in as_usd)


@pytest.mark.parametrize("budget", [0.0, -300.0, float("nan")])
def test_a_budget_must_be_a_positive_amount(cny_sheet: Path, budget: float) -> None:
    with pytest.raises(SpecError, match=r"^budget .* is not a positive amount") as err:
        api.pick(JOB, offers=cny_sheet, fx=["CNY=0.14"], currency="CNY", budget=budget, today=TODAY)
    assert "CNY" in err.value.why


def test_usd_offers_are_converted_into_the_display_currency() -> None:
    usd, cny = (api.pick(JOB, currency=c, today=TODAY).pick for c in (None, "CNY"))  # the bundled sheet's rate
    assert [r.offer_id for r in usd.rows] == [r.offer_id for r in cny.rows]  # the ranking does not move
    payload = pick_payload(api.load_job(JOB), cny, ())["pick"]
    assert payload["currency"]["code"] == "CNY" and payload["currency"]["rate"]["usd_per_unit"] == 0.14
    for row in payload["rows"]:
        if row["total_usd"] is not None:
            assert row["in_currency"]["total"] == pytest.approx(row["total_usd"] / 0.14)
            assert row["in_currency"]["currency"] == "CNY"


def test_pick_json_from_the_command_line_carries_the_currency(cny_sheet: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "gpuscout", "pick", str(JOB), "--offers", str(cny_sheet), "--fx",
                          "CNY=0.14", "--currency", "CNY", "--budget", "1000", "--json"],
                         capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    pick = json.loads(out.stdout)["pick"]
    assert pick["currency"]["code"] == "CNY"
    assert all(r["in_currency"]["currency"] == "CNY" for r in pick["rows"])
    bad = subprocess.run([sys.executable, "-m", "gpuscout", "pick", str(JOB), "--offers", str(cny_sheet),
                          "--currency", "CNY"], capture_output=True, text=True, timeout=120,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 1 and "--fx CNY=" in bad.stderr and "Traceback" not in bad.stderr


# --- compare --------------------------------------------------------------------------------------

def test_compare_costs_are_shown_in_the_display_currency(tmp_path: Path) -> None:
    sheet = tmp_path / "prices.toml"
    sheet.write_text(_offer("yun-a100", "a100-sxm4-80gb", 12.0) + _offer("lambda-h100", "h100-sxm5-80gb", 2.99, "USD"))
    results = [bench_result("A-a100", gpu=A100), bench_result("B-h100", tps=[t * 2 for t in BASE_TPS])]
    report = api.compare(results, offers=sheet, offer_ids=["yun-a100", "lambda-h100"], fx=["CNY=0.14"],
                         currency="CNY", today=TODAY)
    args = (report.comparison, report.verdict, report.costs)
    kwargs = {"notes": report.warnings, "rates": report.rates, "currency": report.currency}
    table = render(render_table(*args, **kwargs), 120)
    cost_part = table[table.index("Cost of the whole job"):]
    assert "(CNY)" in cost_part and "CN¥" in cost_part and "$" not in cost_part
    markdown = render_markdown(*args, **kwargs)
    assert "total CNY (range)" in markdown and "$" not in markdown[markdown.index("## Cost"):]
    data = json.loads(render_json(*args, **kwargs))
    assert data["currency"]["code"] == "CNY"
    for cost in data["costs"]:
        assert cost["in_currency"]["total"] == pytest.approx(cost["total_usd"] / 0.14)
    assert "CN¥" in report.verdict.text and "$" not in report.verdict.text


def test_compare_currency_needs_a_sheet() -> None:
    results = [bench_result("A-a100", gpu=A100), bench_result("B-h100")]
    with pytest.raises(SpecError, match="currency and keep_stopped_days price the job"):
        api.compare(results, currency="CNY")


# --- cost -------------------------------------------------------------------------------------------

def test_the_calculator_in_yuan() -> None:
    report = api.cost(hours=10, usd_per_gpu_hour=1.4, gpus=2, storage_usd=1.4, currency="CNY", fx=["CNY=0.14"])
    assert report.currency is not None and report.currency.code == "CNY"
    assert report.plain is not None
    screen = render(calculator_table(report.plain, report.billed, report.currency), 80)
    assert "Job cost (CNY)" in screen and "CN¥200.00" in screen and "CN¥210.00" in screen and "$" not in screen
    payload = calculator_payload(report.plain, report.billed, report.currency)
    assert payload["total_usd"] == pytest.approx(29.4) and payload["total"] == pytest.approx(210.0)
    assert payload["currency"]["code"] == "CNY"
    with pytest.raises(SpecError, match="--currency CNY needs an exchange rate"):
        api.cost(hours=10, usd_per_gpu_hour=1.4, currency="CNY")


def test_an_offers_bill_in_the_display_currency_with_the_extras(cny_sheet: Path) -> None:
    report = api.cost(hours=2, offers=cny_sheet, offer="yun-h100", storage_usd=1.4, retry_usd=2.8, currency="USD",
                      fx=["CNY=0.14"])
    assert report.bill is not None and report.bill.currency == "USD"
    assert report.bill.total == pytest.approx((20.0 * 2 + 10.0 + 20.0) * 0.14)
    assert [ln.name for ln in report.bill.lines][-2:] == ["storage (given)", "retries (given)"]
    screen = render(bill_table(report.bill, "bill", report.rates), 100)
    assert "$" in screen and "converted from CNY to USD" in screen and "1 CNY = 0.140 USD" in screen
    in_yuan = api.cost(hours=2, offers=cny_sheet, offer="yun-h100", fx=["CNY=0.14"], currency="CNY")
    assert in_yuan.bill is not None and in_yuan.bill.total == pytest.approx(40.0)


def test_an_offer_brings_its_own_terms_so_manual_ones_are_refused(cny_sheet: Path) -> None:
    with pytest.raises(SpecError, match="usd_per_gpu_hour, startup_s cannot be used with offer"):
        api.cost(hours=1, offers=cny_sheet, offer="yun-h100", usd_per_gpu_hour=2.0, startup_s=60, fx=["CNY=0.14"])


def test_keep_stopped_needs_an_offer() -> None:
    from gpuscout.cost.billing import CostOptions

    with pytest.raises(SpecError, match="keep_stopped_days needs an offer"):
        api.cost(hours=1, usd_per_gpu_hour=2.0, options=CostOptions(keep_stopped_days=3))


# --- bad rates --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["CNY=-0.14", "CNY=0", "CNY=-1e3"])
def test_negative_or_zero_rates_are_refused_with_what_why_fix(text: str) -> None:
    with pytest.raises(SpecError, match="not a valid exchange rate") as err:
        parse_fx(text, TODAY)
    assert "greater than 0" in err.value.why and "--fx CNY=0.14" in err.value.fix


def test_a_negative_rate_in_a_sheet_is_refused(tmp_path: Path) -> None:
    sheet = tmp_path / "bad.toml"
    sheet.write_text(CNY_SHEET + '[[exchange_rate]]\ncurrency = "CNY"\nusd_per_unit = -0.14\n'
                     'observed_at = 2026-11-30\nsource = "typo"\n')
    with pytest.raises(SpecError, match="exchange_rate #1") as err:
        load_price_sheet(sheet)
    assert "usd_per_unit" in err.value.why


def test_an_unknown_display_currency_is_refused(cny_sheet: Path) -> None:
    with pytest.raises(SpecError, match="--currency 'RMB'") as err:
        api.pick(JOB, offers=cny_sheet, currency="RMB", today=TODAY)
    assert "ISO 4217" in err.value.fix


@pytest.mark.parametrize(("field", "value"), [("price", "-20.0"), ("stopped_price_per_hour", "-1.0")])
def test_negative_prices_are_refused_with_the_field(tmp_path: Path, field: str, value: str) -> None:
    sheet = tmp_path / "bad.toml"
    text = _offer("yun-h100", "h100-sxm5-80gb", 20.0)
    text = text.replace("price = 20.0\n", f"price = {value}\n") if field == "price" else text + f"{field} = {value}\n"
    sheet.write_text(text)
    with pytest.raises(SpecError, match="is not a valid offer") as err:
        load_price_sheet(sheet)
    assert field in err.value.why and "greater than" in err.value.why
