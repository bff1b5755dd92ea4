"""Doctor results are ordinary results: compare reads two of them, pick takes their measured start-up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from gpuscout.cost.measured_startup import apply_measured_startup
from gpuscout.hardware.price_sheet import default_price_sheet, load_price_sheet
from gpuscout.report.compare import render_markdown, render_table
from gpuscout.results.compare import compare_results
from gpuscout.results.schema import (
    BenchResult,
    Case,
    DoctorFinding,
    DoctorOutcome,
    DoctorVerdict,
    Fingerprint,
    FixedVariables,
    Metric,
)
from gpuscout.results.verdict import decide


def doctor_result(outcome: DoctorOutcome, h2d: float, *, finding: str = "", quick: bool = True,
                  startup_s: float | None = None, offer: str | None = None) -> BenchResult:
    findings = (DoctorFinding(check="pcie link", area="health", status="fail", message=finding),) if finding else ()
    case = Case(name="host copy h2d · GPU 0", params={"direction": "h2d", "gpu": 0},
                metrics=(Metric(name="h2d_bytes_per_s", unit="bytes/s", value=h2d, samples=(h2d, h2d * 1.01, h2d),
                                higher_is_better=True),))
    expected: dict[str, Any] = {"offer_id": offer} if offer else {}
    return BenchResult(
        kind="doctor", created_at=datetime(2026, 12, 1, tzinfo=UTC), name="doctor", job={},
        fixed=FixedVariables(kind="doctor", model="none", model_config_hash="none", data="synthetic", seed=0,
                             precision="per check", device="cuda", warmup=0, repeats=2,
                             settings={"quick": quick, "nproc": 1, "url": None}),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11", platform="linux", cpu_model="x", cpu_cores=8,
                                libraries={}, gpu_name="NVIDIA H100 80GB HBM3", gpu_sku="h100-sxm5-80gb", gpu_count=1),
        cases=(case,),
        doctor=DoctorVerdict(outcome=outcome, text=outcome, findings=findings, expected=expected, startup_s=startup_s,
                             startup_origin="created_at" if startup_s else None))


def test_compare_of_two_doctor_results_keeps_the_healthy_machine_and_says_why_not_the_other() -> None:
    good = doctor_result("keep", 52e9)
    sick = doctor_result("return", 25e9, finding="GPU 0: PCIe link gen5 x8 while busy, of the card's x16")
    comparison = compare_results([good, sick])
    verdict = decide(comparison)
    assert (verdict.winner, verdict.outcome) == ("A", "winner")
    assert verdict.text == ("Keep A (H100 SXM5 80GB): its doctor run found nothing wrong; B (H100 SXM5 80GB): return "
                            "(fail: GPU 0: PCIe link gen5 x8 while busy, of the card's x16).")
    [row] = comparison.cases[0].metrics
    assert row.ratios[1].advantage is not None and row.ratios[1].advantage < 0.5  # B's copies at half A's
    markdown = render_markdown(comparison, verdict)
    assert "## Verdict" in markdown and "Keep A" in markdown
    console = Console(width=80, record=True)
    console.print(render_table(comparison, verdict))
    assert "h2d_bytes_per_s" in console.export_text()


def test_two_doctor_results_to_keep_name_no_winner_and_differing_runs_are_unfair() -> None:
    both = decide(compare_results([doctor_result("keep", 52e9), doctor_result("keep", 51e9)]))
    assert both.outcome == "no difference" and both.winner is None
    unfair = decide(compare_results([doctor_result("keep", 52e9), doctor_result("keep", 51e9, quick=False)],
                                    allow_diff=True))
    assert unfair.outcome != "unfair"  # --allow-diff lets it through
    neither = decide(compare_results([doctor_result("return", 20e9, finding="x"), doctor_result("inconclusive", 50e9)]))
    assert neither.outcome == "inconclusive" and neither.text.startswith("None of these is one to keep")


def test_pick_takes_the_start_up_doctor_measured_for_its_offer() -> None:
    sheet = load_price_sheet(default_price_sheet())
    offer = next(o for o in sheet.offers if o.id == "lambda-h100-sxm-1x")
    measured = doctor_result("keep", 52e9, startup_s=300.0, offer=offer.id)
    offers, notes = apply_measured_startup(sheet.offers, [measured])
    updated = next(o for o in offers if o.id == offer.id)
    assert updated.power_on_s + updated.boot_s == 300.0
    assert [o for o in offers if o.id != offer.id] == [o for o in sheet.offers if o.id != offer.id]
    assert notes == [f"{offer.id}: start-up measured by doctor on 2026-12-01, 300 s from creation to a ready GPU "
                     f"(the offer assumed {offer.power_on_s + offer.boot_s:,.0f} s power-on + boot)"]
