"""The serving simulator against published vLLM serving measurements under load.

Run: PYTHONPATH=src .venv/bin/python benchmarks/serving_sim_published.py [--write]
Reads benchmarks/data/vllm_serving_published.toml (each point quoted from its public source), builds
one replica from the job's speed-model step costs (`from_speed.sim_config`, default efficiency,
nothing fitted), simulates the published load, and prints predicted beside measured with the error
per metric; `--write` also writes validation/serving_sim_published.md.

The points are held out: no constant of gpuscout was fitted on them.
"""

from __future__ import annotations

import statistics
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.estimator.serving import Arrivals, SimConfig, SimResult, simulate
from gpuscout.estimator.serving.from_speed import sim_config
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.hf_config import shape_from_hf_config
from gpuscout.workload.job import InferenceJob
from gpuscout.workload.presets import load_llm_preset
from gpuscout.workload.shape import ModelShape

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "vllm_serving_published.toml"
OUT = ROOT / "validation" / "serving_sim_published.md"
COMMAND = "PYTHONPATH=src .venv/bin/python benchmarks/serving_sim_published.py --write"
# Closed-loop levels whose prompt count the source does not state: this many requests per user.
REQUESTS_PER_USER = 20
METRICS = ("ttft_mean_s", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "tpot_p99_s",
           "itl_mean_s", "itl_p50_s", "itl_p95_s", "itl_p99_s", "e2e_p50_s", "e2e_p95_s", "requests_per_s",
           "output_tokens_per_s")


@dataclass(frozen=True)
class Row:
    source: str
    point: str
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


def shape_of(source: dict[str, Any]) -> ModelShape:
    if "hf_config" in source:
        return shape_from_hf_config(source["hf_config"], name=source["model"], source=source["url"])
    return load_llm_preset(source["model"])


def config_of(source: dict[str, Any], point: dict[str, Any]) -> SimConfig:
    job = InferenceJob(kind="inference", model=source["model"], prompt_tokens=point["prompt_tokens"],
                       output_tokens=point["output_tokens"], tensor_parallel=source["tensor_parallel"],
                       gpu_memory_utilization=source["gpu_memory_utilization"],
                       max_num_batched_tokens=source["max_num_batched_tokens"],
                       concurrency=point.get("concurrency") or 1)
    return sim_config(job, shape_of(source), find_gpu(source["gpu"]))


def arrivals_of(point: dict[str, Any]) -> Arrivals:
    prompt, output = point["prompt_tokens"], point["output_tokens"]
    if point["kind"] == "poisson":
        return Arrivals(kind="poisson", rate_per_s=point["rate_per_s"], requests=point["requests"],
                        prompt_tokens=prompt, output_tokens=output, seed=42)
    if point["kind"] == "burst":  # every request sent at 0: a closed loop with one request per user
        return Arrivals(kind="concurrency", concurrency=point["requests"], requests=point["requests"],
                        prompt_tokens=prompt, output_tokens=output)
    users = point["concurrency"]
    return Arrivals(kind="concurrency", concurrency=users, requests=max(100, REQUESTS_PER_USER * users),
                    prompt_tokens=prompt, output_tokens=output)


def predicted(result: SimResult, metric: str) -> float:
    if metric in ("requests_per_s", "output_tokens_per_s"):
        return float(getattr(result, metric))
    name, stat, _ = metric.split("_")
    return float(getattr(getattr(result, f"{name}_s"), stat))


def rows() -> tuple[list[Row], dict[str, dict[str, Any]], dict[tuple[str, str], SimConfig]]:
    data = tomllib.loads(DATA.read_text(encoding="utf-8"))
    sources = {s["id"]: s for s in data["source"]}
    out: list[Row] = []
    configs: dict[tuple[str, str], SimConfig] = {}
    for point in data["point"]:
        source = sources[point["source"]]
        config = config_of(source, point)
        configs[(source["id"], point["name"])] = config
        result = simulate(config, arrivals_of(point))
        for metric in METRICS:
            if metric in point:
                out.append(Row(source["id"], point["name"], metric, float(point[metric]), predicted(result, metric)))
    return out, sources, configs


def fmt(metric: str, value: float) -> str:
    if metric in ("requests_per_s", "output_tokens_per_s"):
        return f"{value:.4g}"
    return f"{value * 1000:.4g} ms"


def report(found: list[Row], sources: dict[str, dict[str, Any]], configs: dict[tuple[str, str], SimConfig]) -> str:
    lines = ["# The serving simulator against published vLLM serving measurements", "",
             f"Reproduce: `{COMMAND}` (data: `benchmarks/data/vllm_serving_published.toml`).", "",
             "Each point is a published `vllm bench serve` run, quoted with its setup from its public source. The",
             "simulator predicts it from gpuscout's speed model alone (`from_speed.sim_config`: step costs from the",
             "roofline with the default efficiency factors, KV blocks from the memory estimate, vLLM's default",
             "scheduler limits for the GPU). The points are held out: no constant of gpuscout was fitted on them.",
             "Error = (predicted − measured) / measured.", ""]
    lines += ["## Error per metric (all points)", "", "| metric | points | median error | median abs error | worst |",
              "|---|---:|---:|---:|---:|"]
    for metric in METRICS:
        errs = [r.error for r in found if r.metric == metric]
        if errs:
            worst = max(errs, key=abs)
            lines.append(f"| {metric} | {len(errs)} | {statistics.median(errs):+.0%} | "
                         f"{statistics.median(abs(e) for e in errs):.0%} | {worst:+.0%} |")
    for sid, source in sources.items():
        lines += ["", f"## {source['title']}", "", f"Source: {source['url']}" + (
            f" ({', '.join(source['files'])})" if "files" in source else ""), "",
            f"Setup: {source['setup']}.", ""]
        points = list(dict.fromkeys(r.point for r in found if r.source == sid))
        for name in points:
            costs = configs[(sid, name)].costs
            limits = configs[(sid, name)].limits
            lines += [f"### {name}", "",
                      f"Replica: {limits.max_num_seqs} seqs, {limits.max_num_batched_tokens} tokens a step, "
                      f"{limits.kv_blocks} KV blocks; step costs {costs.source}.", "",
                      "| metric | measured | predicted | error |", "|---|---:|---:|---:|"]
            for r in found:
                if r.source == sid and r.point == name:
                    lines.append(f"| {r.metric} | {fmt(r.metric, r.measured)} | {fmt(r.metric, r.predicted)} | "
                                 f"{r.error:+.0%} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    found, sources, configs = rows()
    text = report(found, sources, configs)
    print(text)
    if "--write" in sys.argv[1:]:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
