"""Will the job run at all on this GPU: the compatibility rules (`hardware/compat.toml`) judged for a job.

A job uses features (FlashAttention 2, bf16 math, fp8 weights, bitsandbytes, vLLM, collectives
between GPUs); a rule of the data file fires on a GPU that lacks what a feature needs. Each finding
says what happens there:

* *excluded* — it cannot run as written: no job time. The rule's fix (a job-spec change) is timed
  by the speed model on the same GPU, so the finding says what the fix costs ("+4% time"), or the
  job time under the fix when the job as written has none (bf16 on a V100);
* *fallback* — it runs on a slower path the speed model already prices (collectives staged through
  host memory on a GPU without peer-to-peer; fp8 weights run weight-only): the slowdown is the
  speed model's time against the same job on the fast path, where that path exists on the GPU;
* *caveat* — it runs under a condition the user must meet (a library version on ROCm).

The speed model and the fit stay as they were: this module only decides which setups get a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from gpuscout.errors import GpuscoutError
from gpuscout.estimator.speed.estimate import estimate_speed
from gpuscout.frozen import Frozen
from gpuscout.hardware.catalog import Gpu
from gpuscout.hardware.compat import Feature, Outcome, Rule, load_rules
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.model import Model

# Optimizers that bitsandbytes provides (transformers' optim names).
BITSANDBYTES_OPTIMIZERS = frozenset({"adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit"})


class Finding(Frozen):
    """What one rule says about the job on one GPU."""

    rule: str  # the rule's id in compat.toml
    gpu_sku: str
    outcome: Outcome
    reason: str  # why, naming the GPU and what the feature needs
    fix: str | None = None  # excluded: the change that makes it run, in words
    fix_change: dict[str, str] = Field(default_factory=dict)  # excluded: the job-spec edits
    fix_job_s: float | None = None  # excluded: the job time with every fix applied, where it can be timed
    fallback: str | None = None  # fallback: the slower path taken; caveat: the condition
    # excluded: time with the fix / time without it; fallback: time on the slow path / on the fast one.
    # None where either side has no time (bf16 on a V100 has no time as written).
    slowdown: float | None = None
    sources: tuple[str, ...] = ()


def job_features(job: Job, gpus: int) -> frozenset[Feature]:
    """The features of `job` that rules speak of, laid out on `gpus` GPUs exchanging data."""
    found: set[Feature] = set()
    match job:
        case FinetuneJob():
            found |= {"flash_attention_2"} if job.attention == "flash" else set()
            found |= {"bf16"} if job.precision in ("bf16", "bf16_mixed") else set()
            if job.method == "qlora" or job.optimizer in BITSANDBYTES_OPTIMIZERS:
                found.add("bitsandbytes")
        case InferenceJob():
            weights = {job.weights, *(c.weights for c in job.co_served)}
            found |= {"bf16"} if "bf16" in weights else set()
            found |= {"fp8_weights"} if "fp8" in weights else set()
            found |= {"vllm"} if job.engine == "vllm" else set()
        case ImageJob() | VideoJob():
            found |= {"flash_attention_2"} if job.attention == "flash" else set()
            found |= {"bf16"} if job.dtype == "bf16" else set()
    if gpus > 1:
        found.add("collectives")
    return frozenset(found)


def spread(job: Job) -> int:
    """GPUs that exchange data in the job as written: all of a fine-tune's, a server's TP group."""
    match job:
        case FinetuneJob():
            return job.gpus
        case InferenceJob():
            return job.tensor_parallel
    return 1


def firing_rules(job: Job, gpu: Gpu, gpus: int) -> tuple[Rule, ...]:
    """For each feature the job uses, the first rule of that feature that fires on `gpu`."""
    features = job_features(job, gpus)
    chosen: dict[str, Rule] = {}
    for rule in load_rules().rules:
        if rule.feature in features and rule.feature not in chosen and rule.fires_on(gpu):
            chosen[rule.feature] = rule
    return tuple(chosen.values())


def check(job: Job, model: Model, gpu: Gpu, *, gpus: int | None = None) -> tuple[Finding, ...]:
    """Every finding of the rules for `job` on `gpu` (`gpus`: GPUs exchanging data; default as written).
    Empty when nothing stands in the way."""
    n = gpus if gpus is not None else spread(job)
    rules = firing_rules(job, gpu, n)
    blocking = [r for r in rules if r.outcome == "excluded"]
    fixes = {r.id: _fix_for(r, job) for r in blocking}
    fixed_s = _seconds(_edited(job, *fixes.values()), model, gpu, n) if blocking else None
    findings = []
    for rule in rules:
        base = {"rule": rule.id, "gpu_sku": gpu.sku, "outcome": rule.outcome, "reason": rule.words(gpu, rule.reason),
                "sources": rule.sources}
        if rule.outcome == "excluded":
            others = _edited(job, *(f for rid, f in fixes.items() if rid != rule.id))
            before = _seconds(others, model, gpu, n)
            findings.append(Finding(**base, fix=rule.fix_text, fix_change=fixes[rule.id], fix_job_s=fixed_s,
                                    slowdown=fixed_s / before if fixed_s and before else None))
        else:
            findings.append(Finding(**base, fallback=rule.words(gpu, rule.fallback or ""),
                                    slowdown=_fallback_slowdown(rule, job, model, gpu, n)))
    return tuple(findings)


def excluded(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    return tuple(f for f in findings if f.outcome == "excluded")


def _fix_for(rule: Rule, job: Job) -> dict[str, str]:
    return dict(rule.fix.get(job.kind, {}))


def _edited(job: Job, *changes: Mapping[str, str]) -> Job:
    update: dict[str, str] = {}
    for change in changes:
        update |= change
    return job.model_copy(update=update) if update else job


def _seconds(job: Job, model: Model, gpu: Gpu, gpus: int) -> float | None:
    """The speed model's job time, or None where it has none (no rate for the precision, no link)."""
    try:
        return estimate_speed(job, model, gpu, gpus=gpus).job_s
    except GpuscoutError:
        return None


def _fallback_slowdown(rule: Rule, job: Job, model: Model, gpu: Gpu, gpus: int) -> float | None:
    """The fallback's time against the fast path on the same GPU, where the GPU has a fast path to
    compare with: staging through host memory against peer-to-peer. fp8 weights run weight-only on a
    GPU with no fp8 matmul at all, so there is nothing to compare: None."""
    if rule.feature != "collectives":
        return None
    slow = _seconds(job, model, gpu, gpus)
    fast = _seconds(job, model, gpu.model_copy(update={"peer_to_peer": True}), gpus)
    return slow / fast if slow and fast else None


def spec_edits(change: Mapping[str, str]) -> str:
    """A fix's job-spec edits as the user writes them: 'attention = "sdpa"'."""
    return ", ".join(f'{k} = "{v}"' for k, v in change.items())


def change_pct(ratio: float) -> str:
    """A time ratio as a change: 1.18 -> '+18%'; 0.97 -> '-3%'; 1.0 -> '+0%'."""
    pct = (ratio - 1) * 100
    return f"{'+' if pct >= 0 else '-'}{abs(pct):.0f}%"


def exclusion_reason(findings: tuple[Finding, ...]) -> str | None:
    """The one-line reason a ranking leaves an offer out, with each fix and its cost; None when none
    of the findings excludes."""
    parts = []
    for f in excluded(findings):
        cost = f" ({change_pct(f.slowdown)} time)" if f.slowdown is not None else ""
        parts.append(f"{f.reason}; fix: {spec_edits(f.fix_change)}{cost}")
    return "cannot run: " + "; ".join(parts) if parts else None


def no_time_note(findings: tuple[Finding, ...]) -> str | None:
    """Why a GPU gets no job time, in the speed model's wording ('No job time: … To fix: …'); names no
    GPU, so a screen prints it once for every GPU it applies to. None when nothing excludes."""
    blocking = excluded(findings)
    if not blocking:
        return None
    why = "; ".join(f.reason for f in blocking)
    fixes = "; ".join(f"{spec_edits(f.fix_change)}, {f.fix}"
                      + (f" ({change_pct(f.slowdown)} time)" if f.slowdown is not None else "") for f in blocking)
    return f"No job time: {why}. To fix: {fixes}."
