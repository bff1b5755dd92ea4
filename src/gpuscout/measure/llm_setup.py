"""Building a language-model case inside its own process: model, adapters, optimizer, data.

The model is the job's real `transformers` architecture built from its config dict with random
weights (seeded; nothing is downloaded). When the job names a checkpoint directory with
safetensors files, its weights are loaded instead (`from_pretrained(local_files_only=True)`).
Depth slicing builds the first K decoder layers (`config_with_depth`); a checkpoint then loads
the weights of those layers only.

Data: synthetic tokens drawn uniformly from the vocabulary with a seeded `torch.Generator`, or the
user's dataset file — JSON Lines with a "text" field, or plain text — tokenized with the
checkpoint's own tokenizer when its directory has one, else by hashing whitespace-separated words
into the vocabulary (blake2b, so the same file gives the same ids everywhere). Either way the
tokens are packed into windows of the job's sequence length; timing does not depend on token
values, but a real tokenizer makes the padding-free token count honest.

torch, transformers, peft and bitsandbytes are imported inside functions only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.errors import MissingDependencyError, SpecError
from gpuscout.measure.harness import BenchSettings, UnsupportedHere
from gpuscout.workload.hf_config import config_with_depth
from gpuscout.workload.job import FinetuneJob, InferenceJob

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


@dataclass(frozen=True)
class LlmCaseSpec:
    """Everything one language-model case needs; pickled into the case's process."""

    name: str
    params: dict[str, Any]
    job: FinetuneJob | InferenceJob
    config: dict[str, Any]  # the full-depth config.json dict
    settings: BenchSettings
    device: str  # resolved: "cuda" or "cpu"
    model_dir: str | None = None  # the model directory (tokenizer, maybe weights)
    weights: bool = False  # model_dir holds safetensors weights to load
    gpu_sku: str | None = None  # catalog SKU of the local GPU, for MFU
    concurrency: int = 1  # inference: sequences decoded together


def import_stack(*, peft: bool = False) -> Any:
    """Import torch (returned), transformers and peft; explain what is missing."""
    for name in ("torch", "transformers", *(["peft"] if peft else [])):
        try:
            __import__(name)
        except ImportError as exc:
            raise MissingDependencyError(f"gpuscout bench needs '{name}', which is not installed.",
                                         "Benchmarks run the job's real model code.",
                                         "pip install 'gpuscout[bench]'") from exc
    import torch

    return torch


def preload_model_code(config: dict[str, Any]) -> None:
    """Import the architecture's modeling module now, so the `imports` phase holds it and
    `model_build` is building only (transformers imports model code lazily on first use)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    kwargs = dict(config)
    model_type = kwargs.pop("model_type", None)
    try:
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.for_model(model_type, **kwargs))]
    except (KeyError, ValueError, TypeError):
        return  # build_model reports an unknown architecture with its own message


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


def cpu_threads_note(torch: Any, device: str) -> list[str]:
    """CPU timings depend on the intra-op thread count, and collapse when other processes compete
    for the cores (OpenMP threads wait for descheduled peers); record the count beside the numbers."""
    if device == "cuda":
        # fp32 matmuls run on CUDA cores unless TF32 is allowed (PyTorch's default: off since 1.12).
        return [f"TF32 matmuls {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'} (torch default: off)"]
    return [f"CPU run with {torch.get_num_threads()} torch intra-op thread(s) (set by OMP_NUM_THREADS); other "
            "load on the machine's cores can slow multi-threaded CPU steps many times over"]


def resolve_attention(requested: str, device: str) -> tuple[str, str | None]:
    """transformers' attn_implementation for the spec's attention, and a note when it differs."""
    if requested == "flash":
        if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2", None
        why = "this run is on the CPU" if device != "cuda" else "flash-attn is not installed"
        return "sdpa", f"attention: 'flash' requested, but {why}; measured with sdpa (PyTorch's fused attention)"
    return requested, None


def built_config(config: dict[str, Any], settings: BenchSettings,
                 full_layers: int) -> tuple[dict[str, Any], int | None]:
    """The config actually built, and the depth K when slicing (None: full depth)."""
    if settings.layers is None or settings.layers >= full_layers:
        return dict(config), None
    return config_with_depth(config, settings.layers), settings.layers


def full_depth(config: dict[str, Any]) -> int:
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(config.get(key), int):
            return int(config[key])
    raise SpecError("The model config has no layer count.", "num_hidden_layers (or n_layer) is missing.",
                    "Use the model's full config.json.")


def build_model(spec: LlmCaseSpec, config: dict[str, Any], *, attention: str, dtype: Any,
                quantization: Any = None) -> Any:
    """The causal LM on the case's device: random seeded weights, or the checkpoint's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(config)
    model_type = kwargs.pop("model_type", None)
    if not model_type:
        raise SpecError("The model config has no 'model_type'.", "transformers picks the model class by it.",
                        "Use the model's config.json, which includes model_type.")
    hf_config = AutoConfig.for_model(model_type, **kwargs)
    auto: Any = AutoModelForCausalLM
    torch.manual_seed(spec.settings.seed)
    if spec.weights and spec.model_dir:
        from transformers.utils import logging as transformers_logging

        hf_logging: Any = transformers_logging  # untyped in transformers' stubs
        extra = {"quantization_config": quantization} if quantization is not None else {}
        verbosity = hf_logging.get_verbosity()
        if spec.settings.layers is not None:  # a depth slice leaves the deeper layers' weights unused, by design
            hf_logging.set_verbosity_error()
        try:
            return auto.from_pretrained(spec.model_dir, config=hf_config, local_files_only=True, dtype=dtype,
                                        attn_implementation=attention, device_map=spec.device, **extra)
        finally:
            hf_logging.set_verbosity(verbosity)
    with torch.device(spec.device):
        return auto.from_config(hf_config, attn_implementation=attention, dtype=dtype)


def weights_note(spec: LlmCaseSpec) -> str:
    if spec.weights and spec.model_dir:
        return f"weights loaded from the checkpoint {spec.model_dir} (local files only)"
    return f"random weights (seed {spec.settings.seed}): the architecture from its config, nothing downloaded"


def bnb_4bit_config(compute_dtype: Any) -> Any:
    """QLoRA's recipe (Dettmers et al. 2023): NF4 weights, double quantization, 16-bit compute."""
    from transformers import BitsAndBytesConfig

    config: Any = BitsAndBytesConfig  # untyped in transformers' stubs
    return config(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute_dtype)


def quantize_linears_nf4(model: Any, compute_dtype: Any) -> None:
    """Swap every decoder linear (not the LM head) for a bitsandbytes NF4 Linear4bit, in place.

    For random weights: from_config cannot quantize, so the 16-bit model is built on the GPU and
    each weight is quantized as it is moved into a Params4bit; its 16-bit copy is then freed.
    """
    import torch

    bnb: Any = importlib.import_module("bitsandbytes")
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or child_name == "lm_head":
                continue
            quantized = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=compute_dtype, quant_type="nf4", device="meta")
            quantized.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, quant_type="nf4",
                                                 compress_statistics=True).to("cuda")
            if child.bias is not None:
                quantized.bias = child.bias
            setattr(parent, child_name, quantized)
    torch.cuda.empty_cache()


def build_optimizer(name: str, params: list[Any], device: str) -> Any:
    """The optimizer the HF Trainer would use for `name` (fused AdamW is its default on torch ≥ 2.8)."""
    import torch

    match name:
        case "adamw":
            return torch.optim.AdamW(params, lr=1e-5, fused=True)
        case "adamw_8bit":
            bnb = require_bitsandbytes(device, "The 8-bit AdamW optimizer")
            return bnb.optim.AdamW8bit(params, lr=1e-5)
        case "sgd":
            return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        case "adafactor":
            from transformers.optimization import Adafactor

            adafactor: Any = Adafactor
            return adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)
    raise SpecError(f"Unknown optimizer '{name}'.", "bench supports adamw, adamw_8bit, sgd and adafactor.",
                    "Pick one of those.")


def token_batches(spec: LlmCaseSpec, *, vocab: int, batch: int, seq_len: int, count: int) -> list[Any]:
    """`count` batches of token ids (batch × seq_len) on the device: the dataset's, or seeded synthetic."""
    import torch

    if spec.settings.dataset is None:
        gen = torch.Generator().manual_seed(spec.settings.seed)
        ids = [torch.randint(0, vocab, (batch, seq_len), generator=gen) for _ in range(count)]
        return [t.to(spec.device) for t in ids]
    tokens = dataset_tokens(Path(spec.settings.dataset), spec.model_dir, vocab)
    need = batch * seq_len
    out = []
    for i in range(count):  # consecutive windows, wrapping around a short file
        window = [tokens[(i * need + j) % len(tokens)] for j in range(need)]
        out.append(torch.tensor(window, dtype=torch.long).view(batch, seq_len).to(spec.device))
    return out


def dataset_tokens(path: Path, model_dir: str | None, vocab: int) -> list[int]:
    texts = read_texts(path)
    tokenizer = _local_tokenizer(model_dir)
    ids: list[int] = []
    for text in texts:
        if tokenizer is not None:
            ids += [i % vocab for i in tokenizer(text, add_special_tokens=True)["input_ids"]]
        else:
            ids += [hashed_token(word, vocab) for word in text.split()]
    if not ids:
        raise SpecError(f"{path} holds no text.", "bench tokenizes the dataset's text to feed the model.",
                        'Pass a JSON Lines file with a "text" field per line, or a plain-text file.')
    return ids


def read_texts(path: Path) -> list[str]:
    """JSON Lines (the first line is an object) with a "text" field per line, else plain text."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"Cannot read the dataset {path}.", str(exc),
                        "Pass a readable UTF-8 JSONL or text file.") from None
    lines = [line for line in raw.splitlines() if line.strip()]
    if not lines or not lines[0].lstrip().startswith("{"):
        return [raw]
    texts = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path} line {number} is not JSON: {exc.msg}.", "The file looks like JSON Lines.",
                            "Fix that line, or pass a plain-text file.") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise SpecError(f'{path} line {number} has no "text" string.',
                            "bench reads the training text from the 'text' field of every line.",
                            'Give every line a "text" field, or pass a plain-text file.')
        texts.append(row["text"])
    return texts


def hashed_token(word: str, vocab: int) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little") % vocab


def _local_tokenizer(model_dir: str | None) -> Any:
    if model_dir is None or not any((Path(model_dir) / f).exists() for f in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    auto: Any = AutoTokenizer
    return auto.from_pretrained(model_dir, local_files_only=True)


def has_tokenizer(model_dir: str | None) -> bool:
    return model_dir is not None and any((Path(model_dir) / f).exists() for f in TOKENIZER_FILES)


def ready_config(spec: Any, torch: Any, clock: Any) -> tuple[dict[str, Any], int | None, int]:
    """The start shared by every LLM case: model code imported, device initialised (both timed as
    startup phases), then the config to build, its depth slice (None: full) and the full depth."""
    preload_model_code(spec.config)
    clock.mark("imports")
    clock.init_cuda(torch, spec.device)
    full_layers = full_depth(spec.config)
    config, built = built_config(spec.config, spec.settings, full_layers)
    return config, built, full_layers
