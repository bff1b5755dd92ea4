"""The Chinese-cloud sheet templates (AutoDL, Alibaba Cloud, Tencent Cloud): they load in `pick` as
shipped (placeholders, ranked only on request), a filled-in copy ranks without the flag, and their
billing terms are the ones gpuscout's billing-rules table gives for the provider.

Runs the real CLI in a subprocess, from a folder outside the checkout, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(str(resources.files("gpuscout").joinpath("examples")))
RULES = tomllib.loads((resources.files("gpuscout.hardware") / "billing_rules.toml").read_text(encoding="utf-8"))
TEMPLATES = {"autodl": "prices.autodl.cny.toml", "aliyun": "prices.aliyun.cny.toml",
             "tencentcloud": "prices.tencentcloud.cny.toml"}  # fmt: skip
JOB = EXAMPLES / "tiny-finetune.toml"
RATE = 0.14  # a test value for the filled-in copy, not an observed rate


def pick(*args: str, cwd: Path, code: int = 0) -> dict[str, Any]:
    """`pick --json` over a template; `code` 4: every offer unranked (no admissible option, docs/design.md §4.8)."""
    out = subprocess.run([sys.executable, "-m", "gpuscout", "pick", str(JOB), "--no-store", "--json", *args],
                         capture_output=True, text=True, timeout=300, cwd=cwd)  # fmt: skip
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr
    result = json.loads(out.stdout)["pick"]
    assert isinstance(result, dict)
    return result


def fill_in(template: str) -> str:
    """What a user does with the template: a price on every offer, the placeholder marks gone, the
    source named, and every commented-out block (disk, egress, exchange rate) filled in and enabled."""
    prices = iter(range(2, 100))
    text = re.sub(r"^price = 1\.0\b.*$", lambda _: f"price = {next(prices)}.5", template, flags=re.MULTILINE)
    text = re.sub(r"^placeholder = true\n", "", text, flags=re.MULTILINE)
    text = re.sub(r'^source = "PLACEHOLDER:[^"]*"', 'source = "console, read in the test"', text, flags=re.MULTILINE)
    # Uncomment the example blocks: "  # [[offer.storage]]" and the key lines under it.
    text = re.sub(r"^(\s*)# (\[\[offer\.(?:storage|egress_tiers)\]\]|\[\[exchange_rate\]\])", r"\1\2", text,
                  flags=re.MULTILINE)  # fmt: skip
    keys = r"name|size_gb|price_per_gb_month|hours_per_month|price_per_gb|currency|usd_per_unit|observed_at|source"
    text = re.sub(rf"^(\s*)# ((?:{keys}) = )", r"\1\2", text, flags=re.MULTILINE)
    text = re.sub(r"^(\s*)(price_per_gb_month|price_per_gb) = 0\.0\b", r"\1\2 = 0.5", text, flags=re.MULTILINE)
    return re.sub(r"^usd_per_unit = 0\.0\b", f"usd_per_unit = {RATE}", text, flags=re.MULTILINE)


@pytest.mark.parametrize("provider", sorted(TEMPLATES))
def test_template_uses_the_billing_rules_table(provider: str) -> None:
    sheet = tomllib.loads((EXAMPLES / TEMPLATES[provider]).read_text(encoding="utf-8"))
    rule = RULES["provider"][provider]
    assert sheet["offer"], "a template shows at least one offer"
    for offer in sheet["offer"]:
        assert offer["provider"] == rule["name"]
        assert offer["currency"] == rule["currency"] == "CNY"
        assert offer["billing_increment_s"] == rule["billing_increment_s"]
        assert offer["min_billed_s"] == rule["min_billed_s"]
        assert offer["billing_starts"] == rule["billing_starts"]
        # Shipped prices are placeholders and say so: never ranked by accident.
        assert offer["placeholder"] is True
        assert offer["source"].startswith("PLACEHOLDER:")
    assert "exchange_rate" not in sheet, "a shipped rate would be used silently; the user gives one"


@pytest.mark.parametrize("provider", sorted(TEMPLATES))
def test_template_comments_explain_the_fields_in_english_and_chinese(provider: str) -> None:
    text = (EXAMPLES / TEMPLATES[provider]).read_text(encoding="utf-8")
    header = text[: text.index("[[offer]]")]
    for field in ("price", "price_basis", "billing_increment_s", "min_billed_s", "billing_starts", "observed_at",
                  "placeholder", "startup_s", "idle_tail_s"):  # fmt: skip
        assert re.search(rf"^#\s+(?:\w+, )?{field}\b", header, flags=re.MULTILINE), f"{field} is not explained"
    assert re.search(r"[\u4e00-\u9fff]", header), "the header explains the fields in Chinese too"
    assert "gpuscout pick" in header and "--fx CNY=" in header


@pytest.mark.parametrize("provider", sorted(TEMPLATES))
def test_template_loads_in_pick_and_ranks_only_with_include_placeholders(provider: str, tmp_path: Path) -> None:
    sheet = str(EXAMPLES / TEMPLATES[provider])
    ids = [o["id"] for o in tomllib.loads(Path(sheet).read_text(encoding="utf-8"))["offer"]]
    # By the name `gpuscout examples` lists, from a folder without the file: the bundled template.
    # As shipped every price is a placeholder: nothing is ranked, and the exit code says so.
    shown = pick("--offers", TEMPLATES[provider].removesuffix(".toml"), "--fx", f"CNY={RATE}", cwd=tmp_path, code=4)
    assert {r["offer_id"] for r in shown["rows"]} == set(ids)
    assert all(r["placeholder"] and r["excluded"] == "placeholder price: nobody observed it" for r in shown["rows"])
    ranked = pick("--offers", sheet, "--fx", f"CNY={RATE}", "--include-placeholders", cwd=tmp_path)
    assert all(r["excluded"] is None and r["placeholder"] for r in ranked["rows"])
    assert all(r["currency"] == "CNY" and r["total_usd"] > 0 for r in ranked["rows"])


@pytest.mark.parametrize("provider", sorted(TEMPLATES))
def test_a_filled_in_copy_ranks_without_the_flag(provider: str, tmp_path: Path) -> None:
    filled = tmp_path / TEMPLATES[provider]
    filled.write_text(fill_in((EXAMPLES / TEMPLATES[provider]).read_text(encoding="utf-8")), encoding="utf-8")
    document = tomllib.loads(filled.read_text(encoding="utf-8"))
    assert document["exchange_rate"][0]["usd_per_unit"] == RATE
    assert not any(o.get("placeholder") for o in document["offer"])
    result = pick("--offers", str(filled), "--currency", "CNY", cwd=tmp_path)
    rows = result["rows"]
    assert {r["offer_id"] for r in rows} == {o["id"] for o in document["offer"]}
    assert all(r["excluded"] is None and not r["placeholder"] for r in rows)
    assert [rate["usd_per_unit"] for rate in result["exchange_rates"]] == [RATE]  # the sheet's own rate
    offers = {o["id"]: o for o in document["offer"]}
    for row in rows:
        offer = offers[row["offer_id"]]
        # At least the billed start-up and idle tail at the filled-in price, converted at the sheet's rate.
        floor_usd = (offer["startup_s"] + offer["idle_tail_s"]) / 3600 * offer["price"] * RATE
        assert row["total_usd"] >= floor_usd * 0.999, row["offer_id"]


def test_examples_lists_the_templates_as_templates(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "gpuscout", "examples"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**os.environ, "COLUMNS": "160"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if line.count("│") >= 3}
    for name in TEMPLATES.values():
        count = len(tomllib.loads((EXAMPLES / name).read_text(encoding="utf-8"))["offer"])
        assert f"TEMPLATE, {count} offers to fill in" in rows[name.removesuffix(".toml")]
    assert "EXAMPLE offers" in rows["prices.example"]
