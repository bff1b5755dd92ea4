"""`pick --offers A --offers B`: several sheets ranked as one, duplicates named; an offer its source marks
unavailable is listed but ranked after every available one; the billing rules table's reader."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from gpuscout import api
from gpuscout.errors import SpecError
from gpuscout.hardware.billing_rules import billing_rules, parse_rules
from gpuscout.hardware.price_sheet import parse_offer

TODAY = date(2026, 12, 3)


def offer_toml(id_: str, *, provider: str = "RunPod", price: float = 0.69, gpu: str = "rtx-4090",
               currency: str = "USD", region: str = "", extra: str = "") -> str:
    return f"""
[[offer]]
id = "{id_}"
provider = "{provider}"
region = "{region}"
gpu = "{gpu}"
gpu_count = 1
price = {price}
price_basis = "instance"
currency = "{currency}"
observed_at = 2026-12-02
source = "a quote read by hand, 2026-12-02"
{extra}
"""


CNY_SHEET = offer_toml("autodl-4090", provider="AutoDL", price=1.98, currency="CNY", region="CN") + """
[[exchange_rate]]
currency = "CNY"
usd_per_unit = 0.14
observed_at = 2026-12-02
source = "a bank's rate, read by hand"
"""


def sheets(tmp_path: Path, **texts: str) -> list[Path]:
    paths = []
    for name, text in texts.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def test_two_sheets_are_ranked_as_one(tmp_path: Path) -> None:
    usd, cny = sheets(tmp_path, pulled=offer_toml("runpod-4090"), quotes=CNY_SHEET)
    report = api.pick("tiny-finetune", offers=[usd, cny], today=TODAY)
    ranked = {r.offer_id for r in report.pick.rows if r.excluded is None}
    assert ranked == {"runpod-4090", "autodl-4090"}  # the CNY quote priced through the second sheet's rate
    one = api.pick("tiny-finetune", offers=usd, today=TODAY)  # one sheet as before
    assert [r.offer_id for r in one.pick.rows] == ["runpod-4090"]


def test_duplicates_across_sheets_are_named_and_clashing_ids_renamed(tmp_path: Path) -> None:
    a, b = sheets(tmp_path, first=offer_toml("x") + offer_toml("y", price=0.5),
                  second=offer_toml("x", price=0.9) + offer_toml("z", price=0.5))
    report = api.pick("tiny-finetune", offers=[a, b], today=TODAY)
    ids = {r.offer_id for r in report.pick.rows}
    assert ids == {"x", "y", "second:x", "z"}  # the later sheet's clashing id takes its sheet's name
    duplicates = [n for n in report.offers_notes if n.startswith("duplicate offers")]
    assert len(duplicates) == 1 and "y" in duplicates[0] and "z" in duplicates[0]  # same provider, GPU, price
    assert "second:x" not in duplicates[0]  # a different price is not a duplicate
    assert any("already taken" in n for n in report.offers_notes)


def test_an_unavailable_offer_is_ranked_after_every_available_one(tmp_path: Path) -> None:
    (path,) = sheets(tmp_path, stock=offer_toml("cheap-but-gone", price=0.3, extra="available = false")
                     + offer_toml("dear", price=0.9, extra="stock = 2") + offer_toml("zero", price=0.2,
                                                                                    extra="stock = 0"))
    report = api.pick("tiny-finetune", offers=path, today=TODAY)
    order = [r.offer_id for r in report.pick.rows if r.excluded is None]
    assert order == ["dear", "zero", "cheap-but-gone"]  # the unavailable ones last, cheapest first among them
    assert not any(r.pareto for r in report.pick.rows if r.unavailable)
    assert any("marked unavailable" in w for w in report.pick.warnings)
    listed = api.list_offers(path, today=TODAY)
    assert [o.id for o in listed.offers] == ["dear", "zero", "cheap-but-gone"]


def test_only_unavailable_offers_are_still_ranked_with_a_warning(tmp_path: Path) -> None:
    (path,) = sheets(tmp_path, gone=offer_toml("a", extra="available = false"))
    report = api.pick("tiny-finetune", offers=path, today=TODAY)
    assert [r.offer_id for r in report.pick.rows if r.excluded is None] == ["a"]
    assert any("every ranked offer is marked unavailable" in w for w in report.pick.warnings)


def test_stock_and_available_must_agree() -> None:
    base = {"id": "a", "provider": "p", "gpu": "rtx-4090", "gpu_count": 1, "price": 1.0, "price_basis": "instance",
            "currency": "USD", "observed_at": TODAY, "source": "s"}
    with pytest.raises(SpecError, match="stock = 0"):
        parse_offer({**base, "available": True, "stock": 0})
    with pytest.raises(SpecError, match="stock"):
        parse_offer({**base, "stock": -1})
    assert parse_offer({**base, "stock": 3}).stock == 3


def test_list_filters_by_gpu_and_price(tmp_path: Path) -> None:
    (path,) = sheets(tmp_path, s=offer_toml("a", price=0.5) + offer_toml("b", gpu="h100-sxm5-80gb", price=3.0))
    assert [o.id for o in api.list_offers(path, gpu=["h100"]).offers] == ["b"]
    assert [o.id for o in api.list_offers(path, max_price=1.0).offers] == ["a"]
    with pytest.raises(SpecError, match="max_price"):
        api.list_offers(path, max_price=0)


def test_the_rules_table_finds_providers_by_id_name_and_alias() -> None:
    table = billing_rules()
    lam = table.find("lambda")
    assert lam is not None and table.find("LambdaLabs") is lam and table.find("Lambda") is lam
    assert table.find("no-such-cloud") is None
    with pytest.raises(SpecError, match="billing_increment_s"):
        parse_rules({"provider": {"x": {"name": "X", "source": "s", "checked": TODAY, "billing_increment_s": 0}}})
    with pytest.raises(SpecError, match="only"):
        parse_rules({"providers": {}})


def test_the_trial_commands_name_the_sheet_when_both_leaders_share_one(tmp_path: Path) -> None:
    """Two overlapping offers of one sheet beside a second sheet: bench and compare (one sheet each) name theirs."""
    a, b = sheets(tmp_path, pair=offer_toml("r1", gpu="h100-sxm5-80gb", price=2.0, extra="tier = \"spot\"")
                  + offer_toml("r2", gpu="rtx-3090", price=0.3),
                  other=offer_toml("far", gpu="h100-sxm5-80gb", price=40.0))
    report = api.pick("tiny-finetune", offers=[a, b], today=TODAY)
    advice = report.pick.trial
    assert advice is not None and advice.needed and {advice.winner_id, advice.challenger_id} == {"r1", "r2"}
    assert f"--offers {a}" in advice.compare_command
    assert all(f"--offers {a}" in t.command for t in advice.trials)
    # The same two offers in different sheets: no one sheet holds both, and the notes say what to add.
    c, d = sheets(tmp_path, spot=offer_toml("r1", gpu="h100-sxm5-80gb", price=2.0, extra="tier = \"spot\""),
                  ondemand=offer_toml("r2", gpu="rtx-3090", price=0.3))
    split = api.pick("tiny-finetune", offers=[c, d], today=TODAY)
    assert split.pick.trial is not None and "--offers" not in split.pick.trial.compare_command
    assert any("take one price sheet" in n for n in split.offers_notes)
