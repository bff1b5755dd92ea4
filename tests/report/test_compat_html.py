"""The compatibility findings survive `--json` and reach the HTML report: the estimate's table of
findings per GPU, and the pick's ranked offers priced with a fallback."""

from __future__ import annotations

import html
import json
from typing import Any

from gpuscout.documents.kinds import EstimateDoc, PickDoc
from gpuscout.documents.read import to_document
from gpuscout.report.html.page import render_report
from gpuscout.report.payload import estimate_payload, pick_payload

from .samples import estimate_default, pick_compat


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data, default=str))  # what `--json` prints, read back


def test_the_estimate_json_keeps_each_finding_and_the_report_lists_them() -> None:
    e = estimate_default()
    doc = to_document(_json(estimate_payload(e.job, e.screening)), "estimate.json")
    assert isinstance(doc, EstimateDoc)
    by_sku = {v.gpu_sku: v for v in doc.screening.verdicts}
    assert [f.rule for f in by_sku["t4"].compat] == ["bf16"] and by_sku["t4"].speed is None
    assert [f.rule for f in by_sku["mi300x"].compat] == ["bitsandbytes-rocm"] and by_sku["mi300x"].speed
    page = html.unescape(render_report([doc]).html)
    assert "Compatibility findings" in page
    assert "No job time: bf16 needs tensor cores of sm80+" in page
    assert "Runs if: bitsandbytes on ROCm (gfx942)" in page


def test_the_pick_json_keeps_the_fallback_and_the_report_shows_it() -> None:
    p = pick_compat()
    doc = to_document(_json(pick_payload(p.job, p.pick, p.offers_notes)), "pick.json")
    assert isinstance(doc, PickDoc)
    (geforce,) = [r for r in doc.pick.rows if r.gpu_sku == "rtx-4090"]
    assert geforce.excluded is None and [f.rule for f in geforce.compat] == ["no-peer-to-peer"]
    page = html.unescape(render_report([doc]).html)
    assert "Ranked with a compatibility finding" in page
    assert "Runs slower: this GPU's driver refuses GPU-to-GPU (P2P) copies" in page
