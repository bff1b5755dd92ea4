"""The language-model slices on tiny configs: every metric with raw samples, failures that do not
stop the run, depth extrapolation, the result file round trip, and Ctrl-C.

Case functions are called in-process where the test is about what a case measures (fast: torch is
imported once), and through `run_bench` (a process per case) where it is about the orchestration.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from gpuscout.errors import SpecError, UnsupportedHere
from gpuscout.measure import bench, depth
from gpuscout.measure.bench import config_hash, run_bench, run_planned
from gpuscout.measure.harness import BenchSettings, PlannedCase
from gpuscout.measure.llm_finetune import plan_finetune_cases, run_finetune_case
from gpuscout.measure.llm_inference import run_inference_case
from gpuscout.measure.llm_setup import LlmCaseSpec, hashed_token, read_texts
from gpuscout.measure.startup import startup_seconds
from gpuscout.results.schema import Case, Metric
from gpuscout.results.store import load_result, save_result
from gpuscout.workload.flops import training_flops
from gpuscout.workload.hf_config import config_with_depth, shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, InferenceJob, load_job, parse_job
from gpuscout.workload.jobtime import checkpoint_saves

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
CONFIG: dict[str, Any] = json.loads((EXAMPLES / "tiny-llama" / "config.json").read_text())
FAST = BenchSettings(device="cpu", warmup=1, repeats=3)
FINETUNE_METRICS = {"step_s", "tokens_per_s", "samples_per_s", "job_s", "achieved_tflops"}
INFERENCE_METRICS = {"ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "prefill_tokens_per_s"}
pytestmark = pytest.mark.usefixtures("one_thread")


def finetune(**fields: Any) -> FinetuneJob:
    job = parse_job({"kind": "finetune", "model": "tiny-llama", "micro_batch": 2, "seq_len": 32, **fields})
    assert isinstance(job, FinetuneJob)
    return job


def spec(job: FinetuneJob | InferenceJob, settings: BenchSettings = FAST, **extra: Any) -> LlmCaseSpec:
    return LlmCaseSpec(name="case", params=bench._case_params(job, settings), job=job, config=CONFIG,
                       settings=settings, device="cpu", **extra)


def by_name(case: Case) -> dict[str, Any]:
    return {m.name: m for m in case.metrics}


@pytest.mark.parametrize(("method", "precision"), [("full", "fp32"), ("full", "bf16_mixed"), ("lora", "fp32"),
                                                   ("lora", "bf16_mixed")])
def test_finetune_case_reports_every_metric_with_raw_samples(method: str, precision: str) -> None:
    case = run_finetune_case(spec(finetune(method=method, precision=precision)))
    metrics = by_name(case)
    assert case.failure is None and set(metrics) == FINETUNE_METRICS
    assert all(len(m.samples) == FAST.repeats and m.summary is not None for m in metrics.values())
    step = metrics["step_s"]
    assert not step.higher_is_better and step.value > 0
    assert metrics["tokens_per_s"].samples[0] == pytest.approx(2 * 32 / step.samples[0])
    assert "MFU not computed on the CPU" in " ".join(case.notes)
    assert {"imports", "model_build", "first_step", "since_boot"} <= {p.name for p in case.startup}
    assert case.peak_memory.process_rss_bytes and case.peak_memory.torch_allocated_bytes is None


def test_lora_trains_only_the_adapters_and_gradient_checkpointing_runs() -> None:
    case = run_finetune_case(spec(finetune(method="lora", gradient_checkpointing=True, optimizer="sgd",
                                           lora={"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})))
    assert case.failure is None
    # rank 4 on q (64→64) and v (64→32) in 2 layers: 2 × 4 × ((64 + 64) + (64 + 32)).
    assert "trainable parameters: 1,792 of" in " ".join(case.notes)


def test_flash_attention_on_the_cpu_falls_back_to_sdpa_with_a_note() -> None:
    case = run_finetune_case(spec(finetune(method="full", precision="fp32", attention="flash", optimizer="adafactor")))
    assert case.failure is None and any("'flash' requested" in n for n in case.notes)


def test_projected_job_time_divides_by_the_data_parallel_ranks_and_adds_the_startup() -> None:
    job = finetune(method="full", precision="fp32", gpus=4, dataset_tokens=1_000_000)
    case = run_finetune_case(spec(job))
    metrics = by_name(case)
    tokens_per_s = metrics["tokens_per_s"].samples[0]
    startup = startup_seconds(case.startup)
    assert 0 < startup < metrics["job_s"].samples[0]
    assert metrics["job_s"].samples[0] == pytest.approx(1_000_000 / tokens_per_s / 4 + startup)


def test_checkpoint_saves_are_timed_and_counted_in_the_job_time() -> None:
    job = finetune(method="lora", dataset_tokens=64_000, checkpoint_every_steps=10)
    case = run_finetune_case(spec(job))
    metrics = by_name(case)
    save = metrics["checkpoint_save_s"].value
    steps = metrics["step_s"].samples[0]
    repeats = 64_000 / (job.micro_batch * job.seq_len)
    saves = checkpoint_saves(job)
    assert save > 0 and saves == int(repeats / job.grad_accum) // 10
    assert metrics["job_s"].samples[0] == pytest.approx(repeats * steps + startup_seconds(case.startup) + saves * save)


def test_depth_slicing_reports_measured_and_extrapolated_values() -> None:
    sliced = BenchSettings(device="cpu", warmup=1, repeats=3, layers=1)
    case = run_finetune_case(spec(finetune(method="full", precision="fp32"), sliced))
    metrics = by_name(case)
    assert (case.layers, case.full_layers) == (1, 2)
    assert {"step_s", "step_s_full_depth", "tokens_per_s_full_depth", "job_s_full_depth"} <= set(metrics)
    assert not metrics["step_s"].extrapolated and metrics["step_s_full_depth"].extrapolated
    one_layer = shape_from_hf_config(config_with_depth(CONFIG, 1), name="x", source="x")
    f = training_flops(finetune(method="full", precision="fp32"), one_layer).layer_fraction
    assert metrics["step_s_full_depth"].samples[0] == pytest.approx(metrics["step_s"].samples[0] * (1 - f + 2 * f))
    assert case.peak_memory.extrapolated_allocated_bytes is not None


def test_depth_formulas() -> None:
    assert depth.scale_time(1.0, 0.75, 2, 8) == pytest.approx(0.25 + 0.75 * 4)
    # rest 100 stays; layers 40 and dynamic 60 scale by 4.
    assert depth.scale_memory(200, 40, 100, 2, 8) == 100 + 100 * 4
    assert depth.scale_memory(50, 40, 100, 2, 8) == 100 + 40 * 4  # dynamic never negative


def test_inference_case_times_prefill_and_decode() -> None:
    job = parse_job({"kind": "inference", "model": "tiny-llama", "weights": "fp32", "prompt_tokens": 16,
                     "output_tokens": 5, "concurrency": 3})
    assert isinstance(job, InferenceJob)
    case = run_inference_case(spec(job, concurrency=3, settings=BenchSettings(device="cpu", warmup=1, repeats=3,
                                                                                layers=1)))
    metrics = by_name(case)
    assert set(metrics) >= INFERENCE_METRICS
    assert {"ttft_s_full_depth", "tpot_s_full_depth"} <= set(metrics)
    ttft, e2e, tpot = (metrics[k].samples for k in ("ttft_s", "e2e_s", "tpot_s"))
    assert all(t < e for t, e in zip(ttft, e2e, strict=True))
    assert tpot[0] == pytest.approx((e2e[0] - ttft[0]) / 4)
    assert metrics["output_tokens_per_s"].samples[0] == pytest.approx(3 * 5 / e2e[0])
    assert not case.failure


def test_quantized_inference_weights_are_unsupported_here() -> None:
    job = parse_job({"kind": "inference", "model": "tiny-llama", "weights": "int4"})
    assert isinstance(job, InferenceJob)
    with pytest.raises(UnsupportedHere, match="int4"):
        run_inference_case(spec(job))


def test_qlora_and_8bit_adamw_on_the_cpu_are_unsupported_and_the_run_continues() -> None:
    plan = [*plan_finetune_cases(spec(finetune(method="qlora", precision="bf16_mixed"))),
            *plan_finetune_cases(spec(finetune(method="lora", optimizer="adamw_8bit"))),
            *plan_finetune_cases(spec(finetune(method="full", precision="fp32")))]
    cases, complete, _ = run_planned(plan, FAST, progress=None)
    kinds = [c.failure.kind if c.failure else None for c in cases]
    assert kinds == ["unsupported", "unsupported", None] and complete
    messages = [c.failure.message for c in cases if c.failure]
    assert "QLoRA" in messages[0] and "not supported here" in messages[0]
    assert "8-bit AdamW" in messages[1]
    assert cases[0].failure is not None and cases[0].failure.size["method"] == "qlora"


def test_user_dataset_feeds_the_model_and_is_hashed(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"sample {i} says hello world"}) for i in range(20)) + "\n")
    settings = BenchSettings(device="cpu", warmup=1, repeats=2, dataset=str(data))
    case = run_finetune_case(spec(finetune(method="full", precision="fp32"), settings))
    assert case.failure is None
    assert read_texts(data)[0] == "sample 0 says hello world"
    assert hashed_token("hello", 1000) == hashed_token("hello", 1000) < 1000
    fixed = bench.fixed_variables(finetune(), bench._ModelRef(CONFIG, config_hash(CONFIG), None, False, None),
                                  settings, probe=False)
    assert fixed.data == str(data) and fixed.data_hash == hashlib.sha256(data.read_bytes()).hexdigest()


def test_a_jsonl_line_without_text_is_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "ok"}\n{"prompt": "no text"}\n')
    with pytest.raises(SpecError, match="line 2"):
        read_texts(data)


def test_inference_bench_at_two_concurrency_levels_round_trips(tmp_path: Path) -> None:
    job = load_job(EXAMPLES / "tiny-inference.toml")
    result = run_bench(job, base_dir=EXAMPLES, settings=BenchSettings(device="cpu", warmup=1, repeats=2, runs=2),
                       progress=None)
    assert result.kind == "inference" and result.complete
    assert [c.params["concurrency"] for c in result.cases] == [1, 4]
    for case in result.cases:
        assert case.failure is None and {m.name for m in case.metrics} >= INFERENCE_METRICS
        assert case.runs == 2 and all(len(m.samples) == 4 for m in case.metrics)
        assert all([len(r.samples) for r in m.runs] == [2, 2] for m in case.metrics)
    fixed = result.fixed
    assert fixed.model_config_hash == hashlib.sha256(json.dumps(CONFIG, sort_keys=True).encode()).hexdigest()
    assert (fixed.data, fixed.seed, fixed.precision, fixed.device) == ("synthetic", 0, "fp32", "cpu")
    assert fixed.settings["concurrency_levels"] == "1,4" and fixed.settings["prompt_tokens"] == 64
    assert fixed.settings["torch_threads"] == 1
    assert any("not a serving engine" in n for n in result.notes)
    assert any("1 torch intra-op thread(s)" in n for n in result.cases[0].notes)
    path = tmp_path / "result.json"
    save_result(result, path)
    assert load_result(path) == result


def test_a_result_of_another_schema_version_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 0, "kind": "finetune"}))
    with pytest.raises(SpecError, match="schema version 0"):
        load_result(path)


def _finished(name: str) -> Case:
    return Case(name=name, params={})


def test_ctrl_c_between_cases_returns_what_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_run_isolated(fn: Any, *args: Any, case: str, **kwargs: Any) -> Case:
        calls.append(case)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _finished(case)

    monkeypatch.setattr(bench, "run_watched", fake_run_isolated)
    job = load_job(EXAMPLES / "tiny-inference.toml")
    result = run_bench(job, base_dir=EXAMPLES, settings=FAST.model_copy(update={"runs": 1}), progress=None)
    assert not result.complete
    assert [c.name for c in result.cases] == ["concurrency 1", "concurrency 4"]
    assert result.cases[0].failure is None
    assert result.cases[1].failure is not None and result.cases[1].failure.kind == "interrupted"
    assert any("interrupted by Ctrl-C" in n for n in result.notes)


def test_ctrl_c_stops_the_remaining_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(name: str) -> Case:
        raise KeyboardInterrupt

    plan = [PlannedCase("a", _finished, ("a",)), PlannedCase("b", interrupt, ("b",)),
            PlannedCase("c", _finished, ("c",))]
    monkeypatch.setattr(bench, "run_watched", lambda fn, *a, case, size, timeout_s: fn(*a))
    cases, complete, notes = run_planned(plan, FAST.model_copy(update={"runs": 1}), progress=None)
    assert [c.name for c in cases] == ["a", "b"] and not complete
    assert notes == ["interrupted by Ctrl-C: 1 of 3 case runs finished"]


def test_runs_are_interleaved_and_merged_per_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """run 1: a, b; run 2: a, b; run 3: a, b — then one case per name with every run's samples."""
    order: list[str] = []

    def timed(name: str) -> Case:
        order.append(name)
        value = float(len(order))
        return Case(name=name, params={}, metrics=(Metric(name="step_s", unit="s", value=value, samples=(value,
                                                                                                           value)),))

    plan = [PlannedCase("a", timed, ("a",)), PlannedCase("b", timed, ("b",))]
    monkeypatch.setattr(bench, "run_watched", lambda fn, *a, case, size, timeout_s: fn(*a))
    cases, complete, _ = run_planned(plan, FAST.model_copy(update={"runs": 3}), progress=None)
    assert order == ["a", "b", "a", "b", "a", "b"] and complete
    a = cases[0]
    assert a.runs == 3 and [r.samples for r in a.metrics[0].runs] == [(1.0, 1.0), (3.0, 3.0), (5.0, 5.0)]
    assert a.metrics[0].value == 3.0 and a.metrics[0].between_run_cv == pytest.approx(2 / 3)


def test_an_interrupt_in_a_later_run_keeps_the_earlier_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def flaky(name: str) -> Case:
        calls.append(name)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return Case(name=name, params={}, metrics=(Metric(name="step_s", unit="s", value=1.0, samples=(1.0, 1.0)),))

    plan = [PlannedCase("a", flaky, ("a",)), PlannedCase("b", flaky, ("b",))]
    monkeypatch.setattr(bench, "run_watched", lambda fn, *a, case, size, timeout_s: fn(*a))
    cases, complete, notes = run_planned(plan, FAST.model_copy(update={"runs": 3}), progress=None)
    assert not complete and [c.runs for c in cases] == [2, 2]
    assert cases[1].failure is None and cases[1].failed_runs[0].kind == "interrupted"
    assert notes == ["interrupted by Ctrl-C: 3 of 6 case runs finished"]


def test_bench_without_a_job_or_probe_is_a_user_error() -> None:
    from gpuscout.errors import GpuscoutError

    with pytest.raises(GpuscoutError, match="Nothing to measure"):
        run_bench(None, base_dir=None, settings=FAST, progress=None)


def test_a_checkpoint_directory_loads_its_weights(tmp_path: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(CONFIG)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(fields.pop("model_type"), **fields))
    with torch.no_grad():
        model.lm_head.weight.fill_(0.25)  # a value random initialisation would never produce
    model.save_pretrained(tmp_path)
    assert list(tmp_path.glob("*.safetensors"))
    ref = bench._ModelRef.of(finetune(model=str(tmp_path)), None)
    assert ref.weights and ref.model_dir == str(tmp_path.resolve())
    settings = BenchSettings(device="cpu", warmup=0, repeats=1, layers=1)
    loaded = spec(finetune(method="full", precision="fp32", optimizer="sgd"), settings, model_dir=ref.model_dir,
                  weights=True)
    from gpuscout.measure.llm_setup import build_model, built_config

    built = build_model(loaded, built_config(CONFIG, settings, 2)[0], attention="sdpa", dtype=torch.float32)
    assert len(built.model.layers) == 1 and float(built.lm_head.weight[0, 0].detach()) == 0.25
    assert run_finetune_case(loaded).failure is None
