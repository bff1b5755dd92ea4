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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.measure.harness import BenchSettings
from gpuscout.torchmodel.llm import build_causal_lm, preload_model_code
from gpuscout.userfile import MAX_DATASET_BYTES, parse_user_json, read_user_text, replace_surrogates
from gpuscout.workload.hf_config import config_depth, config_with_depth, shape_from_hf_config
from gpuscout.workload.job import FinetuneJob, InferenceJob
from gpuscout.workload.shape import ModelShape

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


def build_model(spec: LlmCaseSpec, config: dict[str, Any], *, attention: str, dtype: Any,
                quantization: Any = None) -> Any:
    """The causal LM on the case's device: random seeded weights, or the checkpoint's."""
    return build_causal_lm(config, attention=attention, dtype=dtype, device=spec.device, seed=spec.settings.seed,
                           checkpoint_dir=spec.model_dir if spec.weights else None, quantization=quantization,
                           sliced=spec.settings.layers is not None)


def weights_note(spec: LlmCaseSpec) -> str:
    if spec.weights and spec.model_dir:
        return f"weights loaded from the checkpoint {spec.model_dir} (local files only)"
    return f"random weights (seed {spec.settings.seed}): the architecture from its config, nothing downloaded"


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
    """JSON Lines (the first line is an object) with a "text" field per line, else plain text.

    Read through gpuscout.userfile: a regular file of at most 1 GiB of UTF-8, each JSON line nested
    at most 64 levels; unpaired surrogate escapes in a text become U+FFFD (as the load test's
    dataset reader does), since such text cannot be tokenized as UTF-8.
    """
    fix = "Pass a readable UTF-8 JSONL or text file."
    raw = read_user_text(path, "dataset", fix, max_bytes=MAX_DATASET_BYTES)
    lines = [line for line in raw.splitlines() if line.strip()]
    if not lines or not lines[0].lstrip().startswith("{"):
        return [raw]
    texts = []
    for number, line in enumerate(lines, start=1):
        row = parse_user_json(line, f"{path} line {number}", "The file looks like JSON Lines. Fix that line, or "
                              "pass a plain-text file.", finite=False, surrogates=True)
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise SpecError(f'{path} line {number} has no "text" string.',
                            "bench reads the training text from the 'text' field of every line.",
                            'Give every line a "text" field, or pass a plain-text file.')
        texts.append(replace_surrogates(row["text"]))
    return texts


def hashed_token(word: str, vocab: int) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little") % vocab


def _local_tokenizer(model_dir: str | None) -> Any:
    if model_dir is None or not any((Path(model_dir) / f).exists() for f in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    auto: Any = AutoTokenizer
    return auto.from_pretrained(model_dir, local_files_only=True)


def ready_config(spec: Any, torch: Any, clock: Any) -> tuple[dict[str, Any], int | None, int]:
    """The start shared by every LLM case: model code imported, device initialised (both timed as
    startup phases), then the config to build, its depth slice (None: full) and the full depth."""
    preload_model_code(spec.config)
    clock.mark("imports")
    clock.init_cuda(torch, spec.device)
    full_layers = config_depth(spec.config)
    config, built = built_config(spec.config, spec.settings, full_layers)
    return config, built, full_layers


def model_shape(config: dict[str, Any]) -> ModelShape | None:
    """gpuscout's shape of the model, or None for an architecture it does not know (no FLOPs then)."""
    try:
        return shape_from_hf_config(config, name="bench", source="bench")
    except GpuscoutError:
        return None
