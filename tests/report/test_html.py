"""The HTML report without a browser: every kind renders, the page is self-contained, hostile text stays text."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuscout.documents.kinds import ChecksDoc, EstimateDoc, PickDoc, RunDoc
from gpuscout.documents.read import read_documents, to_document
from gpuscout.errors import MissingDependencyError, SpecError
from gpuscout.report.html.interact import SCRIPT
from gpuscout.report.html.page import render_report
from gpuscout.results.beside import BesideRow, EstimateBeside

from .html_samples import HOSTILE, SLO, write_all, write_hostile

SVG_NS = "{http://www.w3.org/2000/svg}"


class Page(HTMLParser):
    """Every element with its attributes, and all the text a reader sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("outputs")
    return write_all(folder) | write_hostile(folder)


def test_each_output_is_read_as_its_kind(files: dict[str, Path], tmp_path: Path) -> None:
    docs = read_documents([files[k] for k in ("estimate", "pick", "compare", "bench", "load-a", "checks", "doctor")],
                          tmp_path / "no-store.sqlite")
    assert [d.kind for d in docs] == ["estimate", "pick", "compare", "run", "run", "checks", "checks"]
    checks = docs[-2]
    assert isinstance(checks, ChecksDoc) and checks.result_kind == "burn-in"
    pcie = next(m for c in checks.cases for m in c.metrics if m.name == "gen")
    assert (pcie.value, pcie.low, pcie.high, pcie.status) == (4.0, 5.0, None, "warn")
    doctor = docs[-1]
    assert isinstance(doctor, ChecksDoc) and doctor.result_kind == "doctor"
    assert doctor.verdict == "RETURN: Return it: GPU 1: matmul bf16 sustained below its band."
    findings = doctor.cases[0]  # the verdict's findings come first, each with its band and the doctor's status
    assert findings.name == "findings" and [m.status for m in findings.metrics] == ["fail", "pass", "pass"]
    sustained = findings.metrics[0]
    assert (sustained.name, sustained.low, sustained.high) == ("matmul bf16 sustained (GPU 1)", 250e12, 275e12)
    assert [c.name for c in doctor.cases[1:]] == ["matmul bf16 · GPU 1"]
    load = docs[4]
    assert isinstance(load, RunDoc) and load.slo == SLO


def test_every_view_draws_its_plots_with_a_tooltip_per_mark(files: dict[str, Path], tmp_path: Path) -> None:
    docs = read_documents(list(files.values()), tmp_path / "no-store.sqlite")
    rendered = render_report(docs)
    page = parse(rendered.html)
    plots = [attrs for tag, attrs in page.tags if tag == "figure"]
    names = {str(a["data-plot"]) for a in plots}
    assert {"estimate-memory", "pick-cost-time", "compare-forest", "cdf-step_s", "cdf-ttft_s", "cdf-tpot_s",
            "sweep-ttft_s", "sweep-tpot_s", "sweep-goodput", "checks-bands", "pick-bills", "load-timeline"} <= names
    assert rendered.plots == len(plots)
    for svg in _svgs(rendered.html):
        root = ET.fromstring(svg)  # each plot is well-formed XML
        ids = [e.get("id") for e in root.iter() if e.get("id")]
        assert len(ids) == len(set(ids))
    marks = sum(int(str(a["data-marks"])) for a in plots)
    titles = sum(1 for tag, _ in page.tags if tag == "title") - 1  # the page's own <title>
    assert titles >= marks > 0


def test_the_page_is_self_contained(files: dict[str, Path], tmp_path: Path) -> None:
    rendered = render_report(read_documents(list(files.values()), tmp_path / "s.sqlite"))
    page = parse(rendered.html)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"link", "img", "iframe", "object", "embed", "foreignobject", "image"}
    policy = [a for tag, a in page.tags if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert policy and "default-src 'none'" in str(policy[0]["content"])
    # One script, the page's own, allowed by the hash of its exact text and by nothing else.
    scripts = re.findall(r"<script>(.*?)</script>", rendered.html, re.S)
    assert len(scripts) == 1 and [t for t, _ in page.tags].count("script") == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert re.search(r"script-src ([^;]*);", str(policy[0]["content"])).group(1) == f"'sha256-{digest}'"  # type: ignore[union-attr]
    assert "unsafe-inline" not in re.search(r"script-src [^;]*", str(policy[0]["content"])).group(0)  # type: ignore[union-attr]
    urls = [v for _, attrs in page.tags for k, v in attrs.items() if v and k in ("href", "src", "xlink:href")]
    assert all(u.startswith("#") for u in urls)
    assert "http://" not in rendered.html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("http://127.0.0.1:8000", "")


def test_hostile_strings_render_as_text(files: dict[str, Path], tmp_path: Path) -> None:
    hostile = [files[k] for k in ("hostile-pick", "hostile-estimate", "hostile-load", "hostile-checks")]
    rendered = render_report(read_documents(hostile, tmp_path / "s.sqlite"))
    page = parse(rendered.html)
    assert not [t for t, _ in page.tags if t in ("img", "iframe")]
    assert re.findall(r"<script>(.*?)</script>", rendered.html, re.S) == [SCRIPT]  # the page's own, nothing planted
    assert not [(t, k) for t, attrs in page.tags for k in attrs if k.startswith("on")]
    assert not [v for _, attrs in page.tags for v in attrs.values() if v and "javascript:" in v.lower()]
    text = "".join(page.text)
    for s in HOSTILE:
        assert s in text, s  # shown to the reader exactly as the result wrote it
    drawn = "".join(e.text or "" for svg in _svgs(rendered.html) for e in ET.fromstring(svg).iter(f"{SVG_NS}text"))
    assert HOSTILE[5] in drawn  # matplotlib drew the dollars as dollars, not as mathtext
    assert HOSTILE[6].split(" ")[0] in drawn  # CJK text reaches the plot (the browser's font draws it)


def test_a_foreign_or_damaged_file_is_a_clear_error(tmp_path: Path, files: dict[str, Path]) -> None:
    with pytest.raises(SpecError, match="is not a gpuscout output"):
        to_document({"hello": "world"}, "x.json")
    pick = json.loads(files["pick"].read_text())
    pick["pick"]["rows"][0]["runtime_s"] = "fast"
    with pytest.raises(SpecError, match=r"pick\.rows\.0\.runtime_s"):
        to_document(pick, "p.json")
    bench = json.loads(files["bench"].read_text())
    bench["cases"][0]["metrics"][0]["value"] = 1e200
    with pytest.raises(SpecError, match="beyond"):
        to_document(bench, "b.json")


def test_a_list_field_holding_a_number_is_a_clear_error_or_nothing(files: dict[str, Path]) -> None:
    """A hand-edited `"cases": 5` (found by the report_doc fuzz surface): the lenient reader of kinds this
    version has no view for reads no items; the strict readers name the field. Never a TypeError."""
    checks = {"schema_version": 1, "kind": "someday", "name": "x", "cases": 5, "notes": 7}
    doc = to_document(checks, "c.json")
    assert isinstance(doc, ChecksDoc) and doc.cases == () and doc.notes == ()
    nested = {**checks, "cases": [{"name": "a", "metrics": 3, "notes": 2}]}
    case = to_document(nested, "c.json").cases[0]  # type: ignore[union-attr]
    assert case.metrics == () and case.name == "a"
    pick = json.loads(files["pick"].read_text())
    pick["pick"]["rows"] = 5
    with pytest.raises(SpecError, match=r"pick\.rows"):
        to_document(pick, "p.json")
    bench = json.loads(files["bench"].read_text())
    bench["costs"] = 3
    with pytest.raises(SpecError, match="costs: must be a list"):
        to_document(bench, "b.json")


def test_estimate_and_pick_round_trip_from_their_json(files: dict[str, Path]) -> None:
    estimate = to_document(json.loads(files["estimate"].read_text()), "e")
    pick = to_document(json.loads(files["pick"].read_text()), "p")
    assert isinstance(estimate, EstimateDoc) and len(estimate.screening.verdicts) > 20
    assert isinstance(pick, PickDoc) and any(r.pareto for r in pick.pick.rows)


def _svgs(html: str) -> list[str]:
    out, start = [], html.find("<svg")
    while start != -1:
        end = html.index("</svg>", start) + len("</svg>")
        out.append(html[start:end])
        start = html.find("<svg", end)
    return out


def test_a_bench_on_a_gpu_shows_the_estimate_beside_it(files: dict[str, Path]) -> None:
    """bench --json on a GPU prints gpuscout's estimate beside the measurement (each row with its ratio)."""
    bench = json.loads(files["bench"].read_text())
    bench["estimate"] = EstimateBeside(gpu_sku="h100-sxm5-80gb", case="train", rows=(
        BesideRow(metric="step_s", unit="s", estimate=0.5, measured=0.52),)).model_dump(mode="json")
    doc = to_document(bench, "b.json")
    assert isinstance(doc, RunDoc) and doc.estimate is not None and doc.estimate.rows[0].ratio == 1.04
    assert "gpuscout&#x27;s estimate beside it" in render_report([doc]).html


def test_without_matplotlib_report_says_how_to_install_it(files: dict[str, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` meets when it is missing
    doc = to_document(json.loads(files["pick"].read_text()), "p.json")
    with pytest.raises(MissingDependencyError, match="needs matplotlib") as err:
        render_report([doc])
    assert "gpuscout[report]" in err.value.fix


def test_the_bill_bars_of_an_offer_served_by_several_instances_add_up_to_its_ranked_total() -> None:
    """Llama-3.1-70B for 20 users at P95 TTFT < 1 s: a replica holds fewer users than the load, so the
    offer is priced as several instances; its bar is their whole bill (the ranked total), not one's."""
    from datetime import date

    from gpuscout.cost.pick import pick
    from gpuscout.hardware.price_sheet import load_price_sheet
    from gpuscout.report.payload import pick_payload
    from gpuscout.workload.job import InferenceJob, Slo
    from gpuscout.workload.presets import load_llm_preset

    sheet = Path(__file__).parent.parent.parent / "src" / "gpuscout" / "examples" / "prices.example.toml"
    job = InferenceJob.model_validate({"kind": "inference", "name": "70B, 20 users", "model": "llama-3.1-70b",
                                       "prompt_tokens": 1024, "output_tokens": 256, "concurrency": 20,
                                       "requests": 10_000, "slo": Slo(ttft_p95_s=1.0)})
    offers = [o for o in load_price_sheet(sheet).offers if o.id == "lambda-h100-sxm-8x"]
    result = pick(job, load_llm_preset("llama-3.1-70b"), offers, today=date(2026, 11, 30))
    row = result.rows[0]
    assert row.metrics["instances"] > 1 and row.total_usd is not None
    page = render_report([to_document(pick_payload(job, result, ()), "pick.json")]).html
    tips = re.findall(r"<title>(lambda-h100-sxm-8x · [^<]*)</title>", page)
    assert tips, "no bill segments drawn"
    assert all(f"{row.metrics['instances']:.0f} instances)" in t for t in tips)
    # Every segment names the bar's whole: the ranked total, to the cent.
    assert all(f"of ${row.total_usd:,.2f}" in t for t in tips), (tips, row.total_usd)
