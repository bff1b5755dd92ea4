"""Fixed inputs for the rendered screens: nothing here reads a clock, a machine or the network.

Estimates and rankings come from the real library on the shipped catalog and example sheet (a
fixed `TODAY` decides which prices are stale); bench, compare and load results are built from
fixed samples with the helpers in tests/results.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, date, datetime
from pathlib import Path

from gpuscout import api
from gpuscout.cost.load_cost import LoadCost, price_load
from gpuscout.loadgen.search import SearchResult, SearchStep
from gpuscout.results.schema import (
    BenchResult,
    Case,
    Fingerprint,
    FixedVariables,
    LoadPrediction,
    Metric,
    PredictedLevel,
)
from gpuscout.workload.job import Slo
from results import A100, BASE_TPS, bench_result, failed_case, metric, runs_case

# Three runs a side whose means drift a little, as on a real machine.
DRIFT = (1.0, 0.99, 1.01)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PRICES = Path(__file__).parent / "fixtures" / "prices.toml"
COMPAT_OFFERS = Path(__file__).parent / "fixtures" / "compat_offers.toml"
TODAY = date(2026, 12, 1)  # staleness of the bundled example prices is judged on this day


def estimate_default() -> api.EstimateReport:
    return api.estimate(None)


def estimate_rtx4090() -> api.EstimateReport:
    return api.estimate(None, gpus=["rtx-4090"])


def estimate_serving() -> api.EstimateReport:
    """The 70B serving example on one GPU: inference terms, GPU-count table, prefill/decode phases."""
    return api.estimate(EXAMPLES / "llama3-70b-serving-8k.toml", gpus=["h100-sxm"])


def edge_job() -> api.Job:
    """The default job at micro-batch 1 with the longest sequence that fits an RTX 5090: under 1% headroom,
    inside the estimator's error band, so *tight*."""
    from gpuscout.api.jobs import job_and_model
    from gpuscout.estimator.fit import largest_fitting
    from gpuscout.hardware.catalog import find_gpu

    job, model, _ = job_and_model(None)
    job = job.model_copy(update={"micro_batch": 1, "grad_accum": 16, "allow_long_context": True,
                                 "name": "Llama-3-8B QLoRA at the RTX 5090's edge"})
    return job.model_copy(update={"seq_len": largest_fitting(job, model, find_gpu("rtx-5090"), "seq_len", 65536)})


def estimate_tight() -> api.EstimateReport:
    return api.estimate(edge_job(), gpus=["rtx-5090", "h100-sxm"])


def pick_tight() -> api.PickReport:
    """As written (no plan may add margin): the RTX 5090 row stays tight and carries its OOM risk."""
    sheet = PRICES.with_name("prices-5090.toml")
    with contextlib.chdir(sheet.parent):  # the trial's commands name the sheet as given: the same anywhere
        return api.pick(edge_job(), offers=Path(sheet.name), today=TODAY, as_written=True)


def pick_default() -> api.PickReport:
    return api.pick(None, today=TODAY)


def pick_compat() -> api.PickReport:
    """The 70B serving example (its SLO dropped) on eight RTX 4090s without P2P, eight A100s and a T4:
    the 4090 layout ranks with its host-staged slowdown marked; the T4 does not fit at all."""
    job = api.load_job(EXAMPLES / "llama3-70b-serving-8k.toml").model_copy(update={"slo": Slo()})
    with contextlib.chdir(COMPAT_OFFERS.parent):  # the trial's commands name the sheet as given: the same anywhere
        return api.pick(job, offers=Path(COMPAT_OFFERS.name), today=TODAY)


def estimate_compat() -> api.EstimateReport:
    """The QLoRA example (FlashAttention 2, bf16, bitsandbytes) on a T4 (cannot run) and an MI300X (runs
    if bitsandbytes is new enough)."""
    return api.estimate(EXAMPLES / "llama3-8b-qlora.toml", gpus=["t4", "mi300x"])


def compare_two() -> api.CompareReport:
    """An A100 at ~1000 tokens/s against an H100 at twice that, three runs each, each priced on one offer."""
    a = bench_result("A-a100", gpu=A100, cases=[runs_case([[t * d for t in BASE_TPS] for d in DRIFT], gpu="a100")])
    b = bench_result("B-h100", cases=[runs_case([[t * 2 * d for t in BASE_TPS] for d in DRIFT[::-1]])])
    return api.compare([a, b], offers=PRICES, offer_ids=["runpod-a100", "lambda-h100"], today=TODAY)


def bench_demo() -> BenchResult:
    """A fine-tune bench on an H100, three runs: one measured case with an extrapolated metric and a
    thermal throttle in its second run, one out-of-memory case."""
    step = metric("step_s_full_depth", [0.82, 0.84, 0.81, 0.86, 0.83, 0.85, 0.80, 0.84], "s", higher=False,
                  extrapolated=True)
    sliced = runs_case([[t * d for t in BASE_TPS] for d in DRIFT], extra=(step,), throttled_run=2).model_copy(
        update={"layers": 4, "full_layers": 32})
    result = bench_result("demo-h100", cases=(sliced, failed_case("train micro_batch 8")), layers=4)
    machine = result.fingerprint.model_copy(update={"gpu_memory_bytes": 85_520_809_984, "ram_bytes": 2 * 1024**4})
    return result.model_copy(update={"fingerprint": machine, "notes": ("a fixed note for the golden test",)})


LOAD_SETTINGS = {"endpoint": "chat", "stream": True, "arrival": "concurrency", "levels": "1,4", "requests": 20,
                 "output_tokens": 64}


def load_demo() -> tuple[BenchResult, tuple[LoadCost, ...], SearchResult]:
    """Two concurrency levels with known latencies (the second misses the TTFT target), priced at $2.50/h."""
    low = _load_case(1, ttft_ms=80, tpot_ms=20, rps=1.9, tps=120, errors=0)
    high = _load_case(4, ttft_ms=150, tpot_ms=26, rps=6.1, tps=390, errors=1)
    result = BenchResult(
        kind="load", created_at=datetime(2026, 11, 1, tzinfo=UTC), name="load-demo", job={},
        fixed=FixedVariables(kind="load", model="llama-3-8b-instruct", model_config_hash="ab" * 32,
                             data="synthetic", seed=0, precision="server-defined", device="remote", warmup=0,
                             repeats=1, settings=LOAD_SETTINGS),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11.9", platform="Linux", cpu_model="EPYC",
                                cpu_cores=8, libraries={"httpx": "0.28.1"}),
        cases=(low, high))
    search = SearchResult(best_level=1, best_case=low, goodput_rps=1.9, outcome="found",
                          message="highest level meeting the SLO: 1 (fails at 4)",
                          steps=(SearchStep(level=1, passed=True, reasons=(), case=low),
                                 SearchStep(level=4, passed=False, reasons=("P95 ttft_s 0.188 s > 0.15 s",),
                                            case=high)))
    return result, tuple(price_load(c, 2.5) for c in result.cases), search


def load_predicted() -> tuple[BenchResult, SearchResult]:
    """The demo load with the serving simulator's prediction of both levels beside it (no chunk gaps measured:
    ITL errors n/a), and the simulated SLO search beside the measured one."""
    result, _, search = load_demo()
    prediction = LoadPrediction(
        gpu="h100-sxm5-80gb", gpus=1, job={"kind": "inference", "model": "llama-3-8b"},
        costs_source="estimate: h100-sxm5-80gb × 1 (speed model: compute 0.7, bandwidth 0.6, link 0.4)",
        levels=(PredictedLevel(case="concurrency 1", arrivals="concurrency 1, 20 requests, 512 → 64 tokens",
                               prompt_tokens=512, output_tokens=64, ttft_p50_s=0.072, ttft_p95_s=0.081,
                               itl_p50_s=0.0081, itl_p95_s=0.0083, tpot_p50_s=0.0081, tpot_p95_s=0.0083,
                               output_tokens_per_s=104, requests_per_s=1.62),
                PredictedLevel(case="concurrency 4", arrivals="concurrency 4, 20 requests, 512 → 64 tokens",
                               prompt_tokens=512, output_tokens=64, ttft_p50_s=0.21, ttft_p95_s=0.33,
                               itl_p50_s=0.0092, itl_p95_s=0.011, tpot_p50_s=0.0093, tpot_p95_s=0.0099,
                               output_tokens_per_s=420, requests_per_s=6.5)),
        search_level=2, search_note="simulated at 512 → 64 tokens; past it: P95 TTFT 0.19 s > 0.15 s")
    return result.model_copy(update={"prediction": prediction}), search


def _load_case(level: int, *, ttft_ms: float, tpot_ms: float, rps: float, tps: float, errors: int) -> Case:
    """One level: 20 requests, latencies rising evenly from the given base (so P50 < P95 by construction)."""
    ok = 20 - errors
    ttft = [(ttft_ms + 2 * i) / 1e3 for i in range(ok)]
    tpot = [(tpot_ms + 0.1 * i) / 1e3 for i in range(ok)]
    e2e = [t + 63 * p for t, p in zip(ttft, tpot, strict=True)]
    lag = [0.0002 * (i % 5) for i in range(20)]
    metrics = (metric("ttft_s", ttft, "s", higher=False), metric("e2e_s", e2e, "s", higher=False),
               metric("ttft_from_intended_s", [t + 0.001 for t in ttft], "s", higher=False),
               metric("tpot_s", tpot, "s", higher=False), metric("send_lag_s", lag, "s", higher=False),
               Metric(name="output_tokens_per_s", unit="tokens/s", value=tps),
               Metric(name="requests_per_s", unit="requests/s", value=rps),
               Metric(name="goodput_rps", unit="requests/s", value=rps if level == 1 else 0.0),
               Metric(name="error_rate", unit="fraction", value=errors / 20, higher_is_better=False))
    notes = ("valid",) if errors == 0 else (f"invalid: {ok} successful request(s); P95 needs at least 20",)
    params = {"arrival": "concurrency", "concurrency": level, "rate_rps": None, "requests": 20, "warmup": 0}
    return Case(name=f"concurrency {level}", params=params, metrics=metrics, notes=notes)


def cost_calculator() -> api.CostReport:
    """A quarter-hour job billed under a one-hour minimum with ten minutes of startup."""
    return api.cost(hours=0.25, usd_per_gpu_hour=2.5, min_billed_s=3600, startup_s=600)
