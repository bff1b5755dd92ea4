"""The trial's decision from what the boxes wrote: compare, measured start-up in the cost, the verdict,
the stored payload, and `report` drawing it.

The bench and doctor results are built from the schema (tests/results), so the decision is tested on
known numbers; the real script's results are decided end to end in test_cli_trial.py.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscout.documents.kinds import CompareDoc
from gpuscout.documents.read import to_document
from gpuscout.hardware.price_sheet import PriceSheet, parse_offer
from gpuscout.report.html.page import render_report
from gpuscout.results.schema import BenchResult, DoctorVerdict
from gpuscout.results.store import save_result
from gpuscout.trial.decision import decide_trial
from gpuscout.trial.driver import Candidate, CandidateRun, TrialRun
from gpuscout.trial.engine import Box, LaunchRequest, TearDown
from gpuscout.trial.record import trial_payload
from results import BASE_TPS, bench_result

TODAY = date(2026, 11, 30)


def offer(offer_id: str, price: float, **more: Any) -> Any:
    return parse_offer({"id": offer_id, "provider": "test", "gpu": "h100-sxm5-80gb", "gpu_count": 1,
                        "price": price, "price_basis": "instance", "currency": "USD", "observed_at": TODAY,
                        "source": "test sheet", "power_on_s": 60, "boot_s": 60} | more)


def sheet(*offers: Any) -> PriceSheet:
    return PriceSheet(path="sheet.toml", offers=tuple(offers))


def doctor_result(offer_id: str, startup_s: float) -> BenchResult:
    verdict = DoctorVerdict(outcome="keep", text="Keep it.", expected={"offer_id": offer_id}, startup_s=startup_s,
                            startup_origin="created_at")
    return bench_result("doctor", cases=()).model_copy(update={"kind": "doctor", "doctor": verdict})


def candidate_run(tmp_path: Path, the_offer: Any, status: str, bench: BenchResult | None,
                  doctor: BenchResult | None = None, predicted: float = 0.5) -> CandidateRun:
    folder = tmp_path / the_offer.id / "results"
    folder.mkdir(parents=True)
    files = []
    for name, result in (("bench.json", bench), ("doctor.json", doctor)):
        if result is not None:
            save_result(result, folder / name)
            files.append(folder / name)
    launched = datetime(2026, 11, 30, 12, tzinfo=UTC)
    box = Box(request=LaunchRequest(candidate=the_offer.id, offer_id=the_offer.id, provider="test", region="",
                                    instance_type="", gpu=the_offer.gpu, gpu_count=1, spot=False, disk_gb=10,
                                    max_wall_s=600), engine="local", launched_at=launched,
              torn_down_at=launched + timedelta(minutes=10))
    return CandidateRun(candidate=Candidate(name=the_offer.id, offer=the_offer, predicted_usd=predicted),
                        status=status, box=box, files=tuple(files), teardown=TearDown(done=True, message="gone"),
                        real_usd=0.42)


def trial_of(*runs: CandidateRun) -> TrialRun:
    return TrialRun(runs=list(runs), script_sha256="abc", started_at=datetime(2026, 11, 30, 12, tzinfo=UTC),
                    ended_at=datetime(2026, 11, 30, 12, 20, tzinfo=UTC))


def test_twice_as_fast_for_the_same_price_is_the_offer_to_rent(tmp_path: Path) -> None:
    slow, fast = offer("slow", 2.0), offer("fast", 2.0)
    trial = trial_of(candidate_run(tmp_path, slow, "benched", bench_result("slow")),
                     candidate_run(tmp_path, fast, "benched", bench_result("fast", tps=[2 * t for t in BASE_TPS])))
    decision = decide_trial(trial, sheet(slow, fast), (), today=TODAY)
    assert decision.outcome == "winner" and decision.rent == "fast"
    assert decision.text.startswith("Rent fast for the whole job.")
    assert decision.compared == ("slow", "fast")
    assert [c.offer_id for c in decision.costs] == ["slow", "fast"]
    assert decision.costs[1].total_usd < decision.costs[0].total_usd
    assert [x.predicted_usd for x in decision.lines] == [0.5, 0.5] and decision.lines[0].real_usd == 0.42


def test_the_same_speed_is_no_measurable_difference_and_the_cheaper_is_taken(tmp_path: Path) -> None:
    dear, cheap = offer("dear", 2.0), offer("cheap", 1.99)
    trial = trial_of(candidate_run(tmp_path, dear, "benched", bench_result("dear")),
                     candidate_run(tmp_path, cheap, "benched", bench_result("cheap")))
    decision = decide_trial(trial, sheet(dear, cheap), (), today=TODAY)
    assert decision.outcome == "no difference" and decision.rent == "cheap"
    assert decision.text.startswith("No measurable difference: take the cheaper, cheap")


def test_the_measured_start_up_replaces_the_offers_own_in_the_whole_jobs_cost(tmp_path: Path) -> None:
    a, b = offer("a", 2.0), offer("b", 2.0)
    plain = decide_trial(trial_of(candidate_run(tmp_path / "1", a, "benched", bench_result("a")),
                                  candidate_run(tmp_path / "1", b, "benched", bench_result("b"))),
                         sheet(a, b), (), today=TODAY)
    measured = decide_trial(trial_of(
        candidate_run(tmp_path / "2", a, "benched", bench_result("a"), doctor_result("a", 3600.0)),
        candidate_run(tmp_path / "2", b, "benched", bench_result("b"), doctor_result("b", 120.0))),
        sheet(a, b), (), today=TODAY)
    # An hour's start-up measured on a at $2/h: its whole job costs (about) $2 more; b's assumed 120 s stands.
    assert measured.costs[0].total_usd - plain.costs[0].total_usd == pytest.approx(2.0 * (3600 - 120) / 3600)
    assert measured.costs[1].total_usd == pytest.approx(plain.costs[1].total_usd)
    assert measured.lines[0].startup_s == 3600.0 and measured.lines[0].doctor == "keep"
    assert any("start-up measured by doctor" in n for n in measured.notes)


def test_region_and_billing_may_differ_between_offers_but_nothing_else(tmp_path: Path) -> None:
    a, b = offer("a", 2.0), offer("b", 2.0)
    in_east = bench_result("a").model_copy(update={"fixed": bench_result("a").fixed.model_copy(
        update={"region": "us-east-1", "billing": "on-demand"})})
    in_west = bench_result("b").model_copy(update={"fixed": bench_result("b").fixed.model_copy(
        update={"region": "us-west-2", "billing": "spot"})})
    fair = decide_trial(trial_of(candidate_run(tmp_path / "1", a, "benched", in_east),
                                 candidate_run(tmp_path / "1", b, "benched", in_west)), sheet(a, b), (), today=TODAY)
    assert fair.outcome != "unfair" and fair.comparison is not None
    other_torch = bench_result("b", libraries={"torch": "2.7.0"})
    unfair = decide_trial(trial_of(candidate_run(tmp_path / "2", a, "benched", bench_result("a")),
                                   candidate_run(tmp_path / "2", b, "benched", other_torch)),
                          sheet(a, b), (), today=TODAY)
    assert unfair.outcome == "unfair" and unfair.rent is None
    assert "libraries.torch: 2.6.0 vs 2.7.0" in unfair.text


def test_one_benched_candidate_is_named_but_not_called_a_winner(tmp_path: Path) -> None:
    a, b = offer("a", 2.0), offer("b", 2.0)
    partial = bench_result("b").model_copy(update={"complete": False})
    decision = decide_trial(trial_of(candidate_run(tmp_path, a, "benched", bench_result("a")),
                                     candidate_run(tmp_path, b, "failed", partial)), sheet(a, b), (), today=TODAY)
    assert decision.outcome == "only one" and decision.rent == "a" and decision.comparison is None
    assert "nothing was compared" in decision.text
    assert any("partial bench result is kept" in n for n in decision.notes)


def test_no_bench_no_verdict(tmp_path: Path) -> None:
    a = offer("a", 2.0)
    trial = trial_of(candidate_run(tmp_path, a, "returned", None))
    trial.stopped_by = 2
    decision = decide_trial(trial, sheet(a), (), today=TODAY)
    assert decision.outcome == "none" and decision.rent is None
    assert "stopped before any bench finished" in decision.text


def test_the_stored_trial_is_drawn_by_report_as_a_comparison(tmp_path: Path) -> None:
    slow, fast = offer("slow", 2.0), offer("fast", 2.0)
    trial = trial_of(candidate_run(tmp_path, slow, "benched", bench_result("slow")),
                     candidate_run(tmp_path, fast, "benched", bench_result("fast", tps=[2 * t for t in BASE_TPS])))
    decision = decide_trial(trial, sheet(slow, fast), (), today=TODAY, deviations=("reused this interpreter",))
    payload = trial_payload({"job": "job.toml", "engine": "local"}, trial, decision)
    assert payload["trial"]["rent"] == "fast" and payload["trial"]["deviations"] == ["reused this interpreter"]
    assert payload["trial"]["candidates"][0]["real_usd"] == 0.42
    doc = to_document(payload, "run 7")
    assert isinstance(doc, CompareDoc) and doc.verdict.winner is not None
    page = render_report([doc], title="trial")
    assert "fast" in page.html and page.plots >= 1


def test_a_stored_trial_that_compared_nothing_is_refused_by_report_with_the_reason(tmp_path: Path) -> None:
    from gpuscout.errors import SpecError

    a = offer("a", 2.0)
    trial = trial_of(candidate_run(tmp_path, a, "benched", bench_result("a")))
    payload = trial_payload({"job": "job.toml"}, trial, decide_trial(trial, sheet(a), (), today=TODAY))
    with pytest.raises(SpecError, match="compared nothing") as caught:
        to_document(payload, "run 8")
    assert "bench.json" in caught.value.fix


def test_the_decision_screen_fits_80_columns_and_ends_with_what_still_bills(tmp_path: Path) -> None:
    from gpuscout.report.trial_run import decision_screen
    from gpuscout.trial.plan import TrialPlan, TrialReport
    from gpuscout.trial.script import ScriptSettings
    from report.screens import render

    slow = offer("lambda-h100-sxm-1x-us-east-1-long-id", 2.0)
    fast = offer("fast", 2.0)
    runs = (candidate_run(tmp_path, slow, "benched", bench_result("slow")),
            candidate_run(tmp_path, fast, "benched", bench_result("fast", tps=[2 * t for t in BASE_TPS])))
    runs[1].teardown = TearDown(done=False, message="sky down failed", command="sky down fast")
    trial = trial_of(*runs)
    the_sheet = sheet(slow, fast)
    decision = decide_trial(trial, the_sheet, (), today=TODAY)
    plan = TrialPlan(job="job.toml", sheet_path=Path("sheet.toml"), sheet=the_sheet, rates=(), engine="skypilot",
                     candidates=tuple(r.candidate for r in runs), settings=ScriptSettings(version="0.1.0"),
                     budget_s=1800, max_usd=5.0, out_dir=tmp_path / "out")
    text = render(decision_screen(TrialReport(plan=plan, run=trial, decision=decision, stored_as=9)), 80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "Rent fast for the whole job." in text
    assert "recorded in the results store as run 9" in text
    last = " ".join(text.split("recorded in the results store")[1].split())
    assert "STILL BILLING: fast: sky down failed. Stop it with: sky down fast" in last


def test_a_side_the_telemetry_saw_disturbed_gets_no_winner_even_though_regions_may_differ(tmp_path: Path) -> None:
    """Two candidates sharing one host (or a noisy neighbour) disturb each other's timings: the trial tolerates
    the offers' own region and billing differences, never a disturbed measurement (compare's rule without
    --allow-diff)."""
    from results import A100, runs_case

    steady = [[t * f for t in BASE_TPS] for f in (1.0, 1.0, 1.0)]
    throttled = [[t * 0.6 * f for t in BASE_TPS] for f in (1.0, 1.0, 1.0)]
    a_offer, b_offer = offer("quiet", 2.0, region="us-east-1"), offer("busy", 1.0, region="eu-west-1",
                                                                    gpu="a100-sxm4-80gb")
    quiet = bench_result("quiet", cases=[runs_case(steady)])
    busy = bench_result("busy", gpu=A100, cases=[runs_case(throttled, gpu="a100", throttled_run=2)])
    trial = trial_of(candidate_run(tmp_path, a_offer, "benched", quiet),
                     candidate_run(tmp_path, b_offer, "benched", busy))
    decision = decide_trial(trial, sheet(a_offer, b_offer), (), today=TODAY)
    assert decision.rent is None and decision.outcome == "disturbed"
    assert "disturbed" in decision.text and "compare … --allow-diff" in decision.text
    undisturbed = bench_result("busy", gpu=A100, cases=[runs_case(throttled, gpu="a100")])
    trial2 = trial_of(candidate_run(tmp_path / "2", a_offer, "benched", quiet),
                      candidate_run(tmp_path / "2", b_offer, "benched", undisturbed))
    assert decide_trial(trial2, sheet(a_offer, b_offer), (), today=TODAY).outcome == "winner"
