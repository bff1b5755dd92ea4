"""Device check: gpuscout's estimates against `gpuscout bench` measurements on this machine.

Runs, each through `python -m gpuscout bench` on a small generated job spec:

* machine probes (`bench --probe`): matmul per dtype, memory bandwidth, host↔device copies, disk,
  checkpoint, data loading — against the catalog's figures for the detected GPU;
* an 8B-class inference slice (llama-3-8b preset, random weights, bf16) at concurrency 1 and 8;
* a full fine-tune step of llama-3.2-1b and a LoRA step of llama-3-8b (bf16 mixed precision);
* an SDXL UNet at 1024² (4 steps with guidance, plus the VAE decode);

then writes `validation-<date>-<gpu>.md` (and a JSON of every result and estimate) into `--out`:
for each check, `estimate_memory`'s peak and `estimate_speed`'s time for the same job on the
detected GPU, beside the measured peak memory and time. A check whose packages are not importable,
whose bench fails, or that no longer fits the time budget becomes a row saying so.

    python benchmarks/validate_on_gpu.py --out DIR [--device cuda] [--deadline-s 450]
    python benchmarks/validate_on_gpu.py --out DIR --device cpu --tiny [--only image]  # CI-sized
    python benchmarks/validate_on_gpu.py --out DIR --dry-run [--tiny]  # estimates only, no bench

`scripts/device_check.sh` runs it on the lent H200 (wheels, PYTHONPATH, $OUT); see
validation/README.md. gpuscout is imported only after the package check, so a machine without
pydantic still gets a table that says what to carry.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "transformers", "peft", "accelerate", "diffusers", "safetensors", "pydantic", "typer",
            "rich", "bitsandbytes", "pynvml")
GPUSCOUT_NEEDS = ("pydantic", "typer", "rich")  # gpuscout itself (its CLI runs every bench)
GIB = 2**30
# Estimate phases that correspond to a measured per-phase metric (estimator/speed/image.py names).
PHASE_OF_METRIC = {"denoiser_step_s": "denoiser step", "vae_decode_s": "VAE decode", "text_encode_s": "text encoders"}
TINY_LLAMA = {  # a 2-layer Llama for CPU runs: seconds, not a real model
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
}


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    spec: dict[str, Any] | None  # None: the machine probes (`bench --probe`)
    needs: tuple[str, ...]
    quantities: tuple[str, ...]  # measured metrics compared with the speed estimate
    timeout_s: float


@dataclass
class Row:
    check: str
    quantity: str
    estimate: float | None = None
    measured: float | None = None
    unit: str = ""
    note: str = ""


@dataclass
class Outcome:
    check: Check
    rows: list[Row] = field(default_factory=list)
    result: dict[str, Any] | None = None
    wall_s: float = 0.0
    log: str = ""


# --- the checks -------------------------------------------------------------------------------------


def full_checks() -> list[Check]:
    """H200-sized checks; each small enough that all of them fit the 8-minute device budget."""
    infer = {"kind": "inference", "model": "llama-3-8b", "weights": "bf16", "kv_cache_dtype": "bf16",
             "prompt_tokens": 512, "output_tokens": 64, "engine": "hf", "requests": 100}
    finetune = {"kind": "finetune", "precision": "bf16_mixed", "optimizer": "adamw", "seq_len": 1024,
                "dataset_tokens": 1_000_000}
    llm = ("torch", "transformers", "accelerate")
    return [
        Check("probe", "machine probes", None, ("torch", "safetensors"), (), 180),
        # bench measures an inference job at its concurrency and at 1: two levels from one model build.
        Check("infer-8b", "Llama 3 8B bf16, prompt 512, output 64, concurrency 1 and 8",
              infer | {"name": "infer-8b", "concurrency": 8}, llm, ("ttft_s", "tpot_s"), 150),
        Check("ft-1b-full", "Llama 3.2 1B full fine-tune, micro-batch 4 × 1024",
              finetune | {"name": "ft-1b-full", "model": "llama-3.2-1b", "method": "full", "micro_batch": 4},
              llm, ("step_s",), 120),
        Check("ft-8b-lora", "Llama 3 8B LoRA r16, micro-batch 2 × 1024",
              finetune | {"name": "ft-8b-lora", "model": "llama-3-8b", "method": "lora", "micro_batch": 2},
              (*llm, "peft"), ("step_s",), 150),
        Check("sdxl-1024", "SDXL 1024², 4 steps with guidance, batch 1, fp16",
              {"kind": "image", "name": "sdxl-1024", "model": "sdxl", "width": 1024, "height": 1024, "steps": 4,
               "batch": 1, "guidance": True, "dtype": "fp16", "images": 100},
              ("torch", "diffusers", "transformers"), ("s_per_image", "denoiser_step_s", "vae_decode_s"), 150),
    ]


def tiny_checks(work: Path) -> list[Check]:
    """CPU-sized stand-ins for the same checks: a 2-layer Llama and the tiny-sd test model."""
    config = work / "tiny-llama" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(TINY_LLAMA, indent=1))
    infer = {"kind": "inference", "model": str(config), "weights": "fp32", "kv_cache_dtype": "fp32",
             "prompt_tokens": 16, "output_tokens": 4, "engine": "hf", "requests": 10}
    finetune = {"kind": "finetune", "model": str(config), "precision": "fp32", "seq_len": 32, "micro_batch": 2,
                "dataset_tokens": 10_000}
    llm = ("torch", "transformers")
    return [
        Check("probe", "machine probes", None, ("torch", "safetensors"), (), 120),
        Check("infer", "tiny Llama, concurrency 1 and 2", infer | {"name": "infer", "concurrency": 2}, llm,
              ("ttft_s", "tpot_s"), 60),
        Check("ft-full", "tiny Llama full fine-tune", finetune | {"name": "ft-full", "method": "full"}, llm,
              ("step_s",), 60),
        Check("ft-lora", "tiny Llama LoRA", finetune | {"name": "ft-lora", "method": "lora"}, (*llm, "peft"),
              ("step_s",), 60),
        Check("image", "tiny-sd 64², 2 steps (test model)",
              {"kind": "image", "name": "image", "model": "tiny-sd", "width": 64, "height": 64, "steps": 2,
               "batch": 1, "guidance": True, "dtype": "fp32", "images": 100},
              ("torch", "diffusers", "transformers"), ("s_per_image", "denoiser_step_s", "vae_decode_s"), 60),
    ]


# --- environment ------------------------------------------------------------------------------------


def package_versions() -> dict[str, str | None]:
    """Version of each package of interest, None when it cannot be imported here."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        if importlib.util.find_spec(name) is None:
            found[name] = None
            continue
        try:
            found[name] = importlib.metadata.version("nvidia-ml-py" if name == "pynvml" else name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "importable"
    return found


def detect_gpu(device: str) -> tuple[Any, str]:
    """The catalog row to estimate for, and a line saying where it came from."""
    from gpuscout.errors import UnknownNameError
    from gpuscout.hardware.catalog import find_gpu

    if device == "cuda":
        import torch

        name = str(torch.cuda.get_device_name(0))
        try:
            return find_gpu(name), f"detected {name!r}"
        except UnknownNameError:
            return find_gpu("h200"), f"{name!r} is not in the catalog; estimates are for the H200 SXM"
    return find_gpu("h200"), ("no GPU in this run: estimates are for the H200 SXM and measurements are from the "
                              "CPU, so the ratios mean nothing; this exercises the table only")


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    if importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# --- running ----------------------------------------------------------------------------------------


def run_check(check: Check, *, device: str, work: Path, budget_left_s: float, warmup: int, repeats: int,
              missing: list[str]) -> Outcome:
    """Run one check's bench (or explain why not) and return its rows before the estimates."""
    outcome = Outcome(check)
    if missing:
        outcome.rows.append(Row(check.name, "—", note=f"skipped: {', '.join(missing)} not importable here"))
        return outcome
    timeout = min(check.timeout_s, budget_left_s - 10)
    if timeout < 30:
        outcome.rows.append(Row(check.name, "—", note=f"skipped: {budget_left_s:.0f} s left of the time budget"))
        return outcome
    output = work / "results" / f"{check.name}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "gpuscout", "bench"]
    if check.spec is None:
        command.append("--probe")
    else:
        command.append(str(write_spec(check, work)))
    command += ["-o", str(output), "--device", device, "--warmup", str(warmup), "--repeats", str(repeats)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
        outcome.log = f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}"
        failed = proc.returncode != 0 or not output.exists()
        reason = f"bench exited {proc.returncode}: {last_line(proc.stderr or proc.stdout)}"
    except subprocess.TimeoutExpired as exc:
        partial = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr)]
        outcome.log = f"$ {' '.join(command)}\n(timed out)\n" + "\n".join(partial)
        failed, reason = True, f"bench ran past its {timeout:.0f} s share of the budget"
    outcome.wall_s = time.perf_counter() - start
    if failed:
        outcome.rows.append(Row(check.name, "—", note=f"not measured: {reason}"))
    else:
        outcome.result = json.loads(output.read_text())
    return outcome


def write_spec(check: Check, work: Path) -> Path:
    path = work / "specs" / f"{check.name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in (check.spec or {}).items()))
    return path


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    return str(value)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


# --- comparing --------------------------------------------------------------------------------------


def compare(outcome: Outcome, gpu: Any, device: str) -> list[Row]:
    """Rows of estimate against measurement for one check (its skip/failure row when it did not run)."""
    if outcome.result is None:
        return outcome.rows
    if outcome.check.spec is None:
        return probe_rows(outcome.check.name, outcome.result)
    return job_rows(outcome.check, outcome.result, gpu, device)


def estimates(check: Check, gpu: Any, concurrency: int | None = None) -> tuple[float, Any]:
    """gpuscout's peak memory (bytes) and speed estimate for the check's job on `gpu` (at
    `concurrency` instead of the spec's, for one measured level of an inference job)."""
    from gpuscout.estimator.memory import estimate_memory
    from gpuscout.estimator.speed.estimate import estimate_speed
    from gpuscout.workload.job import parse_job
    from gpuscout.workload.resolve import resolve_image, resolve_llm

    spec = dict(check.spec or {}) | ({"concurrency": concurrency} if concurrency is not None else {})
    job = parse_job(spec, origin=check.name)
    model = resolve_image(job.model) if job.kind == "image" else resolve_llm(job.model)
    return float(estimate_memory(job, model, gpu).peak_bytes), estimate_speed(job, model, gpu)


def job_rows(check: Check, result: dict[str, Any], gpu: Any, device: str) -> list[Row]:
    """Memory and time rows for every measured case (an inference job has one per concurrency level)."""
    measured = [c for c in result.get("cases", []) if not c.get("failure")]
    if not measured:
        failures = "; ".join(f"{c['failure']['kind']}: {last_line(c['failure']['message'])}"
                             for c in result.get("cases", []) if c.get("failure"))
        return [Row(check.name, "—", note=f"no measured case ({failures or 'the result has no cases'})")]
    rows = []
    for case in measured:
        level = case.get("params", {}).get("concurrency") if (check.spec or {}).get("kind") == "inference" else None
        suffix = f" @ concurrency {level}" if level is not None else ""
        memory, speed = estimates(check, gpu, level)
        measured_bytes, memory_note = measured_memory(case.get("peak_memory") or {}, device)
        rows.append(Row(check.name, "peak memory" + suffix, memory, measured_bytes, "bytes", memory_note))
        for quantity in check.quantities:
            value = metric_value(case, quantity)
            rows.append(Row(check.name, quantity + suffix, estimate_seconds(speed, quantity), value, "s",
                            "" if value is not None else f"no {quantity} in the result"))
    return rows


def measured_memory(peak: dict[str, Any], device: str) -> tuple[float | None, str]:
    """torch reserved on a GPU (what decides an OOM), with the other views in the note."""
    def gib(key: str) -> str:
        return f"{peak[key] / GIB:.2f} GiB" if peak.get(key) is not None else "n/a"

    if device == "cuda" and peak.get("torch_reserved_bytes") is not None:
        return float(peak["torch_reserved_bytes"]), (f"torch reserved; allocated {gib('torch_allocated_bytes')}, "
                                                     f"NVML {gib('nvml_used_bytes')}")
    if peak.get("process_rss_bytes") is not None:
        return float(peak["process_rss_bytes"]), "process peak RSS (CPU run: not the GPU estimate's quantity)"
    return None, "no peak memory in the result"


def metric_value(case: dict[str, Any], name: str) -> float | None:
    return next((float(m["value"]) for m in case.get("metrics", []) if m.get("name") == name), None)


def estimate_seconds(speed: Any, quantity: str) -> float | None:
    if quantity in speed.metrics:
        return float(speed.metrics[quantity])
    phase = PHASE_OF_METRIC.get(quantity)
    return next((float(p.seconds) for p in speed.phases if p.name == phase), None)


def probe_rows(check: str, result: dict[str, Any]) -> list[Row]:
    """One row per probe: the catalog figure as the 'estimate', fraction_of_peak as the ratio."""
    rows = []
    for case in result.get("cases", []):
        if case.get("failure"):
            failure = case["failure"]
            rows.append(Row(check, case["name"], note=f"{failure['kind']}: {last_line(failure['message'])}"))
            continue
        metrics = {m["name"]: m for m in case.get("metrics", [])}
        fraction = metrics.pop("fraction_of_peak", None)
        for name, metric in metrics.items():
            peak = metric["value"] / fraction["value"] if fraction and fraction["value"] else None
            rows.append(Row(check, f"{case['name']}: {name}", peak, float(metric["value"]), metric["unit"],
                            "estimate column: catalog peak" if peak else ""))
            fraction = None  # the fraction belongs to the case's first (headline) metric
    return rows


# --- the table --------------------------------------------------------------------------------------


def render(rows: list[Row], header: list[str]) -> str:
    lines = [*header, "", "| check | quantity | gpuscout estimate | measured | measured / estimate | note |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{row.measured / row.estimate:.2f}" if row.measured is not None and row.estimate else "—"
        lines.append(f"| {row.check} | {row.quantity} | {fmt(row.estimate, row.unit)} | {fmt(row.measured, row.unit)}"
                     f" | {ratio} | {row.note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return f"{value / GIB:.2f} GiB"
    if unit == "s":
        return f"{value * 1e6:.3g} µs" if value < 1e-3 else f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    if unit == "bytes/s":
        return f"{value / 1e9:.3g} GB/s"
    return f"{value:.4g} {unit}"


def header_lines(gpu_line: str, device: str, versions: dict[str, str | None], args: argparse.Namespace,
                 wall_s: float) -> list[str]:
    packages = ", ".join(f"{name} {version}" if version else f"{name} ✗" for name, version in versions.items())
    mode = "dry run (no bench)" if args.dry_run else ("tiny CPU-sized jobs" if args.tiny else "device check jobs")
    return [
        f"# gpuscout device check, {dt.date.today().isoformat()}",
        "",
        f"- GPU for the estimates: {gpu_line}",
        f"- device measured: {device}; mode: {mode}; warm-up {args.warmup}, repeats {args.repeats}; "
        f"wall {wall_s:.0f} s of a {args.deadline_s:.0f} s budget",
        f"- packages (✗ = not importable): {packages}",
        "- estimate: `estimate_memory(...).peak_bytes` and `estimate_speed(...)` for the same job spec on that GPU; "
        "measured: `python -m gpuscout bench` on random weights (torch reserved peak on a GPU)",
    ]


def output_name(gpu: Any, device: str) -> str:
    label = gpu.sku if device == "cuda" else "cpu"
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"validation-{dt.date.today().isoformat()}-{label}")


# --- main -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "validation-out")))
    parser.add_argument("--work", type=Path, default=None, help="specs, results and logs (default: a temp dir)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--tiny", action="store_true", help="CPU-sized stand-ins (tiny Llama, tiny-sd)")
    parser.add_argument("--dry-run", action="store_true", help="estimates and table only; run no bench")
    parser.add_argument("--only", default="", help="comma-separated check names (or a prefix of one)")
    parser.add_argument("--deadline-s", type=float, default=450.0, help="time budget for all benches")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    versions = package_versions()
    args.out.mkdir(parents=True, exist_ok=True)
    lacking = [name for name in GPUSCOUT_NEEDS if versions[name] is None]
    if lacking:
        text = (f"# gpuscout device check, {dt.date.today().isoformat()}\n\nNot run: {', '.join(lacking)} not "
                "importable, and gpuscout needs them. Carry their wheels in .whl/ (scripts/device_check.sh "
                "--fetch-wheels) and run scripts/device_check.sh.\n")
        (args.out / "validation-not-run.md").write_text(text)
        print(text)
        return 1
    device = resolve_device(args.device)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpuscout-validation-"))
    gpu, gpu_line = detect_gpu(device)
    checks = [c for c in (tiny_checks(work) if args.tiny else full_checks())
              if not args.only or any(c.name.startswith(o.strip()) for o in args.only.split(","))]
    rows: list[Row] = []
    outcomes = []
    for check in checks:
        missing = [p for p in check.needs if versions.get(p) is None]
        if args.dry_run:
            outcome = Outcome(check)
            rows += dry_rows(check, gpu) if not missing else [
                Row(check.name, "—", note=f"skipped: {', '.join(missing)} not importable here")]
        else:
            left = args.deadline_s - (time.perf_counter() - start)
            outcome = run_check(check, device=device, work=work, budget_left_s=left, warmup=args.warmup,
                                repeats=args.repeats, missing=missing)
            rows += compare(outcome, gpu, device)
        outcomes.append(outcome)
        print(f"[{time.perf_counter() - start:5.0f} s] {check.name}: "
              + (f"{outcome.wall_s:.0f} s" if outcome.result else (outcome.rows[0].note if outcome.rows else "dry")),
              file=sys.stderr)
    table = render(rows, header_lines(gpu_line, device, versions, args, time.perf_counter() - start))
    name = output_name(gpu, device)
    (args.out / f"{name}.md").write_text(table)
    (args.out / f"{name}.json").write_text(json.dumps(
        {"rows": [asdict(r) for r in rows], "results": {o.check.name: o.result for o in outcomes}}, indent=1))
    (args.out / f"{name}.log").write_text("\n\n".join(o.log for o in outcomes if o.log))
    print(table)
    return 0


def dry_rows(check: Check, gpu: Any) -> list[Row]:
    """Estimates only: what the table would hold beside measurements."""
    if check.spec is None:
        return [Row(check.name, "—", note="dry run: probes not run")]
    memory, speed = estimates(check, gpu)
    rows = [Row(check.name, "peak memory", memory, None, "bytes", "dry run: not measured")]
    rows += [Row(check.name, q, estimate_seconds(speed, q), None, "s", "dry run: not measured")
             for q in check.quantities]
    return rows


if __name__ == "__main__":
    sys.exit(main())
