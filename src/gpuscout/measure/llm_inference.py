"""The inference slice of `gpuscout bench`: planning, and a prefill + greedy decode loop at one level.

Runs inside the case's own process. One repeat = one generation: a prefill of prompt_tokens for
`concurrency` sequences into a fresh DynamicCache (TTFT), then output_tokens − 1 single-token
decode steps, greedy, EOS ignored so every machine produces the same number of tokens
(vLLM's ignore_eos for the same reason). Timed with CUDA events on a GPU (start, after the
prefill, end; one synchronize), perf_counter_ns on the CPU. tpot = (e2e − ttft) / (n − 1), as
docs/measurement.md §1 defines it. This is the framework's own generation loop, not a serving engine.
"""

from __future__ import annotations

import time
from typing import Any

from gpuscout.errors import UnsupportedHere
from gpuscout.measure import depth
from gpuscout.measure.harness import PlannedCase, derived_metric, timed_metric
from gpuscout.measure.llm_setup import (
    LlmCaseSpec,
    build_model,
    cpu_threads_note,
    model_shape,
    ready_config,
    token_batches,
    weights_note,
)
from gpuscout.measure.peak_memory import PeakMemoryMonitor
from gpuscout.measure.startup import StartupClock, startup_seconds
from gpuscout.results.schema import E2E_S, TPOT_S, TTFT_S, Case, Metric
from gpuscout.torchmodel.llm import import_torch_stack, next_token
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.jobtime import whole_job_formula, whole_job_s

INFERENCE_DTYPES = ("fp32", "bf16", "fp16")
FRAMEWORK_LOOP_NOTE = (
    "inference is measured with transformers' own generation loop (prefill into a DynamicCache, then "
    "greedy single-token decode steps, EOS ignored): not a serving engine — no continuous batching, paged "
    "KV cache or CUDA graphs. Serving engines (vLLM …) are measured with the endpoint load test."
)


def plan_inference_cases(spec: LlmCaseSpec, levels: list[int]) -> list[PlannedCase]:
    cases = []
    for level in levels:
        params = {**spec.params, "concurrency": level}
        one = LlmCaseSpec(**{**spec.__dict__, "name": f"concurrency {level}", "params": params, "concurrency": level})
        cases.append(PlannedCase(name=one.name, fn=run_inference_case, args=(one,), size=params))
    return cases


def concurrency_levels(job: InferenceJob) -> list[int]:
    """The job's concurrency and, so that two levels are always measured, 1 when it differs."""
    return sorted({1, job.concurrency})


def run_inference_case(spec: LlmCaseSpec) -> Case:
    job = spec.job
    if not isinstance(job, InferenceJob):
        raise TypeError("run_inference_case needs an InferenceJob")
    clock = StartupClock(spec.settings.created_at)
    if job.weights not in INFERENCE_DTYPES:
        raise UnsupportedHere(f"weights = '{job.weights}': the framework loop here measures fp32/bf16/fp16 weights. "
                              "Quantized serving is measured through its engine with the endpoint load test.")
    torch = import_torch_stack("transformers", purpose="gpuscout bench")
    config, built, full_layers = ready_config(spec, torch, clock)
    attention = "sdpa"  # inference specs name no attention kernel; sdpa is transformers' default
    notes = [weights_note(spec), *_inference_notes(job), *cpu_threads_note(torch, spec.device)]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[job.weights]
    monitor = PeakMemoryMonitor(spec.device)
    with monitor:
        model = build_model(spec, config, attention=attention, dtype=dtype).eval().requires_grad_(False)
        prompts = token_batches(spec, vocab=int(model.config.vocab_size), batch=spec.concurrency,
                                seq_len=job.prompt_tokens, count=1)[0]
        clock.mark("model_build")
        started = time.time()
        runs = [_generate_once(model, prompts, job.output_tokens, spec.device)
                for _ in range(spec.settings.warmup + spec.settings.repeats)]
        timed = runs[spec.settings.warmup:] if spec.settings.warmup else runs
        clock.first_step(runs[0][1], started_at=started)
    metrics = _inference_metrics(spec, job, timed, startup_seconds(clock.phases()))
    memory_full = None
    if built is not None:
        metrics += _inference_full_depth(spec, job, config, timed, built, full_layers, notes)
        layers_b, rest_b = depth.static_bytes(model, None)
        memory_full = depth.memory_full_depth(monitor, layers_b, rest_b, built, full_layers, notes)
    return Case(name=spec.name, params=spec.params, layers=built, full_layers=full_layers if built else None,
                metrics=tuple(metrics), peak_memory=monitor.result(extrapolated_allocated_bytes=memory_full),
                startup=clock.phases(), notes=tuple(notes))


def _inference_notes(job: InferenceJob) -> list[str]:
    notes = []
    if job.kv_cache_dtype != job.weights:
        notes.append(f"KV cache kept in the weight dtype ({job.weights}) by DynamicCache; the spec's "
                     f"kv_cache_dtype '{job.kv_cache_dtype}' applies to serving engines")
    if job.tensor_parallel > 1:
        notes.append(f"measured on one device; the spec's tensor_parallel = {job.tensor_parallel} is not applied")
    return notes


def _generate_once(model: Any, prompts: Any, output_tokens: int, device: str) -> tuple[float, float]:
    """(TTFT, end-to-end) seconds of one greedy generation of `output_tokens` from `prompts`."""
    import torch
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        if device == "cuda":
            event: Any = torch.cuda.Event
            start, first, end = (event(enable_timing=True) for _ in range(3))
            start.record()
            ids = next_token(model, prompts, cache)
            first.record()
            for _ in range(output_tokens - 1):
                ids = next_token(model, ids, cache)
            end.record()
            end.synchronize()
            return start.elapsed_time(first) / 1000.0, start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter_ns()
        ids = next_token(model, prompts, cache)
        t1 = time.perf_counter_ns()
        for _ in range(output_tokens - 1):
            ids = next_token(model, ids, cache)
        t2 = time.perf_counter_ns()
        return (t1 - t0) / 1e9, (t2 - t0) / 1e9


def _inference_metrics(spec: LlmCaseSpec, job: InferenceJob, runs: list[tuple[float, float]],
                       startup_s: float) -> list[Metric]:
    b, n, p = spec.concurrency, job.output_tokens, job.prompt_tokens
    ttft, e2e = [r[0] for r in runs], [r[1] for r in runs]
    metrics = [
        timed_metric(TTFT_S, "s", ttft, note="prefill of the batch's prompts + first token"),
        timed_metric(E2E_S, "s", e2e, note="prefill + all decode steps"),
    ]
    if n > 1:
        metrics.append(timed_metric(TPOT_S, "s", [(e - t) / (n - 1) for t, e in runs],
                                    note="(e2e − ttft) / (output_tokens − 1)"))
    metrics += [
        derived_metric("output_tokens_per_s", "tokens/s", [b * n / e for e in e2e],
                       note="concurrency × output_tokens / e2e"),
        derived_metric("prefill_tokens_per_s", "tokens/s", [b * p / t for t in ttft],
                       note="concurrency × prompt_tokens / ttft"),
        timed_metric("job_s", "s", [whole_job_s(job, e, startup_s=startup_s, concurrency=b) for e in e2e],
                     note="projected: " + whole_job_formula(job, startup_s=startup_s, save_s=None, concurrency=b)
                          + "; this loop's generations, not a serving engine's continuous batching"),
    ]
    return metrics


def _inference_full_depth(spec: LlmCaseSpec, job: InferenceJob, config: dict[str, Any],
                          runs: list[tuple[float, float]], built: int, full: int, notes: list[str]) -> list[Metric]:
    shape = model_shape(config)
    if shape is None:
        notes.append("no full-depth extrapolation: gpuscout does not know this model_type's layout")
        return []
    b, n = spec.concurrency, job.output_tokens
    f_prefill = depth.prefill_layer_fraction(shape, b, job.prompt_tokens, eager=False)
    f_decode = depth.decode_layer_fraction(shape)
    ttft = [depth.scale_time(t, f_prefill, built, full) for t, _ in runs]
    tpot = [depth.scale_time((e - t) / max(n - 1, 1), f_decode, built, full) for t, e in runs]
    e2e = [t + (n - 1) * d for t, d in zip(ttft, tpot, strict=True)]
    how = (f"t_full = t_{built} · ((1 − f) + f · {full}/{built}); prefill f = {f_prefill:.3f} (FLOPs share), "
           f"decode f = {f_decode:.3f} (weight-bytes share)")
    metrics = [timed_metric("ttft_s_full_depth", "s", ttft, note=how, extrapolated=True),
               timed_metric("e2e_s_full_depth", "s", e2e, note=f"ttft + (n − 1) · tpot; {how}", extrapolated=True)]
    if n > 1:
        metrics.append(timed_metric("tpot_s_full_depth", "s", tpot, note=how, extrapolated=True))
    metrics.append(derived_metric("output_tokens_per_s_full_depth", "tokens/s", [b * n / e for e in e2e],
                                  note=how, extrapolated=True))
    return metrics
