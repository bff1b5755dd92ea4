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
from gpuscout.userfile import read_user_toml

Precision = Literal["fp32", "bf16_mixed", "bf16", "fp16_mixed"]
Optimizer = Literal["adamw", "adamw_8bit", "sgd", "adafactor"]
Method = Literal["full", "lora", "qlora"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp"]
Attention = Literal["flash", "sdpa", "eager"]
WeightFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
KvDtype = Literal["fp32", "bf16", "fp16", "fp8"]
Engine = Literal["vllm", "hf"]
ImageDtype = Literal["fp32", "bf16", "fp16"]

class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Lora(Spec):
    rank: int = Field(16, gt=0, le=4096)
    alpha: int = Field(32, gt=0)
    target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"


class Slo(Spec):
    ttft_p95_s: float | None = Field(None, gt=0)
    tpot_p95_s: float | None = Field(None, gt=0)
    e2e_p95_s: float | None = Field(None, gt=0)


class FinetuneJob(Spec):
    kind: Literal["finetune"]
    name: str = "fine-tune"
    model: str
    method: Method = "lora"
    lora: Lora = Lora()
    precision: Precision = "bf16_mixed"
    optimizer: Optimizer = "adamw"
    micro_batch: int = Field(1, gt=0)
    seq_len: int = Field(2048, gt=0)
    grad_accum: int = Field(1, gt=0)
    gradient_checkpointing: bool = False
    attention: Attention = "sdpa"
    chunked_cross_entropy: bool = False
    optimizer_offload: bool = False  # ZeRO-Offload / FSDP CPU offload of optimizer states
    gpus: int = Field(1, gt=0, le=4096)
    sharding: Sharding = "none"
    tensor_parallel: int = Field(1, gt=0, le=64)
    dataset_tokens: int = Field(10_000_000, gt=0)
    epochs: float = Field(1.0, gt=0)
    allow_long_context: bool = False  # train past the model's max_position_embeddings on purpose

    @model_validator(mode="after")
    def _consistent(self) -> FinetuneJob:
        if self.gpus % self.tensor_parallel:
            raise ValueError(
                f"gpus ({self.gpus}) must be a multiple of tensor_parallel ({self.tensor_parallel})"
            )
        if self.method == "qlora" and self.precision == "fp32":
            raise ValueError("QLoRA computes in 16-bit; use precision 'bf16_mixed' or 'fp16_mixed'")
        return self


class InferenceJob(Spec):
    kind: Literal["inference"]
    name: str = "inference"
    model: str
    weights: WeightFormat = "bf16"
    int4_group_size: int = Field(128, gt=0)
    kv_cache_dtype: KvDtype = "bf16"
    prompt_tokens: int = Field(1024, gt=0)
    output_tokens: int = Field(256, gt=0)
    concurrency: int = Field(1, gt=0)
    engine: Engine = "vllm"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_num_batched_tokens: int = Field(8192, gt=0)
    tensor_parallel: int = Field(1, gt=0, le=64)
    requests: int = Field(1000, gt=0)
    slo: Slo = Slo()
    allow_long_context: bool = False

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


class ImageJob(Spec):
    kind: Literal["image"]
    name: str = "image generation"
    model: str
    width: int = Field(1024, gt=0, le=16384)
    height: int = Field(1024, gt=0, le=16384)
    steps: int = Field(30, gt=0)
    batch: int = Field(1, gt=0)
    guidance: bool = True  # classifier-free guidance: a conditional and an unconditional pass
    images: int = Field(1000, gt=0)
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
    data = read_user_toml(path, "job spec", "Check the path; examples live in examples/*.toml.")
    return parse_job(data, origin=str(path))


def _spec_error(origin: str, exc: ValidationError) -> SpecError:
    problems = []
    for err in exc.errors():
        # The first location item is the union branch tag ("finetune" …); drop it.
        loc = ".".join(str(part) for part in err["loc"][1:]) or "(top level)"
        problems.append(f"{loc}: {err['msg']}" + _input_hint(err))
    return SpecError(
        f"{origin} is not a valid job spec.",
        "; ".join(problems),
        "Correct the named fields; see examples/*.toml for a complete spec of each kind.",
    )


def _input_hint(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return " (unknown key — check its spelling)"
    if "input" in err and not isinstance(err["input"], dict):
        return f" (got {err['input']!r})"
    return ""
