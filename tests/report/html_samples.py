"""Inputs for the HTML report's tests: every kind of gpuscout output as the JSON its command writes.

Estimates and rankings come from the real library (samples.py); bench and load results are built
from fixed, seeded samples, so each file is the same every run. `HOSTILE` strings are planted where a
result carries text of its own (names, ids, URLs, notes, units) to check they render as text.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscout.report.compare import render_json
from gpuscout.report.payload import bench_payload, estimate_payload, load_payload, pick_payload
from gpuscout.results.schema import BenchResult, Case, DoctorFinding, DoctorVerdict, Fingerprint, FixedVariables, Metric
from gpuscout.workload.job import Slo
from results import metric

from .samples import bench_demo, compare_two, estimate_default, pick_default

HOSTILE = ('<script>alert("owned")</script>', '"><img src=x onerror=alert(1)>', "javascript:alert(document.cookie)",
           "' onmouseover='alert(2)", "</title></svg><script>alert(3)</script>", r"$\frac{1}{0}$ costs $$5",
           "模型 🚀 &amp; &lt;b&gt;")
SLO = Slo(ttft_p95_s=0.3, tpot_p95_s=0.04)


def plain(data: Any) -> Any:
    """What `--json` prints: JSON, dates as strings (`default=str`), read back."""
    return json.loads(json.dumps(data, default=str))


def write_all(folder: Path) -> dict[str, Path]:
    """One file per kind of output; `load-a` and `load-b` are two machines' sweeps."""
    e, p, c = estimate_default(), pick_default(), compare_two()
    docs: dict[str, Any] = {
        "estimate": estimate_payload(e.job, e.screening),
        "pick": pick_payload(p.job, p.pick, p.offers_notes),
        "compare": json.loads(render_json(c.comparison, c.verdict, c.costs, notes=c.warnings, rates=c.rates,
                                          currency=c.currency)),
        "bench": bench_payload(bench_demo(), None),
        "load-a": load_payload(load_sweep("load-a100", 1.0), (), None, SLO),
        "load-b": load_payload(load_sweep("load-h100", 0.55), (), None, SLO),
        "checks": checks_result(),
        "doctor": doctor_result().model_dump(mode="json"),
    }
    paths = {}
    for name, data in docs.items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(plain(data), indent=1))
    return paths


def write_hostile(folder: Path) -> dict[str, Path]:
    """Outputs whose every string a user or a server controls is hostile."""
    bad = iter(HOSTILE * 4)
    p = pick_default()
    rows = tuple(r.model_copy(update={"offer_id": next(bad), "provider": next(bad)}) for r in p.pick.rows[:6])
    excluded = rows[-1].model_copy(update={"excluded": HOSTILE[0]})
    pick = p.pick.model_copy(update={"rows": (*rows[:-1], excluded), "warnings": HOSTILE, "job_name": HOSTILE[1]})
    e = estimate_default()
    verdicts = tuple(v.model_copy(update={"gpu_sku": next(bad)}) for v in e.screening.verdicts[:4])
    screening = e.screening.model_copy(update={"verdicts": verdicts, "job_name": HOSTILE[2], "model_name": HOSTILE[4]})
    load = load_sweep(HOSTILE[0], 1.0)
    cases = tuple(c.model_copy(update={"name": next(bad), "notes": (*c.notes, next(bad))}) for c in load.cases)
    load = load.model_copy(update={"cases": cases, "job": {"url": HOSTILE[2], "model": HOSTILE[3]},
                                   "notes": HOSTILE})
    docs = {"hostile-pick": pick_payload(p.job, pick, HOSTILE), "hostile-estimate": estimate_payload(e.job, screening),
            "hostile-load": load_payload(load, (), None, SLO), "hostile-checks": checks_result(hostile=True)}
    paths = {}
    for name, data in docs.items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(plain(data)))
    return paths


def load_sweep(name: str, scale: float, levels: tuple[int, ...] = (1, 2, 4, 8, 16)) -> BenchResult:
    """A concurrency sweep, 120 requests a level: latency grows with load (by `scale`), throughput levels off."""
    rng = random.Random(name)
    cases = [_level(rng, level, scale) for level in levels]
    settings = {"endpoint": "chat", "stream": True, "arrival": "concurrency",
                "levels": ",".join(map(str, levels)), "requests": 120, "output_tokens": 128}
    return BenchResult(
        kind="load", created_at=datetime(2026, 11, 20, tzinfo=UTC), name=name,
        job={"url": "http://127.0.0.1:8000", "model": "llama-3-8b-instruct"},
        fixed=FixedVariables(kind="load", model="llama-3-8b-instruct", model_config_hash="ab" * 32, data="synthetic",
                             seed=0, precision="server-defined", device="remote", warmup=0, repeats=1,
                             settings=settings),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11.9", platform="Linux", cpu_model="EPYC",
                                cpu_cores=8, libraries={"httpx": "0.28.1"}),
        cases=tuple(cases))


def _level(rng: random.Random, level: int, scale: float) -> Case:
    queue = 1 + 0.35 * level * level / 8
    ttft = [scale * 0.06 * queue * rng.lognormvariate(0, 0.25) for _ in range(120)]
    tpot = [scale * (0.012 + 0.0018 * level) * rng.lognormvariate(0, 0.1) for _ in range(120)]
    served = level / (0.06 * queue * scale + 127 * scale * (0.012 + 0.0018 * level))
    good = sum(1 for a, b in zip(ttft, tpot, strict=True) if a <= SLO.ttft_p95_s and b <= SLO.tpot_p95_s) / 120
    e2e = [a + 127 * b for a, b in zip(ttft, tpot, strict=True)]  # per request, in the order sent, as load keeps it
    metrics = (metric("ttft_s", ttft, "s", higher=False), metric("tpot_s", tpot, "s", higher=False),
               metric("e2e_s", e2e, "s", higher=False),
               Metric(name="output_tokens_per_s", unit="tokens/s", value=served * 128, higher_is_better=True),
               Metric(name="requests_per_s", unit="requests/s", value=served, higher_is_better=True),
               Metric(name="goodput_rps", unit="requests/s", value=served * good, higher_is_better=True),
               Metric(name="error_rate", unit="fraction", value=0.0))
    params = {"arrival": "concurrency", "concurrency": level, "rate_rps": None, "requests": 120, "warmup": 0}
    notes = ("valid",) if level < 16 else ("invalid: the client fell behind its schedule",)
    return Case(name=f"concurrency {level}", params=params, metrics=metrics, notes=notes)


def doctor_result() -> BenchResult:
    """A doctor result as `gpuscout doctor` writes it: measured cases, and a verdict whose findings carry bands."""
    findings = (
        DoctorFinding(check="matmul bf16 sustained", area="performance", status="fail", gpu=1, value=205e12,
                      unit="FLOP/s", band_low=250e12, band_high=275e12, percentile=-180.0,
                      message="GPU 1: matmul bf16 sustained 205 TFLOP/s, below its band"),
        DoctorFinding(check="host copy h2d", area="performance", status="pass", gpu=0, value=25.5e9, unit="bytes/s",
                      band_low=22.7e9, band_high=27.1e9, percentile=64.0, message="host copy h2d, GPU 0: 25.5 GB/s"),
        DoctorFinding(check="ecc", area="health", status="pass", message="no ECC errors"))
    verdict = DoctorVerdict(outcome="return", text="Return it: GPU 1: matmul bf16 sustained below its band.",
                            findings=findings)
    soak = Case(name="matmul bf16 · GPU 1", params={"dtype": "bf16", "gpu": 1},
                metrics=(Metric(name="sustained_flop_per_s", unit="FLOP/s", value=205e12, higher_is_better=True),))
    return BenchResult(
        kind="doctor", created_at=datetime(2026, 11, 30, 8, tzinfo=UTC), name="doctor on 2 × a100", job={},
        fixed=FixedVariables(kind="doctor", model="none", model_config_hash="", data="none", seed=0,
                             precision="mixed", device="cuda", warmup=0, repeats=1, settings={"nproc": 2}),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11.9", platform="Linux", cpu_model="EPYC",
                                cpu_cores=32, libraries={}, gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=2),
        cases=(soak,), doctor=verdict)


def checks_result(*, hostile: bool = False) -> dict[str, Any]:
    """A result of a kind this version has no view of its own for: checks with expected bands."""
    def check(name: str, value: float, unit: str, low: float | None, high: float | None, status: str) -> dict[str, Any]:
        return {"name": HOSTILE[6] if hostile else name, "unit": HOSTILE[5] if hostile else unit, "value": value,
                "expected_low": low, "expected_high": high, "status": status, "note": HOSTILE[3] if hostile else ""}

    cases = [{"name": HOSTILE[0] if hostile else "matmul bf16", "metrics": [
                 check("tflops", 702.0, "TFLOP/s", 650.0, 990.0, "pass")]},
             {"name": "hbm bandwidth", "metrics": [check("bandwidth", 2.9e12, "bytes/s", 3.3e12, 4.8e12, "fail")]},
             {"name": "pcie link", "metrics": [check("gen", 4, "", 5, None, "warn"),
                                               check("width", 16, "lanes", 16, 16, "pass")]},
             {"name": "nccl all-reduce", "failure": {"message": HOSTILE[1] if hostile else "timed out"}, "metrics": []}]
    return {"schema_version": 2, "kind": "burn-in", "name": HOSTILE[4] if hostile else "burn-in on h100",
            "created_at": "2026-11-30T08:00:00+00:00", "cases": cases,
            "fingerprint": {"gpu_name": HOSTILE[2] if hostile else "NVIDIA H100 80GB HBM3", "gpu_count": 1},
            "notes": list(HOSTILE) if hostile else []}
