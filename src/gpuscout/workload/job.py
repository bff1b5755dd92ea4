"""Job specs: a TOML file describing the job, mapped 1:1 onto typed, validated models.

Three kinds, told apart by the top-level `kind` key:

    kind = "finetune"   # full / LoRA / QLoRA training of a language model
    kind = "inference"  # serving a language model: prompts, outputs, concurrency, SLOs
    kind = "image"      # diffusion image generation

Validation here is what can be checked from the spec alone. Checks that need the model (context
beyond its maximum, LoRA rank above the hidden size) live in `estimate.validate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from gpuscout.errors import SpecError
from gpuscout.userfile import MAX_JOB_BYTES, printable, read_user_toml, shown

Precision = Literal["fp32", "bf16_mixed", "bf16", "fp16_mixed"]
Optimizer = Literal["adamw", "adamw_8bit", "sgd", "adafactor"]
Method = Literal["full", "lora", "qlora"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp"]
Attention = Literal["flash", "sdpa", "eager"]
WeightFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
KvDtype = Literal["fp32", "bf16", "fp16", "fp8"]
Engine = Literal["vllm", "hf"]
ImageDtype = Literal["fp32", "bf16", "fp16"]

# Upper bounds on the numbers of a job (docs/design.md §4.10). Each is far past any real job, and
# small enough that the estimator, the speed model and the billing arithmetic stay finite and fast:
# 1e15 tokens is 70 times the 15e12 that trained Llama 3; 1e7 tokens of context is Llama 4 Scout's.
MAX_TOKENS = 10**15  # dataset_tokens
MAX_CONTEXT = 10_000_000  # seq_len, prompt_tokens, output_tokens
MAX_EPOCHS = 10_000
MAX_COUNT = 10**12  # requests, images
MAX_BATCH = 65_536  # micro_batch, image batch
MAX_CONCURRENCY = 1_000_000
MAX_NAME = 255  # characters of a job's name: it ends up in file names and report titles
MAX_MODEL_REF = 4096  # a preset id or a path (PATH_MAX)
MAX_SECONDS = 10**6  # latency targets (11.6 days)

Name = Annotated[str, Field(max_length=MAX_NAME)]
ModelRef = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_REF)]


class Spec(BaseModel):
    # allow_inf_nan=False: `epochs = inf` or `nan` would turn every runtime and cost into inf or NaN.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Lora(Spec):
    rank: int = Field(16, gt=0, le=4096)
    alpha: int = Field(32, gt=0, le=1_000_000)
    target_modules: tuple[Name, ...] | Literal["all-linear"] = Field("all-linear", max_length=1024)


class Slo(Spec):
    ttft_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    tpot_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    e2e_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)


class FinetuneJob(Spec):
    kind: Literal["finetune"]
    name: Name = "fine-tune"
    model: ModelRef
    method: Method = "lora"
    lora: Lora = Lora()
    precision: Precision = "bf16_mixed"
    optimizer: Optimizer = "adamw"
    micro_batch: int = Field(1, gt=0, le=MAX_BATCH)
    seq_len: int = Field(2048, gt=0, le=MAX_CONTEXT)
    grad_accum: int = Field(1, gt=0, le=100_000)
    gradient_checkpointing: bool = False
    attention: Attention = "sdpa"
    chunked_cross_entropy: bool = False
    optimizer_offload: bool = False  # ZeRO-Offload / FSDP CPU offload of optimizer states
    gpus: int = Field(1, gt=0, le=4096)
    sharding: Sharding = "none"
    tensor_parallel: int = Field(1, gt=0, le=64)
    dataset_tokens: int = Field(10_000_000, gt=0, le=MAX_TOKENS)
    epochs: float = Field(1.0, gt=0, le=MAX_EPOCHS)
    # Save a checkpoint (trainable weights + optimizer state) every N optimizer steps; the bench
    # times one save and the whole-job time counts them (workload/jobtime.py). None: no saves.
    checkpoint_every_steps: int | None = Field(None, gt=0, le=10**9)
    # Checkpoints kept on disk at once (transformers' save_total_limit; its default keeps every one).
    # 2: the newest to resume from and one before it, in case the newest is torn (docs/estimator.md §2.13).
    checkpoints_kept: int = Field(2, gt=0, le=100_000)
    # DataLoader worker processes per GPU process; each holds host RAM (docs/estimator.md §2.13).
    dataloader_workers: int = Field(2, ge=0, le=1024)
    allow_long_context: bool = False  # train past the model's max_position_embeddings on purpose
    # QLoRA only: peft's prepare_model_for_kbit_training (called by TRL, axolotl and the QLoRA recipe) casts
    # every non-4-bit parameter to fp32 (docs/estimator.md §2.3). False for unsloth or a recipe that skips it.
    upcast_unquantized: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> FinetuneJob:
        if self.gpus % self.tensor_parallel:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of tensor_parallel ({self.tensor_parallel})"
            )
        if self.method == "qlora" and self.precision == "fp32":
            raise ValueError("QLoRA computes in 16-bit; use precision 'bf16_mixed' or 'fp16_mixed'")
        return self


MAX_CO_SERVED = 16  # models beside the main one on the same GPUs; far past what fits on any GPU


class ServedModel(Spec):
    """One served model and the requests it answers: shared by the job's own model and each co-served one."""

    model: ModelRef
    weights: WeightFormat = "bf16"
    int4_group_size: int = Field(128, gt=0, le=MAX_BATCH)
    kv_cache_dtype: KvDtype = "bf16"
    prompt_tokens: int = Field(1024, gt=0, le=MAX_CONTEXT)
    output_tokens: int = Field(256, gt=0, le=MAX_CONTEXT)
    concurrency: int = Field(1, gt=0, le=MAX_CONCURRENCY)
    max_num_batched_tokens: int = Field(8192, gt=0, le=100_000_000)
    requests: int = Field(1000, gt=0, le=MAX_COUNT)
    allow_long_context: bool = False

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


class CoServed(ServedModel):
    """Another model served on the same GPUs, by its own engine process (vLLM runs one model per
    process). The GPUs, tensor parallelism and engine are the job's; the rest is per model."""

    name: Name | None = None  # its label in reports; default: the model reference
    # Accepted only to say clearly that they must match the job's (all models share the GPUs).
    tensor_parallel: int | None = Field(None, gt=0, le=64)
    engine: Engine | None = None


class InferenceJob(ServedModel):
    kind: Literal["inference"]
    name: Name = "inference"
    engine: Engine = "vllm"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    tensor_parallel: int = Field(1, gt=0, le=64)
    slo: Slo = Slo()
    # Models served beside `model` on the same GPUs (`[[co_served]]` tables). With them,
    # gpu_memory_utilization is the share of each GPU all engines together may take.
    co_served: tuple[CoServed, ...] = Field((), max_length=MAX_CO_SERVED)

    @model_validator(mode="after")
    def _co_served_share_the_gpus(self) -> InferenceJob:
        if self.co_served and self.engine != "vllm":
            raise ValueError('co_served needs engine = "vllm": co-serving is modelled as one vLLM process '
                             'per model, each with its own gpu_memory_utilization')
        for i, other in enumerate(self.co_served):
            label = f"co_served[{i}] ({printable(other.model, 40)})"
            if other.tensor_parallel not in (None, self.tensor_parallel):
                raise ValueError(f"{label} has tensor_parallel = {other.tensor_parallel}, the job "
                                 f"{self.tensor_parallel}: co-served models share the same GPUs (set it once, "
                                 "at the top)")
            if other.engine not in (None, self.engine):
                raise ValueError(f"{label} has engine = {other.engine!r}, the job {self.engine!r}: each "
                                 "co-served model runs in its own vLLM process")
        return self


class ImageJob(Spec):
    kind: Literal["image"]
    name: Name = "image generation"
    model: ModelRef
    width: int = Field(1024, gt=0, le=16384)
    height: int = Field(1024, gt=0, le=16384)
    steps: int = Field(30, gt=0, le=10_000)
    batch: int = Field(1, gt=0, le=MAX_BATCH)
    guidance: bool = True  # classifier-free guidance: a conditional and an unconditional pass
    images: int = Field(1000, gt=0, le=MAX_COUNT)
    dtype: ImageDtype = "fp16"
    attention: Attention = "sdpa"
    vae_tiling: bool = False
    cpu_offload: bool = False  # diffusers enable_model_cpu_offload: one component on the GPU at a time

    @model_validator(mode="after")
    def _multiple_of_eight(self) -> ImageJob:
        if self.width % 8 or self.height % 8:
            raise ValueError("width and height must be multiples of 8 (the VAE downsamples by 8)")
        return self


Job = Annotated[FinetuneJob | InferenceJob | ImageJob, Field(discriminator="kind")]
_JOB_ADAPTER: TypeAdapter[FinetuneJob | InferenceJob | ImageJob] = TypeAdapter(Job)


def parse_job(data: dict[str, Any], *, origin: str = "job spec") -> FinetuneJob | InferenceJob | ImageJob:
    """Validate a job spec already read into a dict; errors name the field and the fix."""
    if "kind" not in data:
        raise SpecError(
            f"{origin} has no `kind`.",
            "gpuscout needs to know which kind of job this is.",
            'Add a top-level line: kind = "finetune", "inference" or "image".',
        )
    try:
        return _JOB_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise _spec_error(origin, exc) from None


def load_job(path: Path) -> FinetuneJob | InferenceJob | ImageJob:
    """Read a TOML job spec. Malformed TOML points at the line; invalid values name the field."""
    fix = "Check the path; examples live in examples/*.toml."
    data = read_user_toml(path, "job spec", fix, max_bytes=MAX_JOB_BYTES)
    return parse_job(data, origin=str(path))


def _spec_error(origin: str, exc: ValidationError) -> SpecError:
    problems = []
    errors = exc.errors()
    for err in errors[:8]:
        # The first location item is the union branch tag ("finetune" …); drop it.
        loc = ".".join(printable(str(part), 40) for part in err["loc"][1:]) or "(top level)"
        problems.append(f"{loc}: {printable(err['msg'])}" + _input_hint(err))
    if len(errors) > 8:
        problems.append(f"and {len(errors) - 8} more")
    return SpecError(
        f"{origin} is not a valid job spec.",
        "; ".join(problems),
        "Correct the named fields; see examples/*.toml for a complete spec of each kind.",
    )


def _input_hint(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return " (unknown key — check its spelling)"
    if "input" in err and not isinstance(err["input"], dict):
        return f" (got {shown(err['input'])})"  # cut short: a value may be megabytes long
    return ""
