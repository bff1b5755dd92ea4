"""gpuscout's estimate of exactly the quantity a published point measured, through the library API.

Imports nothing but gpuscout and the standard library, so that it also runs as a script under an
older gpuscout source tree (`--baseline-src`): it reads points as JSON on stdin and writes one
result per point as JSON on stdout.

What each measured quantity is compared with (also written into validation/published.md):

* weights_*            the sum of the breakdown's weight terms (base weights, quantization constants,
                       adapters) of `estimate_memory`.
* kv_tokens            vLLM's "GPU KV cache size": KV budget / KV bytes per token, where the budget is
                       gpu_memory_utilization × usable memory − every non-KV term of the inference
                       breakdown (the budget `estimator/inference.py` `max_concurrency` fits sequences in).
* kv_gib               vLLM's "Available KV cache memory": the KV budget itself.
* profile_peak_*       vLLM's profile-run torch peak (V0 "peak_torch_memory"): weights + activation terms,
                       no KV cache and no CUDA graphs (the profile run holds neither).
* kv_blocks            KV budget / (bytes per token × block), block 16 unless the conditions say otherwise.
* max_concurrency      KV budget / KV bytes of one sequence of the job's context (unrounded, as vLLM prints).
* activation_*         the activation terms of the inference breakdown (prefill working set, logits).
* cuda_graph_*         the "CUDA graphs" term.
* peak_allocated_*     the peak without the allocator reserve, the CUDA context, NCCL buffers and vLLM's
                       unused engine reserve: what torch.cuda.max_memory_allocated() sees.
* peak_reserved_*      the peak without the CUDA context, NCCL buffers and the engine reserve: what
                       torch.cuda.max_memory_reserved() sees (the allocator reserve stays in).
* nvidia_smi_*         the whole peak, less vLLM's unused engine reserve (nvidia-smi shows the process).
* max_seq_len_tokens   the largest seq_len that fits on the GPU (`estimator.fit.largest_fitting`),
                       rounded down to a multiple of 256.
* framework            a point's `framework` (the trainer it ran under) becomes the job's `framework` key
                       when this gpuscout's job class has that field and knows the id; otherwise it is
                       not passed and the job is estimated as written.
* speed quantities     the matching metric of `estimate_speed`: step_s, tokens_per_s, samples_per_s
                       (fine-tune); ttft_s, tpot_s, output_tokens_per_s (serving; tokens_per_s means
                       output tokens/s there); s_per_image (image); s_per_clip (video); s_per_it is the
                       training step or one denoiser step.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

SEQ_STEP = 256  # max_seq_len answers are multiples of this (the granularity people try lengths at)
DEFAULT_GPU = "h200-sxm-141gb"  # weights points name no GPU; weights do not depend on it
MEMORY_UNITS = {"gib": 2.0**30, "gb": 1e9, "mib": 2.0**20}
VLLM_BLOCK = 16  # vllm/v1 default block_size


class Inexpressible(Exception):
    """The point's job cannot be stated in this gpuscout's job spec (or its model is not bundled)."""


def estimate_point(wire: dict[str, Any]) -> dict[str, Any]:
    """{'id', 'status': ok | inexpressible | failed, 'value' (in the measured unit), 'detail'}."""
    # framework: the trainer whose defaults the estimate used (None: the spec's own, or today's default)
    out: dict[str, Any] = {"id": wire["id"], "status": "ok", "value": None, "detail": "", "framework": None}
    try:
        out["framework"] = with_framework(dict(wire["job"]), wire.get("framework"))[1]
        out["value"], out["detail"] = _estimate(wire)
        exact = re.match(r"largest fitting seq_len ([\d,]+)", out["detail"])
        if exact:  # the unrounded answer, for the report to show beside the multiple of 256
            out["exact"] = float(exact.group(1).replace(",", ""))
    except Inexpressible as exc:
        out.update(status="inexpressible", detail=str(exc))
    except Exception as exc:  # keep going past any point; the report lists failures with their reason
        out.update(status="failed", detail=f"{type(exc).__name__}: {_one_line(str(exc))}")
    return out


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _spec_error_text(exc: Exception) -> str:
    """The SpecError's reason (which key, what is wrong): the part a reader of the report needs."""
    key = "why" if type(exc).__name__ == "SpecError" else "what"  # an unknown name says what it was in `what`
    text = getattr(exc, key, "") or str(exc)
    unknown = re.findall(r"([\w.]+): Extra inputs are not permitted[^;]*", text)
    if unknown:  # the usual case: settings the spec has no key for; name them, briefly
        rest = [part.strip() for part in text.split(";") if "Extra inputs are not permitted" not in part]
        text = "; ".join([f"no job-spec key for {', '.join(unknown)}", *(p for p in rest if p)])
    return _one_line(text, 200)


# Baseline mode: an older gpuscout cannot parse settings added since; its user would have left
# them out, so they are dropped (and the point is estimated without them) rather than skipped.
LENIENT = False


def _job_class(spec: dict[str, Any]) -> Any:
    """This gpuscout's job class for the spec's kind (None: a kind it does not know)."""
    from gpuscout.workload import job as jobs

    classes = {"finetune": "FinetuneJob", "inference": "InferenceJob", "image": "ImageJob", "video": "VideoJob"}
    return getattr(jobs, classes.get(str(spec.get("kind")), ""), None)


def _known_keys(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without top-level keys this gpuscout's job class for the kind does not know."""
    cls = _job_class(spec)
    if cls is None:
        return spec
    return {k: v for k, v in spec.items() if k in cls.model_fields}


def _framework_known(framework: str) -> bool:
    """Whether this gpuscout knows the trainer `framework` names ("<id>" or "<id>@<version>")."""
    from gpuscout.errors import GpuscoutError

    try:
        from gpuscout.workload.frameworks import resolve
    except ImportError:  # a `framework` field without the data file of frameworks: nothing to check it by
        return False
    try:
        resolve(framework)
    except GpuscoutError:
        return False
    return True


def with_framework(spec: dict[str, Any], framework: str | None) -> tuple[dict[str, Any], str | None]:
    """The spec with the point's `framework` as its job key, where this gpuscout's job class has a
    `framework` field and knows the id; the spec's own `framework` always wins. Returns the spec and
    the framework passed (None: not passed; a point's estimate is then today's default trainer's)."""
    if not framework or "framework" in spec:
        return spec, None
    cls = _job_class(spec)
    if cls is None or "framework" not in cls.model_fields or not _framework_known(framework):
        return spec, None
    return {**spec, "framework": framework}, framework


def _setup(wire: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The parsed job, its model shape and the catalog GPU; an unparsable job is Inexpressible."""
    from gpuscout.errors import GpuscoutError
    from gpuscout.hardware.catalog import find_gpu
    from gpuscout.workload.job import FinetuneJob, InferenceJob, parse_job
    from gpuscout.workload.resolve import resolve_image, resolve_llm
    from gpuscout.workload.shape import ModelShape

    spec = _known_keys(dict(wire["job"])) if LENIENT else dict(wire["job"])
    spec, _ = with_framework(spec, wire.get("framework"))
    try:
        job = parse_job(spec, origin=f"point {wire['id']}")
        if job.kind == "video":  # older trees have no video kind: parse_job has refused the point by now
            from gpuscout.workload.resolve import resolve_video

            model = resolve_video(job.model)
        else:
            model = resolve_image(job.model) if job.kind == "image" else resolve_llm(job.model)
    except GpuscoutError as exc:
        raise Inexpressible(_spec_error_text(exc)) from None
    if isinstance(job, FinetuneJob | InferenceJob) and isinstance(model, ModelShape):
        from gpuscout.workload.validate import validate_llm_job

        try:
            validate_llm_job(job, model)
        except GpuscoutError as exc:
            raise Inexpressible(_spec_error_text(exc)) from None
    return job, model, find_gpu(wire["gpu"] or DEFAULT_GPU)


def _estimate(wire: dict[str, Any]) -> tuple[float, str]:
    job, model, gpu = _setup(wire)
    quantity = wire["quantity"]
    stat, _, unit = quantity.rpartition("_")
    if unit in MEMORY_UNITS:
        nbytes, detail = _memory_bytes(stat, job, model, gpu)
        return nbytes / MEMORY_UNITS[unit], detail
    if quantity in ("kv_tokens", "kv_blocks", "max_concurrency"):
        return _kv_capacity(quantity, job, model, gpu, wire.get("conditions", ""))
    if quantity == "max_seq_len_tokens":
        return _max_seq_len(job, model, gpu)
    return _speed(quantity, job, model, gpu)


# Terms that a measurement does not see, by what it measured (matched on the term's name).
CONTEXT_TERMS = ("CUDA context", "NCCL buffers")
DROPPED = {
    # The freed 16-bit logits block is reserved by the caching allocator, never allocated.
    "peak_allocated": ("allocator reserve", *CONTEXT_TERMS, "engine reserve", "freed 16-bit logits"),
    "peak_reserved": (*CONTEXT_TERMS, "engine reserve"),
    "nvidia_smi": ("engine reserve",),
}


def _memory_bytes(stat: str, job: Any, model: Any, gpu: Any) -> tuple[float, str]:
    from gpuscout.estimator.memory import estimate_memory

    breakdown = estimate_memory(job, model, gpu)
    terms = breakdown.terms
    if stat == "weights":
        kept = [t for t in terms if t.category == "weights"]
        return float(sum(t.bytes for t in kept)), "weight terms: " + ", ".join(t.name for t in kept)
    if stat == "activation":
        if job.kind != "inference":
            raise Inexpressible("activation_* is vLLM's profiled activation memory: an inference quantity")
        kept = [t for t in terms if t.category == "activations"]
        return float(sum(t.bytes for t in kept)), "activation terms: " + ", ".join(t.name for t in kept)
    if stat == "profile_peak":
        if job.kind != "inference":
            raise Inexpressible("profile_peak_* is vLLM's profile-run peak: an inference quantity")
        kept = [t for t in terms if t.category in ("weights", "activations")]
        return float(sum(t.bytes for t in kept)), "weights + activation terms: " + ", ".join(t.name for t in kept)
    if stat == "kv":
        budget, detail = _kv_budget(job, model, gpu)
        return budget, detail
    if stat == "cuda_graph":
        graphs = [t for t in terms if "CUDA graphs" in t.name]
        if not graphs:
            raise Inexpressible("this gpuscout has no CUDA-graph term for the job (engine is not vLLM)")
        return float(graphs[0].bytes), "CUDA graphs term"
    if stat not in DROPPED:
        raise ValueError(f"no mapping for the memory statistic {stat!r}")
    dropped = [t for t in terms if any(name in t.name for name in DROPPED[stat])]
    detail = "peak" + ("".join(f" − {t.name}" for t in dropped) if dropped else " (all terms)")
    return float(breakdown.peak_bytes - sum(t.bytes for t in dropped)), detail


def _block_tokens(conditions: str) -> int:
    """vLLM's block size: 16 unless the point's conditions state another ('block size 32', 'block_size=32')."""
    found = re.search(r"block[ _-]?size\s*[=:]?\s*(\d+)", conditions, re.IGNORECASE)
    return int(found.group(1)) if found else VLLM_BLOCK


def _kv_budget(job: Any, model: Any, gpu: Any) -> tuple[float, str]:
    """The memory vLLM hands the KV cache: usable × utilization − every non-KV term (one sequence's KV
    is added back: the budget `max_concurrency` divides)."""
    from gpuscout.estimator.breakdown import total_bytes
    from gpuscout.estimator.inference import inference_terms
    from gpuscout.hardware.catalog import usable_memory_bytes

    if job.kind != "inference" or job.engine != "vllm" or job.co_served:
        raise Inexpressible("KV capacity is a vLLM quantity: needs an inference job with engine = \"vllm\"")
    try:  # the library's own budget (it knows the GPU's vLLM defaults); older trees lack it
        from gpuscout.estimator.inference import kv_budget_bytes
    except ImportError:
        usable = usable_memory_bytes(gpu)
        terms = inference_terms(job.model_copy(update={"concurrency": 1}), model, usable)
        per_seq = next(t.bytes for t in terms if t.category == "kv_cache")
        return float(usable - total_bytes(terms) + per_seq), "KV budget (usable × utilization − non-KV terms)"
    return float(kv_budget_bytes(job, model, gpu)), "KV budget (estimator.inference.kv_budget_bytes)"


def _kv_capacity(quantity: str, job: Any, model: Any, gpu: Any, conditions: str) -> tuple[float, str]:
    from gpuscout.estimator.inference import kv_bytes_per_sequence
    from gpuscout.workload.shape import DTYPE_BYTES

    budget, _ = _kv_budget(job, model, gpu)
    kb = DTYPE_BYTES[job.kv_cache_dtype]
    block = _block_tokens(conditions)
    per_block = kv_bytes_per_sequence(model, block, kb, job.tensor_parallel, block)
    detail = f"KV budget {budget / 2**30:.2f} GiB; {per_block / block / 1024:.1f} KiB/token"
    if quantity == "max_concurrency":  # vLLM divides the budget by one sequence of max_model_len
        per_seq = kv_bytes_per_sequence(model, job.context_tokens, kb, job.tensor_parallel, VLLM_BLOCK)
        return budget / per_seq, detail
    blocks = budget // per_block
    return (float(blocks * block) if quantity == "kv_tokens" else float(blocks)), detail


def _max_seq_len(job: Any, model: Any, gpu: Any) -> tuple[float, str]:
    from gpuscout.estimator.fit import largest_fitting

    if job.kind != "finetune":
        raise Inexpressible("max_seq_len_tokens is a fine-tuning quantity")
    upper = 1 << 21 if job.allow_long_context else model.max_position_embeddings
    exact = largest_fitting(job, model, gpu, "seq_len", upper)
    return float(exact // SEQ_STEP * SEQ_STEP), f"largest fitting seq_len {exact:,} (exact), reported in steps of 256"


SPEED_METRICS = {
    "finetune": {"step_s": "step_s", "s_per_it": "step_s", "tokens_per_s": "tokens_per_s",
                 "samples_per_s": "samples_per_s"},
    "inference": {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "output_tokens_per_s": "output_tokens_per_s",
                  "tokens_per_s": "output_tokens_per_s"},
    "image": {"s_per_image": "s_per_image"},
    "video": {"s_per_clip": "s_per_clip"},
}


def _speed(quantity: str, job: Any, model: Any, gpu: Any) -> tuple[float, str]:
    try:
        from gpuscout.estimator.speed.estimate import estimate_speed
    except ImportError:  # a gpuscout from before the speed model became a package (--baseline-src)
        from gpuscout.estimator.speed import estimate_speed  # type: ignore[attr-defined,no-redef]

    estimate = estimate_speed(job, model, gpu)
    if job.kind in ("image", "video") and quantity == "s_per_it":
        step = next(p for p in estimate.phases if "denoiser" in p.name)
        return step.seconds, f"one {step.name} ({step.bound}-bound)"
    metric = SPEED_METRICS[job.kind].get(quantity)
    if metric is None:
        raise Inexpressible(f"{quantity} is not a metric of a {job.kind} job")
    return estimate.metrics[metric], f"estimate_speed metrics[{metric!r}] ({estimate.bound}-bound)"


def main() -> int:
    """Baseline mode: JSON list of points on stdin → {"gpuscout": its path, "results": [...]} on stdout."""
    import gpuscout

    global LENIENT
    LENIENT = True
    wires = json.load(sys.stdin)
    json.dump({"gpuscout": gpuscout.__file__, "results": [estimate_point(w) for w in wires]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
