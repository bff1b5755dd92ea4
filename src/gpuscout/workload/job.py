"""Job specs: a TOML file describing the job, mapped 1:1 onto typed, validated models.

Four kinds, told apart by the top-level `kind` key:

    kind = "finetune"   # full / LoRA / QLoRA training of a language model
    kind = "inference"  # serving a language model: prompts, outputs, concurrency, SLOs
    kind = "image"      # diffusion image generation
    kind = "video"      # diffusion video generation (Wan, LTX-Video, CogVideoX, HunyuanVideo)

Validation here is what can be checked from the spec alone. Checks that need the model (context
beyond its maximum, LoRA rank above the hidden size) live in `estimate.validate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from gpuscout.errors import SpecError
from gpuscout.frozen import Frozen
from gpuscout.userfile import MAX_JOB_BYTES, printable, read_user_toml, shown
from gpuscout.workload.frameworks import apply_defaults

Precision = Literal["fp32", "bf16_mixed", "bf16", "fp16_mixed"]
Optimizer = Literal["adamw", "adamw_8bit", "sgd", "adafactor", "paged_adamw_8bit", "paged_adamw_32bit"]
# What a checkpointed decoder layer keeps (docs/estimator.md §2.14, §2.16):
#   "full"             each layer checkpointed whole: only its input is saved (HF, torchtune, litgpt).
#   "selective"        every layer; PyTorch SAC saving every matmul and attention output (gpuscout's trace).
#   "selective_op"     every layer; torchtitan's op-level SAC: attention outputs and every other matmul.
#   "selective_layers" every k-th layer checkpointed whole, the others keep everything (torchtitan /
#                      torchtune ac_mode "selective" with an integer ac_option = checkpoint_layer_interval).
CheckpointPolicy = Literal["full", "selective", "selective_op", "selective_layers"]
# How the loss turns hidden states into a loss (docs/estimator.md §2.16):
#   "full"           fp32 logits of every token at once (transformers ForCausalLMLoss, torchtitan).
#   "chunked_output" the output in chunks, each upcast and cross-entropied alone (torchtune
#                    CEWithChunkedOutputLoss, litgpt chunked_cross_entropy): fp32 log-softmax kept for all.
#   "fused"          fused linear + cross-entropy kernels that keep one chunk's logits (Liger, unsloth);
#                    what chunked_cross_entropy = true has always meant.
#   "full_output_held" "full" as transformers < 4.45 wrote it (LlamaForCausalLM: logits = logits.float()
#                    before the loss, returned in the output) under a training loop that keeps the model
#                    output alive through loss.backward() (Answer.AI fsdp_qlora train.py): the fp32
#                    logits stay allocated beside the loss backward's tensors.
Loss = Literal["full", "chunked_output", "fused", "full_output_held"]
Padding = Literal["max_length", "longest"]
# Most names an `unquantized_modules` list may hold: far past a model's few dozen distinct linears.
MAX_SKIP_MODULES = 256
Method = Literal["full", "lora", "qlora"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp"]
Attention = Literal["flash", "sdpa", "eager"]
WeightFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
KvDtype = Literal["fp32", "bf16", "fp16", "fp8"]
Engine = Literal["vllm", "hf"]
ImageDtype = Literal["fp32", "bf16", "fp16"]
# diffusers offload: "model" = enable_model_cpu_offload (one whole component on the GPU at a time),
# "sequential" = enable_sequential_cpu_offload (one leaf module at a time; far slower).
Offload = Literal["none", "model", "sequential"]

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


class Spec(Frozen):
    # allow_inf_nan=False: `epochs = inf` or `nan` would turn every runtime and cost into inf or NaN.
    model_config = ConfigDict(allow_inf_nan=False)


class Lora(Spec):
    # LoRA rank r: the inner size of each adapter's two matrices (peft r).
    rank: int = Field(16, gt=0, le=4096)
    # LoRA scaling numerator: the adapter's update is scaled by alpha / rank (peft lora_alpha).
    alpha: int = Field(32, gt=0, le=1_000_000)
    # Linear layers that get adapters, by leaf name ("q_proj", "v_proj"), or "all-linear".
    target_modules: tuple[Name, ...] | Literal["all-linear"] = Field("all-linear", max_length=1024)
    # LoRA on the output head (lm_head) too: peft target_modules with "lm_head", torchtune
    # apply_lora_to_output, litgpt lora_head. Off in every framework's defaults.
    output_head: bool = False
    quiet_defaults: ClassVar[dict[str, Any]] = {"output_head": False}


class Slo(Spec):
    # Target: 95th-percentile time to the first token, seconds.
    ttft_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    # Target: 95th-percentile time per output token after the first, seconds.
    tpot_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    # Target: 95th-percentile end-to-end latency of a request, seconds.
    e2e_p95_s: float | None = Field(None, gt=0, le=MAX_SECONDS)


class FinetuneJob(Spec):
    # The kind of job: a fine-tune of a language model.
    kind: Literal["finetune"]
    # The job's name, shown in reports and result files.
    name: Name = "fine-tune"
    # Preset id (`gpuscout model --list`), a config.json, or a model folder.
    model: ModelRef
    # The trainer, "<id>" or "<id>@<version>" (workload/frameworks.toml): its documented defaults fill
    # the fields this spec leaves out. Rewritten to the resolved "<id>@<version>". None: gpuscout's own
    # defaults (transformers + peft), exactly as before frameworks were part of the job.
    framework: Name | None = None
    quiet_defaults: ClassVar[dict[str, Any]] = {"framework": None, "checkpoint_layer_interval": 1, "loss": None}
    # What is trained: "full" every weight, "lora" adapters on frozen 16-bit weights, "qlora" adapters on 4-bit
    # ones.
    method: Method = "lora"
    # The LoRA adapters ([lora] table), with method lora or qlora.
    lora: Lora = Lora()
    # Number format of the weights and compute: "bf16_mixed" keeps fp32 master weights.
    precision: Precision = "bf16_mixed"
    # The optimizer; its states per parameter set much of the memory.
    optimizer: Optimizer = "adamw"
    # Sequences per GPU per forward/backward pass.
    micro_batch: int = Field(1, gt=0, le=MAX_BATCH)
    # Tokens per training sequence (the context trained on).
    seq_len: int = Field(2048, gt=0, le=MAX_CONTEXT)
    # Micro-batches accumulated before each optimizer step.
    grad_accum: int = Field(1, gt=0, le=100_000)
    # Recompute activations in the backward instead of keeping them (less memory, more time).
    gradient_checkpointing: bool = False
    # Attention kernel: "flash" (FlashAttention 2), "sdpa" (PyTorch), "eager" (keeps the score matrix).
    attention: Attention = "sdpa"
    # The fused loss that keeps one chunk of logits (loss = "fused" says the same).
    chunked_cross_entropy: bool = False
    optimizer_offload: bool = False  # ZeRO-Offload / FSDP CPU offload of optimizer states
    # GPUs the job runs on.
    gpus: int = Field(1, gt=0, le=4096)
    # How weights, gradients and optimizer states are split across GPUs (DeepSpeed ZeRO stage or FSDP).
    sharding: Sharding = "none"
    # GPUs each layer's matrices are split across (gpus must be a multiple).
    tensor_parallel: int = Field(1, gt=0, le=64)
    # Tokens in the training set: with epochs, the work the whole job does.
    dataset_tokens: int = Field(10_000_000, gt=0, le=MAX_TOKENS)
    # Passes over the dataset.
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
    # --- training settings (docs/estimator.md §2.14); each default keeps a spec's old meaning ---
    # torch.compile on the model (inductor): fused kernels, faster steps.
    compile: bool = False
    # With gradient_checkpointing: "full" recomputes each decoder layer; "selective" saves matmul
    # outputs and recomputes only pointwise ops (PyTorch's selective activation checkpointing).
    checkpoint_policy: CheckpointPolicy = "full"
    # checkpoint_policy "selective_layers": checkpoint every k-th decoder layer (layers k, 2k, …).
    checkpoint_layer_interval: int = Field(1, gt=0, le=1024)
    # The loss implementation (see Loss). None: "fused" with chunked_cross_entropy, else "full".
    loss: Loss | None = None
    # Saved activations go to pinned host RAM (torch.autograd.graph.save_on_cpu; torchtune's
    # enable_activation_offloading), about one layer's worth stays on the GPU.
    activation_offload: bool = False
    # FSDP CPUOffload(offload_params=True) / ZeRO-3 offload_param: parameters, gradients and optimizer
    # states live in host RAM; one unit is gathered onto the GPU at a time.
    offload_params: bool = False
    # The optimizer updates each parameter as soon as its gradient is ready and frees the gradient
    # (register_post_accumulate_grad_hook; torchtune optimizer_in_bwd). No gradient accumulation.
    optimizer_in_backward: bool = False
    # QLoRA: linear modules kept in 16-bit (bitsandbytes llm_int8_skip_modules / modules_to_not_convert),
    # by leaf name ("lm_head", "down_proj") or dotted path.
    unquantized_modules: tuple[Name, ...] = Field((), max_length=MAX_SKIP_MODULES)
    # Several examples packed into each seq_len row (TRL packing=True): no padding.
    packing: bool = False
    # Mean tokens per training example; None: every example fills seq_len (the old meaning).
    sample_tokens: int | None = Field(None, gt=0, le=MAX_CONTEXT)
    # Without packing: pad each example to seq_len ("max_length") or each batch to its longest ("longest").
    padding: Padding = "max_length"

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: Any) -> Any:
        return apply_defaults(data) if isinstance(data, dict) else data

    @property
    def loss_impl(self) -> Loss:
        """The loss as modelled: the `loss` field, or what chunked_cross_entropy has always meant."""
        if self.loss is not None:
            return self.loss
        return "fused" if self.chunked_cross_entropy else "full"

    @model_validator(mode="after")
    def _settings(self) -> FinetuneJob:
        if self.checkpoint_policy != "full" and not self.gradient_checkpointing:
            raise ValueError(f'checkpoint_policy = "{self.checkpoint_policy}" needs gradient_checkpointing = true '
                             "(it chooses what the checkpointed layers save); set both, or drop checkpoint_policy")
        if self.checkpoint_layer_interval > 1 and self.checkpoint_policy != "selective_layers":
            raise ValueError(f"checkpoint_layer_interval = {self.checkpoint_layer_interval} needs "
                             'checkpoint_policy = "selective_layers" (it says which layers are checkpointed)')
        if self.loss is not None and self.chunked_cross_entropy and self.loss != "fused":
            raise ValueError(f'chunked_cross_entropy = true is the fused loss, but loss = "{self.loss}"; '
                             "keep only loss")
        if self.optimizer_in_backward and self.grad_accum > 1:
            raise ValueError(f"optimizer_in_backward updates each weight inside the backward, so gradients cannot "
                             f"accumulate over grad_accum = {self.grad_accum} micro-batches; set grad_accum = 1 "
                             f"(raise micro_batch to {self.micro_batch * self.grad_accum} for the same batch) "
                             "or drop optimizer_in_backward")
        if self.offload_params and self.sharding not in ("fsdp", "zero3"):
            raise ValueError('offload_params is FSDP / ZeRO-3 parameter offload; set sharding = "fsdp" '
                             '(or "zero3"), which works on one GPU too, or drop offload_params')
        if self.unquantized_modules and self.method != "qlora":
            raise ValueError("unquantized_modules names linears kept out of 4-bit quantization, so it needs "
                             'method = "qlora"; drop it for full and LoRA fine-tunes')
        if self.sample_tokens is not None and self.sample_tokens > self.seq_len:
            raise ValueError(f"sample_tokens ({self.sample_tokens}) is the mean example length and cannot exceed "
                             f"seq_len ({self.seq_len}), where examples are cut; raise seq_len or lower sample_tokens")
        return self

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

    # Preset id (`gpuscout model --list`), a config.json, or a model folder.
    model: ModelRef
    # Number format of the served weights (fp8, int8, int4 are quantized).
    weights: WeightFormat = "bf16"
    # int4 weights: weights per quantization scale (GPTQ / AWQ group size).
    int4_group_size: int = Field(128, gt=0, le=MAX_BATCH)
    # Number format of the KV cache.
    kv_cache_dtype: KvDtype = "bf16"
    # Tokens in each request's prompt.
    prompt_tokens: int = Field(1024, gt=0, le=MAX_CONTEXT)
    # Tokens generated per request.
    output_tokens: int = Field(256, gt=0, le=MAX_CONTEXT)
    # Requests in flight at once.
    concurrency: int = Field(1, gt=0, le=MAX_CONCURRENCY)
    # vLLM's token budget per scheduler step (prefill chunks share it).
    max_num_batched_tokens: int = Field(8192, gt=0, le=100_000_000)
    # vLLM engine settings (docs/estimator.md §2.8). max_num_seqs None = vLLM V1's default for the
    # GPU: 1024 on GPUs of 70 GiB or more that are not A100s, else 256 (vllm/engine/arg_utils.py).
    max_num_seqs: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    enforce_eager: bool = False  # no CUDA graphs: frees their memory, slows decode
    enable_prefix_caching: bool = True  # vLLM V1's default
    # Share of each prompt found in the prefix cache (a shared system prompt): not recomputed.
    prefix_hit_rate: float = Field(0.0, ge=0, lt=1)
    # Requests the whole job serves: the work it is priced for.
    requests: int = Field(1000, gt=0, le=MAX_COUNT)
    # Serve past the model's max_position_embeddings on purpose.
    allow_long_context: bool = False
    # Quantized weights only: linears kept 16-bit (llm_int8_skip_modules / modules_to_not_convert),
    # by leaf name ("lm_head", "down_proj") or dotted path (docs/estimator.md §2.14).
    unquantized_modules: tuple[Name, ...] = Field((), max_length=MAX_SKIP_MODULES)

    @model_validator(mode="after")
    def _skip_needs_quantized_weights(self) -> ServedModel:
        if self.unquantized_modules and self.weights not in ("fp8", "int8", "int4"):
            raise ValueError(f"unquantized_modules keeps linears out of weight quantization, but weights = "
                             f"{self.weights!r} quantizes nothing; set weights to fp8, int8 or int4, or drop it")
        return self

    @model_validator(mode="after")
    def _hits_need_the_prefix_cache(self) -> ServedModel:
        if self.prefix_hit_rate and not self.enable_prefix_caching:
            raise ValueError(f"prefix_hit_rate = {self.prefix_hit_rate} needs enable_prefix_caching = true "
                             "(without the cache every prompt is computed in full); enable it or drop the rate")
        return self

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


class CoServed(ServedModel):
    """Another model served on the same GPUs, by its own engine process (vLLM runs one model per
    process). The GPUs, tensor parallelism and engine are the job's; the rest is per model."""

    name: Name | None = None  # its label in reports; default: the model reference
    # Accepted only to say clearly that they must match the job's (all models share the GPUs).
    tensor_parallel: int | None = Field(None, gt=0, le=64)
    # Must match the job's engine when given (all models share the GPUs).
    engine: Engine | None = None


class InferenceJob(ServedModel):
    # The kind of job: serving a language model.
    kind: Literal["inference"]
    # The job's name, shown in reports and result files.
    name: Name = "inference"
    # The serving engine: "vllm", or "hf" (transformers generate).
    engine: Engine = "vllm"
    # Share of each GPU's memory the engine may take (vLLM's setting).
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # GPUs the model is split across (one replica).
    tensor_parallel: int = Field(1, gt=0, le=64)
    # Latency targets ([slo] table): offers that miss them are excluded.
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
    # The kind of job: diffusion image generation.
    kind: Literal["image"]
    # The job's name, shown in reports and result files.
    name: Name = "image generation"
    # Preset id (`gpuscout model --list`) or a diffusers pipeline folder.
    model: ModelRef
    # Image width, pixels (a multiple of 8).
    width: int = Field(1024, gt=0, le=16384)
    # Image height, pixels (a multiple of 8).
    height: int = Field(1024, gt=0, le=16384)
    # Denoising steps per image.
    steps: int = Field(30, gt=0, le=10_000)
    # Images per pipeline call.
    batch: int = Field(1, gt=0, le=MAX_BATCH)
    guidance: bool = True  # classifier-free guidance: a conditional and an unconditional pass
    # Images the whole job makes: the work it is priced for.
    images: int = Field(1000, gt=0, le=MAX_COUNT)
    # Number format of the pipeline's weights and compute.
    dtype: ImageDtype = "fp16"
    # Attention kernel: "flash", "sdpa" (PyTorch), "eager".
    attention: Attention = "sdpa"
    # diffusers vae.enable_tiling(): the VAE decodes in tiles (less memory).
    vae_tiling: bool = False
    # diffusers vae.enable_slicing(): the batch is decoded one image at a time (docs/estimator.md §2.10).
    vae_slicing: bool = False
    offload: Offload = "none"  # diffusers CPU offload (see Offload); `cpu_offload = true` still means "model"

    @model_validator(mode="before")
    @classmethod
    def _old_offload_spelling(cls, data: Any) -> Any:
        return _legacy_cpu_offload(data)

    @model_validator(mode="after")
    def _multiple_of_eight(self) -> ImageJob:
        if self.width % 8 or self.height % 8:
            raise ValueError("width and height must be multiples of 8 (the VAE downsamples by 8)")
        return self


def _legacy_cpu_offload(data: Any) -> Any:
    """Accept the old `cpu_offload = true/false` spelling as offload "model"/"none"."""
    if not isinstance(data, dict) or "cpu_offload" not in data:
        return data
    data = dict(data)
    old = data.pop("cpu_offload")
    if not isinstance(old, bool):
        raise ValueError("cpu_offload must be true or false (or use offload = \"none\", \"model\" or \"sequential\")")
    if "offload" in data and data["offload"] != ("model" if old else "none"):
        raise ValueError("cpu_offload and offload disagree; keep only offload")
    data.setdefault("offload", "model" if old else "none")
    return data


MAX_FRAMES = 10_000  # frames per clip: 7 minutes at 24 fps, far past any model's trained length


class VideoJob(Spec):
    """Text-to-video with a diffusers video pipeline (Wan, LTX-Video, CogVideoX, HunyuanVideo)."""

    # The kind of job: diffusion video generation.
    kind: Literal["video"]
    # The job's name, shown in reports and result files.
    name: Name = "video generation"
    # Preset id (`gpuscout model --list`) or a diffusers pipeline folder.
    model: ModelRef
    # Frame width, pixels.
    width: int = Field(832, gt=0, le=16384)
    # Frame height, pixels.
    height: int = Field(480, gt=0, le=16384)
    frames: int = Field(81, gt=0, le=MAX_FRAMES)  # pixel frames per clip (the model checks its own 4k+1 rule)
    # Denoising steps per clip.
    steps: int = Field(50, gt=0, le=10_000)
    batch: int = Field(1, gt=0, le=MAX_BATCH)  # clips per pipeline call
    guidance: bool = True  # classifier-free guidance: a conditional and an unconditional pass
    # Clips the whole job makes: the work it is priced for.
    clips: int = Field(100, gt=0, le=MAX_COUNT)
    # Number format of the pipeline's weights and compute.
    dtype: ImageDtype = "bf16"
    # Attention kernel: "flash", "sdpa" (PyTorch), "eager".
    attention: Attention = "sdpa"
    vae_tiling: bool = False  # diffusers vae.enable_tiling(): spatial tiles (and temporal ones where supported)
    # diffusers CPU offload: "model" one component on the GPU at a time, "sequential" one module.
    offload: Offload = "none"

    @model_validator(mode="after")
    def _multiple_of_eight(self) -> VideoJob:
        if self.width % 8 or self.height % 8:
            raise ValueError("width and height must be multiples of 8 (the VAE downsamples by 8)")
        return self


# Any job: the one name for the four kinds, used wherever a function takes any of them.
Job = FinetuneJob | InferenceJob | ImageJob | VideoJob
_JOB_ADAPTER: TypeAdapter[Job] = TypeAdapter(Annotated[Job, Field(discriminator="kind")])


def parse_job(
    data: dict[str, Any], *, origin: str = "job spec"
) -> Job:
    """Validate a job spec already read into a dict; errors name the field and the fix."""
    if "kind" not in data:
        raise SpecError(
            f"{origin} has no `kind`.",
            "gpuscout needs to know which kind of job this is.",
            'Add a top-level line: kind = "finetune", "inference", "image" or "video".',
        )
    try:
        return _JOB_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise _spec_error(origin, exc) from None


def load_job(path: Path) -> Job:
    """Read a TOML job spec. Malformed TOML points at the line; invalid values name the field."""
    fix = "Check the path; examples live in examples/*.toml."
    data = read_user_toml(path, "job spec", fix, max_bytes=MAX_JOB_BYTES)
    return parse_job(data, origin=str(path))


def _spec_error(origin: str, exc: ValidationError) -> SpecError:
    problems = []
    errors = exc.errors()
    for err in errors[:8]:
        if err["type"] == "extra_forbidden":
            problems.append(_unknown_key(err["loc"]))
            continue
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


def _unknown_key(loc: tuple[str | int, ...]) -> str:
    """"unknown field 'lora_rnak' in [lora]: did you mean 'rank'?" — the nearest key the table accepts."""
    import difflib

    kind, path, key = str(loc[0]), loc[1:-1], printable(str(loc[-1]), 40)
    keys = table_keys(kind, path)
    tables = [str(p) for p in path if not isinstance(p, int)]
    where = (f"[[{tables[-1]}]]" if any(isinstance(p, int) for p in path) else f"[{'.'.join(tables)}]") if tables \
        else f'a {kind} spec'
    near = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6) if keys else []
    return f"unknown field '{key}' in {where}" + (f": did you mean '{near[0]}'?" if near else
                                                  " (check its spelling: `gpuscout spec` lists every field)")


def table_keys(kind: str, path: tuple[str | int, ...]) -> tuple[str, ...]:
    """The keys the table at `path` of a `kind` spec accepts (`("lora",)` → rank, alpha …); () if none."""
    kinds: dict[str, type[Spec]] = {"finetune": FinetuneJob, "inference": InferenceJob, "image": ImageJob,
                                    "video": VideoJob}
    model: type[Spec] | None = kinds.get(kind)
    for part in path:
        if isinstance(part, int) or model is None:
            continue  # an element of an array of tables
        info = model.model_fields.get(part)
        model = next((a for a in (info.annotation, *get_args(info.annotation)) if isinstance(a, type)
                      and issubclass(a, Spec)), None) if info is not None else None
    return tuple(model.model_fields) if model is not None else ()


def _input_hint(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return " (unknown key — check its spelling)"
    if "input" in err and not isinstance(err["input"], dict):
        return f" (got {shown(err['input'])})"  # cut short: a value may be megabytes long
    return ""
