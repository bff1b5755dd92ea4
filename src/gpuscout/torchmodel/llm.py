"""A language-model job's real `transformers` model: architecture, precision, adapters, optimizer.

`build_causal_lm` builds the causal LM from its config.json dict — on the meta device for the
memory trace, or with seeded random weights (or a local checkpoint's weights) on the CPU or a GPU
for the bench. Nothing is ever downloaded. The recipe helpers (`param_dtype`, `autocast`,
`apply_lora`, `build_optimizer`, `enable_checkpointing`) follow what the Hugging Face Trainer and
peft do for the same job spec, so the trace and the bench run the same thing.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from gpuscout.errors import MissingDependencyError, SpecError, UnsupportedHere


def import_torch_stack(*names: str, purpose: str) -> Any:
    """Import torch (returned) and the named packages; a missing one is a clear user error."""
    for name in ("torch", *names):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise MissingDependencyError(f"{purpose} needs '{name}', which is not installed.",
                                         f"{purpose} runs the job's real model code.",
                                         "pip install 'gpuscout[bench]'") from exc
    import torch

    return torch


def preload_model_code(config: dict[str, Any]) -> None:
    """Import the architecture's modeling module now (transformers imports model code lazily on
    first use), so that a startup clock can tell imports from building."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    kwargs = dict(config)
    model_type = kwargs.pop("model_type", None)
    try:
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.for_model(model_type, **kwargs))]
    except (KeyError, ValueError, TypeError):
        return  # build_causal_lm reports an unknown architecture with its own message


def hf_model_config(config: dict[str, Any]) -> Any:
    """transformers' config object for a config.json dict; unknown architectures are user errors."""
    from transformers import AutoConfig

    kwargs = dict(config)
    model_type = kwargs.pop("model_type", None)
    if not model_type:
        raise SpecError("The model config has no 'model_type'.",
                        "transformers needs it to pick the model class (e.g. 'llama', 'qwen2').",
                        "Use the model's config.json, which includes model_type.")
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except (ValueError, KeyError) as exc:
        raise SpecError(f"transformers cannot build a config for model_type '{model_type}'.", str(exc),
                        "Check the model_type, or upgrade transformers if the architecture is new.") from exc


def dtype_keyword() -> str:
    """transformers 4.56 renamed `torch_dtype` to `dtype`; older releases reject the new name."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def build_causal_lm(config: dict[str, Any], *, attention: str, dtype: Any, device: str, seed: int = 0,
                    checkpoint_dir: str | None = None, quantization: Any = None, sliced: bool = False) -> Any:
    """The causal LM on `device` ("meta", "cpu" or "cuda").

    Random weights are seeded; with `checkpoint_dir` the local safetensors are loaded instead
    (`from_pretrained(local_files_only=True)`). `sliced` silences transformers' warning about the
    deeper layers' weights a depth slice leaves unused, by design.
    """
    import torch
    from transformers import AutoModelForCausalLM

    hf_config = hf_model_config(config)
    auto: Any = AutoModelForCausalLM  # typed in some transformers releases, untyped in others
    kwargs = {dtype_keyword(): dtype, "attn_implementation": attention}
    torch.manual_seed(seed)
    try:
        if checkpoint_dir is not None:
            extra = {"quantization_config": quantization} if quantization is not None else {}
            with _quiet_transformers(sliced):
                return auto.from_pretrained(checkpoint_dir, config=hf_config, local_files_only=True,
                                            device_map=device, **kwargs, **extra)
        with torch.device(device):
            return auto.from_config(hf_config, **kwargs)
    except ValueError as exc:
        if "attention implementation" not in str(exc):
            raise
        raise SpecError(f"transformers has no '{attention}' attention for model_type '{config.get('model_type')}'.",
                        str(exc).split(". ")[0] + ".", 'Set attention = "eager" in the job spec.') from None


@contextmanager
def _quiet_transformers(quiet: bool) -> Iterator[None]:
    """Lower transformers' log level to errors for the duration, when asked to."""
    if not quiet:
        yield
        return
    from transformers.utils import logging as transformers_logging

    hf_logging: Any = transformers_logging  # untyped in transformers' stubs
    saved = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(saved)


def param_dtype(torch: Any, precision: str, method: str) -> Any:
    """Parameter dtype of the model as built.

    Full fine-tuning under a mixed recipe keeps fp32 parameters (AMP). LoRA/QLoRA users load the
    frozen base in 16-bit and peft keeps the adapters in fp32 (`autocast_adapter_dtype=True`);
    'bf16' is pure bf16. The analytic estimate assumes the same.
    """
    sixteen = {"bf16": torch.bfloat16, "bf16_mixed": torch.bfloat16, "fp16_mixed": torch.float16}
    if precision == "bf16" or (method != "full" and precision in sixteen):
        return sixteen[precision]
    return torch.float32


def autocast(torch: Any, precision: str, device: str) -> AbstractContextManager[Any]:
    """torch.autocast for the mixed recipes, nothing for pure fp32 or bf16."""
    dtype = {"bf16_mixed": torch.bfloat16, "fp16_mixed": torch.float16}.get(precision)
    if dtype is None:
        return nullcontext()
    context: AbstractContextManager[Any] = torch.autocast(device, dtype=dtype)
    return context


def enable_checkpointing(model: Any, policy: str = "full", layer_interval: int = 1) -> None:
    """HF per-decoder-layer activation checkpointing, non-reentrant (no input-grad hack needed).

    policy "selective": PyTorch's selective activation checkpointing inside each checkpointed layer
    (`create_selective_checkpoint_contexts`): matmul and attention outputs are saved, everything else
    (norms, activations, casts, residual adds) is recomputed in the backward. "selective_op":
    torchtitan's op-level rule (`op_level_checkpoint_context`). "selective_layers": only every
    `layer_interval`-th decoder layer is checkpointed, as torchtitan's and torchtune's integer
    selective_ac_option wrap blocks k, 2k, … (the flag of transformers' GradientCheckpointingLayer is
    cleared on the others).
    """
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if policy == "selective":
        kwargs["context_fn"] = selective_checkpoint_context
    elif policy == "selective_op":
        kwargs["context_fn"] = op_level_checkpoint_context
    elif policy not in ("full", "selective_layers"):
        raise ValueError(f"unknown checkpoint policy {policy!r}")
    if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if policy == "selective_layers" and layer_interval > 1:
        _checkpoint_every_kth_layer(model, layer_interval)


def _checkpoint_every_kth_layer(model: Any, k: int) -> None:
    from gpuscout.errors import MissingDependencyError

    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # transformers before 4.52: one flag on the whole model, none per layer
        layers: list[Any] = []
    else:
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise MissingDependencyError(
            "Every k-th layer checkpointing (selective_layers) cannot run with this transformers.",
            "It turns checkpointing off layer by layer through transformers' GradientCheckpointingLayer, "
            "which this model or transformers version does not have.",
            "Upgrade transformers (pip install -U transformers), or use checkpoint_policy = \"full\".")
    for index, layer in enumerate(layers, start=1):
        layer.gradient_checkpointing = index % k == 0


def _sac_saved_ops() -> frozenset[Any]:
    """The ops selective checkpointing saves: matmuls and the attention kernels (as torchtitan's op-level
    SAC policy does; its extra rule of saving only every other matmul is not used here)."""
    import torch

    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward")
    return frozenset(getattr(aten, name).default for name in names if hasattr(aten, name))


def selective_checkpoint_context() -> Any:
    """Context pair for `torch.utils.checkpoint.checkpoint(context_fn=...)`: save matmuls, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = _sac_saved_ops()

    def policy(_ctx: Any, op: Any, *_args: Any, **_kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)  # type: ignore[no-untyped-call]


def op_level_checkpoint_context() -> Any:
    """torchtitan's op-level selective checkpointing (models/llama3/infra/parallelize.py, selective_ac_option
    "op"): save the outputs of mm and the SDPA kernels, except every second mm, counted afresh for every
    checkpointed call of a layer (its `meta = defaultdict(int)` is built inside the context function).
    Its `_save_list` holds `aten.mm` only: `addmm` (a linear with a bias) is neither saved nor counted.
    The CPU flash kernel stands in for the CUDA ones when the trace runs on the CPU device."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    mm = aten.mm.default
    names = ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_flash_attention_for_cpu", "max")
    saved = frozenset({mm} | {getattr(aten, n).default for n in names if hasattr(aten, n)})
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, op: Any, *_args: Any, **_kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if op == mm:
            counts[mode] += 1
        keep = op in saved and not (op == mm and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)  # type: ignore[no-untyped-call]


# Saved tensors below this size stay where they are (torchtune OffloadActivations' min_offload_size).
MIN_OFFLOAD_BYTES = 1024


class _HeadFlag:
    """Set while the LM head and the loss run: their tensors are used at once by the backward, so
    torchtune wraps the output projection in a NoOpManager and does not offload them."""

    def __init__(self) -> None:
        self.in_head = False


class OffloadLedger:
    """Bytes the offload hooks moved off the device in one step (what host RAM holds at the backward's start)."""

    def __init__(self) -> None:
        self.moved_bytes = 0


def offload_activations(torch: Any, model: Any, *, fake: bool,
                        ledger: OffloadLedger | None = None) -> AbstractContextManager[Any]:
    """Saved-tensor hooks that move activations off the accelerator in the forward, back in the backward.

    As torchtune's OffloadActivations: parameters, buffers and tensors under MIN_OFFLOAD_BYTES stay, and
    so does everything saved from the LM head on. Real runs copy to host memory (pinned on CUDA), as
    `torch.autograd.graph.save_on_cpu` does. `fake` (the FakeTensor memory trace, which runs on the CPU
    device) drops the tensor and recreates one of the same layout on unpack, which is exactly what the
    accelerator's memory sees; the host copy is counted by the host-RAM estimate instead.
    """
    flag = _HeadFlag()
    head = model.get_output_embeddings()
    handles = [model.register_forward_pre_hook(lambda *_: setattr(flag, "in_head", False)),
               head.register_forward_pre_hook(lambda *_: setattr(flag, "in_head", True))]
    pin = torch.cuda.is_available()

    def stays(tensor: Any) -> bool:
        return (flag.in_head or isinstance(tensor, torch.nn.Parameter)
                or tensor.numel() * tensor.element_size() < MIN_OFFLOAD_BYTES)

    def pack(tensor: Any) -> Any:
        if stays(tensor):
            return tensor
        if ledger is not None:
            ledger.moved_bytes += tensor.numel() * tensor.element_size()
        if fake:
            return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device)
        host = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=pin)
        host.copy_(tensor)
        return (tensor.device, host)

    def unpack(packed: Any) -> Any:
        if isinstance(packed, torch.Tensor):
            return packed
        if fake:
            size, stride, dtype, device = packed
            return torch.empty_strided(size, stride, dtype=dtype, device=device)
        device, host = packed
        return host.to(device, non_blocking=pin)

    return _with_cleanup(torch.autograd.graph.saved_tensors_hooks(pack, unpack), handles)


@contextmanager
def _with_cleanup(hooks: Any, handles: list[Any]) -> Iterator[None]:
    try:
        with hooks:
            yield
    finally:
        for handle in handles:
            handle.remove()


def optimizer_in_backward(name: str, params: list[Any], device: str) -> Any:
    """One optimizer per parameter, stepped from `register_post_accumulate_grad_hook` as soon as the
    parameter's gradient is complete, then the gradient freed (torchtune's optimizer_in_bwd; PyTorch's
    "How to save memory by fusing the optimizer step into the backward pass" tutorial).
    Returns the per-parameter optimizers (for checkpoints and memory tracking)."""
    optimizers = {p: build_optimizer(name, [p], device) for p in params}

    def step(param: Any) -> None:
        optimizers[param].step()
        optimizers[param].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(step)
    return optimizers


def compile_model(torch: Any, model: Any, device: str) -> tuple[Any, str]:
    """torch.compile with the inductor backend when it can build kernels here, else aot_eager.

    On the CPU inductor writes and compiles C++ kernels; without a C++ compiler it fails at the first
    call, so gpuscout checks for one first and says which backend ran (on CUDA it generates Triton).
    """
    import shutil

    has_cxx = bool(shutil.which("g++") or shutil.which("c++"))
    backend = "inductor" if has_cxx or device == "cuda" else "aot_eager"
    with warnings.catch_warnings():
        # Importing inductor loads torch.utils.mkldnn, which still uses a deprecated TorchScript decorator.
        warnings.filterwarnings("ignore", message="`torch.jit.script_method` is deprecated",
                                category=DeprecationWarning)
        return torch.compile(model, backend=backend), backend


def apply_lora(model: Any, rank: int, alpha: int, targets: tuple[str, ...] | str) -> Any:
    """peft LoRA adapters on `targets` (leaf module names, or peft's "all-linear")."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets if isinstance(targets, str)
                        else list(targets), task_type="CAUSAL_LM")
    try:
        with warnings.catch_warnings():
            # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing` property.
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                                    category=FutureWarning)
            return get_peft_model(model, config)
    except ValueError as exc:
        raise SpecError("peft could not attach LoRA adapters to this model.", str(exc),
                        "Set lora.target_modules to module names that exist in the model (e.g. q_proj, v_proj).") \
            from exc


def build_optimizer(name: str, params: list[Any], device: str) -> Any:
    """The optimizer the HF Trainer would use for `name`."""
    import torch

    match name:
        case "adamw":
            # `adamw_torch_fused`, the HF Trainer's default optimizer with torch >= 2.8.
            return torch.optim.AdamW(params, lr=1e-5, fused=True)
        case "adamw_8bit":
            bnb = require_bitsandbytes(device, "The 8-bit AdamW optimizer")
            return bnb.optim.AdamW8bit(params, lr=1e-5)
        case "paged_adamw_8bit":
            bnb = require_bitsandbytes(device, "The paged 8-bit AdamW optimizer")
            return bnb.optim.PagedAdamW8bit(params, lr=1e-5)
        case "paged_adamw_32bit":
            bnb = require_bitsandbytes(device, "The paged 32-bit AdamW optimizer")
            return bnb.optim.PagedAdamW32bit(params, lr=1e-5)
        case "sgd":
            # SGD with momentum: one state per parameter (job specs name "SGD with momentum").
            return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        case "adafactor":
            # transformers' Adafactor (the HF Trainer's `optim="adafactor"`); torch.optim.Adafactor
            # calls `.item()` on the parameter norm, which fake tensors cannot answer.
            from transformers.optimization import Adafactor

            adafactor: Any = Adafactor
            return adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)
    raise SpecError(f"Unknown optimizer '{name}'.",
                    "gpuscout runs adamw, adamw_8bit, paged_adamw_8bit, paged_adamw_32bit, sgd and adafactor.",
                    "Pick one of those.")


def require_bitsandbytes(device: str, what: str) -> Any:
    """bitsandbytes on a CUDA machine, else a clear "not supported here"."""
    if device != "cuda":
        raise UnsupportedHere(f"{what} needs bitsandbytes' CUDA kernels; this run is on the CPU, so the case is "
                              "not supported here. Measure it on a GPU machine, or switch the spec to LoRA / "
                              "optimizer 'adamw' to measure the nearest configuration on this machine.")
    try:
        return importlib.import_module("bitsandbytes")  # optional, untyped
    except ImportError:
        raise UnsupportedHere(f"{what} needs bitsandbytes, which is not installed here; "
                              "pip install bitsandbytes on this GPU machine.") from None


def bnb_4bit_config(compute_dtype: Any, unquantized: tuple[str, ...] = ()) -> Any:
    """QLoRA's recipe (Dettmers et al. 2023): NF4 weights, double quantization, 16-bit compute.

    `unquantized` becomes `llm_int8_skip_modules` (it applies to 4-bit loading too); naming it replaces
    transformers' default of keeping the output head out, so lm_head is always added.
    """
    from transformers import BitsAndBytesConfig

    config: Any = BitsAndBytesConfig  # untyped in transformers' stubs
    skip = {"llm_int8_skip_modules": ["lm_head", *unquantized]} if unquantized else {}
    return config(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                  bnb_4bit_compute_dtype=compute_dtype, **skip)


def quantize_linears_nf4(model: Any, compute_dtype: Any, unquantized: tuple[str, ...] = ()) -> None:
    """Swap every decoder linear (not the LM head) for a bitsandbytes NF4 Linear4bit, in place.

    For random weights: from_config cannot quantize, so the 16-bit model is built on the GPU and
    each weight is quantized as it is moved into a Params4bit; its 16-bit copy is then freed.
    """
    import torch

    bnb: Any = importlib.import_module("bitsandbytes")
    parent_names = {id(module): name for name, module in model.named_modules()}
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or child_name == "lm_head" \
                    or is_unquantized(f"{parent_names[id(parent)]}.{child_name}", unquantized):
                continue
            quantized = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=compute_dtype, quant_type="nf4", device="meta")
            quantized.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, quant_type="nf4",
                                                 compress_statistics=True).to("cuda")
            if child.bias is not None:
                quantized.bias = child.bias
            setattr(parent, child_name, quantized)
    torch.cuda.empty_cache()


def is_unquantized(full_name: str, unquantized: tuple[str, ...]) -> bool:
    """Whether a skip entry names this module: its leaf name, or a dotted path it ends with (the rule of
    transformers' modules_to_not_convert; estimator/params.py counts the same modules)."""
    leaf = full_name.rsplit(".", 1)[-1]
    return any(entry == leaf or full_name == entry or full_name.endswith("." + entry) for entry in unquantized)


def next_token(model: Any, ids: Any, cache: Any) -> Any:
    """One forward into the cache, keeping only the last position's logits; returns the next ids."""
    params = inspect.signature(model.forward).parameters
    # transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40).
    cache_key = "cache" if "cache" in params else "past_key_values"
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    logits = model(input_ids=ids, use_cache=True, **{cache_key: cache}, **keep).logits
    return logits[:, -1:].argmax(dim=-1)
