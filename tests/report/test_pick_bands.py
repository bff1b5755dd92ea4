"""The default pick's new parts: layouts in words, price ages, money bands, the trial advice and the
bills in the JSON and the HTML report, and `--explain` on a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout.cost.pick_row import PickRow, row_base
from gpuscout.documents.kinds import PickDoc
from gpuscout.documents.read import to_document
from gpuscout.hardware.offers import Offer
from gpuscout.report.bill_block import bill_parts
from gpuscout.report.gpu_layout import layout_words
from gpuscout.report.html.page import render_report
from gpuscout.report.numbers import age, money_band
from gpuscout.report.payload import pick_payload
from gpuscout.report.trial import shell_lines

from . import samples


def laid(count: int, group: int, replicas: int, parallel: str, needed: int = 1) -> PickRow:
    offer = Offer.model_validate({"id": "o", "provider": "p", "gpu": "h100", "gpu_count": count, "price": 1.0,
                                  "price_basis": "gpu", "currency": "USD", "observed_at": date(2026, 11, 1),
                                  "source": "test"})
    return PickRow(**row_base(offer, date(2026, 12, 1)) | {
        "fits": True, "excluded": None, "gpus_needed": needed, "gpus_per_replica": group, "replicas": replicas,
        "parallel": parallel})


def test_layouts_in_words() -> None:
    assert layout_words(laid(8, 1, 8, "data")) == "8 GPUs: 1 per replica × 8 replicas"
    assert layout_words(laid(8, 2, 4, "tensor")) == "8 GPUs: 2 per replica × 4 replicas"
    assert layout_words(laid(8, 8, 1, "tensor")) == "8 GPUs: one replica over 8"
    assert layout_words(laid(8, 8, 1, "zero3", needed=4)) == "8 GPUs: one ZeRO-3 replica (fits on 4)"
    assert layout_words(laid(8, 8, 1, "fsdp", needed=8)) == "8 GPUs: one FSDP replica"
    assert layout_words(laid(6, 4, 1, "tensor")) == "6 GPUs: one replica over 4, 2 idle"
    assert layout_words(laid(1, 1, 1, "data")) == ""  # one GPU: nothing to explain


def test_ages_and_money_bands() -> None:
    assert [age(d) for d in (0, 3, 364, 365, 840)] == ["0 d", "3 d", "364 d", "1.0 y", "2.3 y"]
    assert money_band(3.43, 7.28) == "$3.43–7.28"
    assert money_band(24.5, 52.0, "CNY") == "CN¥24.5–52.0"
    assert money_band(1234.0, 2345.0) == "$1,234–2,345"
    assert money_band(0.037, 0.037) == "$0.0370"  # a bill the minimum fixes: no spread
    assert money_band(3.0, None) == "$3.00–?"


def test_commands_cut_at_80_columns_still_paste_as_one() -> None:
    cmd = "gpuscout bench examples/llama3-8b-qlora.toml --offer aws-p4d-24xlarge-us-east-1-spot-2023 -o a.json"
    lines = shell_lines(cmd)
    assert all(len(line) <= 78 for line in lines) and len(lines) == 2
    assert lines[1].strip().startswith("--offer aws-p4d")  # a flag stays with its value
    assert " ".join(line.strip().removesuffix(" \\") for line in lines) == cmd


def test_the_bill_block_splits_compute_and_adds_up() -> None:
    result = samples.pick_default().pick
    for row in [r for r in result.rows if r.excluded is None and r.cost is not None]:
        parts = dict(bill_parts(row.cost, result.currency, result.exchange_rates))  # type: ignore[arg-type]
        assert {"compute", "billed start-up", "idle tail"} <= set(parts)
        assert sum(parts.values()) == pytest.approx((row.total_usd or 0) / result.currency.usd_per_unit)


def test_json_and_html_carry_bands_and_the_trial(tmp_path: Path) -> None:
    report = samples.pick_default()
    payload = pick_payload(report.job, report.pick, report.offers_notes)
    trial: dict[str, Any] = payload["pick"]["trial"]
    assert trial["needed"] and trial["challenger_id"] and len(trial["trials"]) == 2
    assert trial["in_currency"]["currency"] == "USD" and trial["in_currency"]["trial"] == pytest.approx(
        trial["trial_usd"])
    ranked = [r for r in payload["pick"]["rows"] if r["excluded"] is None]
    assert all(r["in_currency"]["total_low"] <= r["in_currency"]["total"] <= r["in_currency"]["total_high"]
               for r in ranked)
    assert [r["separable"] for r in ranked[:1]] == [None]
    doc = to_document(json.loads(json.dumps(payload)), "p")  # the report reads the JSON back
    assert isinstance(doc, PickDoc) and doc.pick.trial == report.pick.trial
    html = render_report([doc]).html
    assert "at stake" in html and "gpuscout compare a.json b.json" in html and "≈ overlaps the leader" in html


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscout", "pick", "--no-store", *args], capture_output=True,
                          text=True, timeout=300, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})


def test_explain_shows_one_row_in_full_and_an_unknown_id_is_a_user_error() -> None:
    out = run("llama3-8b-qlora", "--explain", "aws-p4d-24xlarge-us-east-1-spot-2023")
    assert out.returncode == 0, out.stderr
    assert "8 GPUs: 1 per replica × 8 replicas" in out.stdout and "band" in out.stdout
    assert "compute" in out.stdout and "billed start-up" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    out = run("llama3-8b-qlora", "--explain", "aws-p4d")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "No offer 'aws-p4d'" in out.stderr and "aws-p4d-24xlarge-us-east-1" in out.stderr


def test_every_example_reads_at_80_columns_with_an_age_on_every_row() -> None:
    from gpuscout.report.pick import pick_screen

    from .screens import pick_rows, render

    for spec in sorted(samples.EXAMPLES.glob("*.toml")):
        if spec.stem.startswith("prices"):  # price sheets (the example and the cloud templates), not jobs
            continue
        result = samples.api.pick(spec, today=samples.TODAY).pick
        text = render(pick_screen(result), 80)
        assert max(len(line) for line in text.splitlines()) <= 80, spec.stem
        ranked = [r.offer_id for r in result.rows if r.excluded is None]
        rows = pick_rows(text)
        assert list(rows) == ranked[:len(rows)] and rows, spec.stem  # ids whole, never cut
        assert all(cells[3].endswith((" d", " y")) for cells in rows.values()), spec.stem
        assert ("No trial needed" in text) != ("at stake" in text), spec.stem
