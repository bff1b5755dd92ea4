"""compare: fairness diff, ratios and CIs on known samples, failures, memory, headline, verdict."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscout.cost.verdict import CostPoint
from gpuscout.errors import SpecError
from gpuscout.results.compare import compare_results, headline_metric
from gpuscout.results.fairness import UnfairComparisonError
from gpuscout.results.verdict import decide

from . import A100, BASE_TPS, GIB, bench_result, failed_case, metric, train_case

DOUBLE = [t * 2 for t in BASE_TPS]


def test_twice_the_throughput_gives_a_ratio_of_two_with_a_ci_that_brackets_it() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE, gpu=A100)])
    for name in ("tokens_per_s", "step_s"):  # higher and lower is better: both read "2× better"
        r = next(m for m in c.cases[0].metrics if m.name == name).ratios
        assert r[0].finding == "baseline"
        assert r[1].advantage == pytest.approx(2.0)
        assert r[1].ci95_low is not None and r[1].ci95_high is not None
        assert 1.9 < r[1].ci95_low < 2.0 < r[1].ci95_high < 2.1
        assert r[1].finding == "better"
    step = next(m for m in c.cases[0].metrics if m.name == "step_s")
    assert step.ratios[1].ratio == pytest.approx(0.5)  # the raw ratio stays unoriented


def test_slower_machine_reads_worse() -> None:
    c = compare_results([bench_result("A", tps=DOUBLE), bench_result("B")])
    r = next(m for m in c.cases[0].metrics if m.name == "tokens_per_s").ratios[1]
    assert r.advantage == pytest.approx(0.5) and r.finding == "worse"
    assert r.ci95_high is not None and r.ci95_high < 1


def test_identical_samples_show_no_measurable_difference() -> None:
    c = compare_results([bench_result("A"), bench_result("B", gpu=A100)])
    r = next(m for m in c.cases[0].metrics if m.name == "tokens_per_s").ratios[1]
    assert r.ci95_low is not None and r.ci95_high is not None
    assert r.ci95_low < 1.0 < r.ci95_high
    assert r.finding == "no measurable difference"
    verdict = decide(c)
    assert verdict.winner is None
    assert "No measurable difference" in verdict.text


def test_bootstrap_is_seeded_so_the_same_files_give_the_same_intervals() -> None:
    results = [bench_result("A"), bench_result("B", tps=DOUBLE)]
    assert compare_results(results) == compare_results(results)


def test_three_results_are_all_compared_with_the_first() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE), bench_result("C", tps=[t * 4 for t in
                                                                                                 BASE_TPS])])
    r = next(m for m in c.cases[0].metrics if m.name == "tokens_per_s").ratios
    assert [x.advantage for x in r] == pytest.approx([1.0, 2.0, 4.0])
    assert c.headline is not None
    assert c.headline.advantage[1][2].advantage == pytest.approx(2.0)  # C over B
    verdict = decide(c)
    assert verdict.winner == "C"
    assert "than A" in verdict.text and "than B" in verdict.text


def test_fairness_diff_lists_exactly_the_changed_fields_and_refuses() -> None:
    a = bench_result("A")
    b = bench_result("B", settings={"seq_len": 1024}, libraries={"torch": "2.7.0"}, gpu=A100)
    with pytest.raises(UnfairComparisonError) as err:
        compare_results([a, b])
    assert "settings.seq_len" in err.value.what and "libraries.torch" in err.value.what
    assert "2.6.0 vs 2.7.0" in err.value.what
    assert "--allow-diff" in err.value.fix
    c = compare_results([a, b], allow_diff=True)
    assert not c.fairness.fair
    assert {d.field for d in c.fairness.differences} == {"settings.seq_len", "libraries.torch"}
    seq = next(d for d in c.fairness.differences if d.field == "settings.seq_len")
    assert seq.values == ("512", "1024")
    # The machine is what is being compared: listed, never flagged.
    assert {"gpu_name", "gpu_sku"} <= {d.field for d in c.fairness.machine_differences}


@pytest.mark.parametrize(("field", "change"), [
    ("cuda", {"gpu": A100 | {"cuda": "12.4"}}), ("driver", {"gpu": A100 | {"driver": "550.54"}}),
])
def test_cuda_and_driver_versions_are_fixed_variables(field: str, change: dict[str, Any]) -> None:
    with pytest.raises(UnfairComparisonError, match=field):
        compare_results([bench_result("A"), bench_result("B", **change)])


@pytest.mark.parametrize("field", ["region", "billing", "checkpoint_hash"])
def test_region_billing_and_checkpoint_are_fixed_variables(field: str) -> None:
    a = bench_result("A")
    b = bench_result("B")
    b = b.model_copy(update={"fixed": b.fixed.model_copy(update={field: "other"})})
    with pytest.raises(UnfairComparisonError, match=field):
        compare_results([a, b])
    assert decide(compare_results([a, b], allow_diff=True)).text.startswith("Caution")


def test_allow_diff_names_a_winner_with_a_caution_and_never_without_it() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE, libraries={"torch": "2.7.0"})],
                        allow_diff=True)
    verdict = decide(c)
    assert verdict.winner == "B"
    assert verdict.text.startswith("Caution") and "libraries.torch" in verdict.text
    strict = decide(c.model_copy(update={"allow_diff": False}))
    assert strict.winner is None and "No winner" in strict.text


def test_device_cuda_against_cpu_is_flagged() -> None:
    with pytest.raises(UnfairComparisonError, match="device: cuda vs cpu"):
        compare_results([bench_result("A"), bench_result("B", device="cpu")])


def test_library_present_on_one_side_only_is_flagged() -> None:
    c = compare_results([bench_result("A"), bench_result("B", libraries={"peft": "0.14.0"})], allow_diff=True)
    assert [(d.field, d.values) for d in c.fairness.differences] == [("libraries.peft", ("(absent)", "0.14.0"))]


def test_results_of_different_kinds_cannot_be_compared() -> None:
    with pytest.raises(SpecError, match="different kinds"):
        compare_results([bench_result("A"), bench_result("B", kind="inference")])


def test_one_result_is_not_a_comparison() -> None:
    with pytest.raises(SpecError, match="at least two"):
        compare_results([bench_result("A")])


def test_failures_memory_headroom_and_startup_are_side_by_side() -> None:
    a = bench_result("A", cases=[train_case(BASE_TPS), train_case(BASE_TPS, name="big")])
    b = bench_result("B", cases=[train_case(DOUBLE, nvml_gib=30), failed_case("big")])
    c = compare_results([a, b])
    big = next(x for x in c.cases if x.name == "big")
    assert big.metrics == ()
    assert big.failures[0] is None and big.failures[1] is not None
    assert big.failures[1].kind == "oom" and big.failures[1].size["micro_batch"] == 8
    train = c.cases[0]
    assert train.memory[1].peak_source == "NVML device use"
    assert train.memory[1].headroom_bytes == 50 * GIB
    assert train.startup[0] == {"imports": 3.0, "model_build": 12.0}


def test_cases_missing_from_some_results_are_listed() -> None:
    a = bench_result("A", cases=[train_case(BASE_TPS), train_case(BASE_TPS, name="extra")])
    c = compare_results([a, bench_result("B")])
    assert [x.name for x in c.cases] == ["train"]
    assert c.unmatched_cases == {"extra": ("A",)}


def test_depth_slice_uses_the_extrapolated_throughput() -> None:
    full = metric("tokens_per_s", [t / 10 for t in BASE_TPS], "tokens/s", extrapolated=True)
    case = train_case(BASE_TPS, extra=[full]).model_copy(update={"layers": 2, "full_layers": 32})
    result = bench_result("A", cases=[case], layers=2)
    _, chosen = headline_metric(result)
    assert chosen.extrapolated and chosen.value == pytest.approx(100.0, rel=0.01)
    c = compare_results([result, result.model_copy(update={"name": "B"})])
    assert c.headline is not None and c.headline.extrapolated
    assert any("depth slice" in n for n in c.fairness.notes)
    labelled = [m for m in c.cases[0].metrics if m.extrapolated]
    assert [m.name for m in labelled] == ["tokens_per_s"]


def test_depth_slice_without_extrapolation_has_no_headline() -> None:
    case = train_case(BASE_TPS).model_copy(update={"layers": 2, "full_layers": 32})
    with pytest.raises(SpecError, match="extrapolated"):
        headline_metric(bench_result("A", cases=[case], layers=2))


def test_single_readings_give_a_ratio_without_a_ci() -> None:
    one = [1000.0]
    c = compare_results([bench_result("A", tps=one), bench_result("B", tps=[2000.0])])
    r = next(m for m in c.cases[0].metrics if m.name == "tokens_per_s").ratios[1]
    assert r.advantage == pytest.approx(2.0) and r.ci95_low is None and r.finding == "single reading"


def point(total: float, spread: float = 0.01, note: str = "Lambda's 2026-09-20 price") -> CostPoint:
    return CostPoint(total_usd=total, low_usd=total * (1 - spread), high_usd=total * (1 + spread), price_note=note)


def test_cost_verdict_names_the_cheaper_machine_with_the_time_ratio() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE, gpu=A100)])
    verdict = decide(c, [point(52.80), point(41.20)])
    assert verdict.winner == "B" and verdict.objective == "total cost"
    assert "costs 22% less in total" in verdict.text
    assert "$41.20 vs $52.80" in verdict.text and "Lambda's 2026-09-20 price" in verdict.text
    assert "2.00× sooner" in verdict.text and "95% CI" in verdict.text


def test_cheaper_but_slower_says_so() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE)])
    verdict = decide(c, [point(30.0), point(41.0)])
    assert verdict.winner == "A"
    assert "costs 27% less in total ($30.00 vs $41.00)" in verdict.text
    assert "and takes 2.00× as long (95% CI" in verdict.text


def test_time_breaks_a_cost_tie() -> None:
    c = compare_results([bench_result("A"), bench_result("B", tps=DOUBLE)])
    verdict = decide(c, [point(40.0, 0.05), point(40.5, 0.05)])
    assert verdict.winner == "B"
    assert "No measurable difference in total cost" in verdict.text and "time breaks the tie" in verdict.text


def test_no_winner_when_cost_and_time_both_tie() -> None:
    c = compare_results([bench_result("A"), bench_result("B")])
    verdict = decide(c, [point(40.0, 0.05), point(40.5, 0.05)])
    assert verdict.winner is None and "no measurable difference in speed either" in verdict.text


def test_a_case_run_differently_on_one_machine_is_flagged() -> None:
    other = train_case(BASE_TPS).model_copy(update={"params": {"micro_batch": 1, "seq_len": 512, "attention": "sdpa"}})
    mine = train_case(BASE_TPS).model_copy(update={"params": {"micro_batch": 1, "seq_len": 512, "attention": "flash"}})
    with pytest.raises(UnfairComparisonError, match=r"case train\.attention: flash vs sdpa"):
        compare_results([bench_result("A", cases=[mine]), bench_result("B", cases=[other])])
