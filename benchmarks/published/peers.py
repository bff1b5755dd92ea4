"""Other memory / speed estimators, run on the same published points: accelerate, llm-analysis, hf-mem.

Each number comes from running the peer's own code; this module only translates a point's job into
the peer's inputs and picks the output the peer itself reports for that quantity. Nothing here
re-implements a peer's arithmetic. All three normally read the Hugging Face Hub; offline:

* accelerate  `accelerate estimate-memory` (`accelerate.commands.estimate.gather_data`): its own
              code builds the empty model (transformers `AutoConfig` + `AutoModel` under
              `init_empty_weights`) from a local folder holding the preset's config.json; only the
              Hub metadata call (`verify_on_hub`) is answered locally. Reported: "Total Size" at the
              dtype (weights; the size it says loading takes) and "Training using Adam" (the largest
              of its model / gradients / optimizer / step sizes) for full fine-tunes with AdamW.
* llm-analysis `LLMAnalysis(ModelConfig, GPUConfig, DtypeConfig, ParallelismConfig)` built from the
              preset config and the catalog GPU, then its `training()` / `inference()` analysis.
              Reported: weight_memory_per_gpu; "(weight+op_state+grad+act)_memory_per_gpu" for full
              fine-tunes; for serving, the larger of its two fit checks (weights + prefill
              activations; weights + KV cache + decode activations); latency_per_iter, prefill and
              decode latency for speed.
* hf-mem      `hf_mem.run.arun`, with its HTTP client given an in-process transport that answers the
              Hub's URLs from files generated here: the tree listing, config.json, and a
              model.safetensors whose header lists every parameter of the preset built on the meta
              device (no tensor data; hf-mem reads only headers); for an image preset, model_index.json
              and one header per pipeline component, in the job's dtype. Reported: `memory` (weights;
              all it reports for a pipeline) and `total_memory` with --experimental (weights + KV
              cache for max_model_len × batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import re
import struct
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEERS = ("accelerate", "llm-analysis", "hf-mem")
# llm-analysis 0.2.2 pins transformers<5 and huggingface-hub<0.15: installed with its dependencies it
# downgrades both (and breaks diffusers and peft). Its code runs with the current ones, so --no-deps.
INSTALL = {"accelerate": "pip install accelerate",
           "llm-analysis": "pip install --no-deps llm-analysis==0.2.2 fire termcolor six",
           "hf-mem": "pip install hf-mem"}
GIB = 2.0**30
DOES_NOT_FIT = "the peer says the job does not fit this GPU"
MEMORY_UNITS = {"gib": 2.0**30, "gb": 1e9, "mib": 2.0**20}


class Unsupported(Exception):
    """The peer has no way to express this point (shown as '–')."""


@dataclass(frozen=True)
class PeerResult:
    value: float | None  # in the point's unit; None when the peer cannot express the point or failed
    note: str = ""
    failed: bool = False
    says_oom: bool = False  # the peer itself says the job does not fit (its sizes are still compared)


def available(peer: str) -> bool:
    module = {"accelerate": "accelerate.commands.estimate", "llm-analysis": "llm_analysis.analysis",
              "hf-mem": "hf_mem.run"}[peer]
    try:
        __import__(module)
    except Exception:  # an ImportError, or a peer whose own imports break in this environment
        return False
    return True


def run_peer(peer: str, wire: dict[str, Any]) -> PeerResult:
    """One peer on one point; never raises (a peer crash is a failed result with its reason)."""
    runners: dict[str, Callable[[dict[str, Any]], float | tuple[float, str]]] = {
        "accelerate": accelerate_value, "llm-analysis": llm_analysis_value, "hf-mem": hf_mem_value}
    runner = runners[peer]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            out = runner(wire)
        value, note = out if isinstance(out, tuple) else (out, "")
        return PeerResult(value, note, says_oom=note == DOES_NOT_FIT)
    except Unsupported as exc:
        return PeerResult(None, str(exc))
    except Exception as exc:
        return PeerResult(None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", failed=True)


# ------------------------------------------------------------------------ shared inputs ----------

def _job(wire: dict[str, Any]) -> Any:
    from gpuscout.workload.job import parse_job

    return parse_job(dict(wire["job"]))


def _memory_unit(quantity: str) -> float:
    return MEMORY_UNITS[quantity.rpartition("_")[2]]


@functools.cache
def _config(model: str) -> dict[str, Any]:
    from gpuscout.workload.resolve import llm_config

    return dict(llm_config(model))


@functools.cache
def _config_dir(model: str) -> str:
    """A local model folder holding only the preset's config.json (what AutoConfig reads offline)."""
    folder = Path(tempfile.mkdtemp(prefix=f"peer-{re.sub(r'[^a-z0-9.-]', '_', model.lower())}-"))
    (folder / "config.json").write_text(json.dumps(_config(model)), encoding="utf-8")
    return str(folder)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config.get("text_config") or config)


# ------------------------------------------------------------------------ accelerate -------------

ACCELERATE_DTYPE = {"fp32": "float32", "bf16": "float16", "fp16": "float16", "int8": "int8", "int4": "int4"}


@functools.cache
def _accelerate_rows(model: str) -> dict[str, tuple[float, float]]:
    """dtype → (Total Size, Training using Adam) in bytes, from accelerate's own gather_data."""
    from accelerate.commands import estimate

    config = _config(model)
    original = estimate.verify_on_hub
    # The only Hub call: model_info(). Answer it with the config; everything else is accelerate's code.
    estimate.verify_on_hub = lambda repo, token=None: types.SimpleNamespace(config=config,
                                                                            library_name="transformers")
    try:
        args = types.SimpleNamespace(model_name=_config_dir(model), library_name="transformers",
                                     dtypes=list(dict.fromkeys(ACCELERATE_DTYPE.values())), trust_remote_code=False)
        with contextlib.redirect_stdout(io.StringIO()), _quiet_warnings(), _quiet_transformers():
            data = estimate.gather_data(args)
    finally:
        estimate.verify_on_hub = original
    return {row[0]: (float(row[2]), float(max(row[3].values()))) for row in data}


def accelerate_value(wire: dict[str, Any]) -> float:
    job, quantity = _job(wire), wire["quantity"]
    if job.kind == "image":
        raise Unsupported("accelerate estimate-memory sizes transformers/timm models only")
    stat = quantity.rpartition("_")[0]
    if stat == "weights" and job.kind == "inference":
        dtype = ACCELERATE_DTYPE.get(job.weights)
        if dtype is None:
            raise Unsupported(f"accelerate has no {job.weights} size")
        return float(_accelerate_rows(job.model)[dtype][0] / job.tensor_parallel / _memory_unit(quantity))
    if wire["category"] == "training_peak" and job.kind == "finetune":
        if job.method != "full" or job.optimizer != "adamw" or job.gpus > 1:
            raise Unsupported("accelerate sizes single-GPU full fine-tuning with Adam only")
        dtype = "float32" if job.precision == "fp32" else "float16"
        return float(_accelerate_rows(job.model)[dtype][1] / _memory_unit(quantity))
    if wire["category"] == "inference_peak" and job.kind == "inference" and stat in (
            "peak_allocated", "peak_reserved", "nvidia_smi"):
        dtype = ACCELERATE_DTYPE.get(job.weights)
        if dtype is None:
            raise Unsupported(f"accelerate has no {job.weights} size")
        return float(_accelerate_rows(job.model)[dtype][0] / job.tensor_parallel / _memory_unit(quantity))
    raise Unsupported("accelerate estimates model size and Adam training only")


# ------------------------------------------------------------------------ llm-analysis -----------

def _llm_analysis_model(model: str, max_seq_len: int) -> Any:
    from llm_analysis.config import ModelConfig  # type: ignore[import-untyped]

    c = _text_config(_config(model))
    experts = int(c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts") or 1)
    ffn = int((c.get("moe_intermediate_size") if experts > 1 else None) or c.get("intermediate_size")
              or 4 * c["hidden_size"])
    return ModelConfig(
        name=model, num_layers=c["num_hidden_layers"], n_head=c["num_attention_heads"], hidden_dim=c["hidden_size"],
        vocab_size=c["vocab_size"], max_seq_len=max(max_seq_len, c.get("max_position_embeddings") or 0),
        num_key_value_heads=c.get("num_key_value_heads"), ffn_embed_dim=ffn,
        expansion_ratio=ffn / c["hidden_size"], model_type=c.get("model_type"), moe_num_experts=experts,
        moe_top_k=int(c.get("num_experts_per_tok") or 1) if experts > 1 else 1)


def _llm_analysis_gpu(sku: str, memory_scale: float = 1.0) -> Any:
    from llm_analysis.config import GPUConfig

    from gpuscout.hardware.catalog import find_gpu, usable_memory_bytes

    gpu = find_gpu(sku or "h200-sxm-141gb")
    peak16 = gpu.bf16_flops_per_s or gpu.fp16_flops_per_s
    if peak16 is None:
        raise Unsupported(f"the catalog has no 16-bit tensor rate for {gpu.name}")
    link = gpu.nvlink_bytes_per_s or gpu.pcie_bytes_per_s or gpu.memory_bandwidth_bytes_per_s
    return GPUConfig(
        name=gpu.sku, mem_per_GPU_in_GB=usable_memory_bytes(gpu) / GIB * memory_scale,
        hbm_bandwidth_in_GB_per_sec=gpu.memory_bandwidth_bytes_per_s / 1e9,
        intra_node_bandwidth_in_GB_per_sec=link / 1e9, intra_node_min_message_latency=8e-6,
        peak_fp16_TFLOPS=peak16 / 1e12,
        peak_i8_TFLOPS=(gpu.int8_ops_per_s or 2 * peak16) / 1e12)


def _llm_analysis(wire: dict[str, Any], job: Any, memory_scale: float) -> Any:
    from llm_analysis.analysis import LLMAnalysis  # type: ignore[import-untyped]
    from llm_analysis.config import DtypeConfig, ParallelismConfig

    if job.kind == "finetune":
        bits = 32 if job.precision == "fp32" else 16
        dtype = DtypeConfig(name=f"w{bits}a{bits}e{bits}", weight_bits=bits, activation_bits=bits, embedding_bits=bits)
        parallel = ParallelismConfig(tp_size=job.tensor_parallel, dp_size=job.gpus // job.tensor_parallel)
        seq = job.seq_len
    else:
        bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[job.weights]
        dtype = DtypeConfig(name=f"w{bits}a16e16", weight_bits=bits, activation_bits=16, embedding_bits=16)
        parallel = ParallelismConfig(tp_size=job.tensor_parallel)
        seq = job.context_tokens
    return LLMAnalysis(_llm_analysis_model(job.model, seq), _llm_analysis_gpu(wire["gpu"], memory_scale),
                       dtype, parallel)


def _llm_analysis_training(wire: dict[str, Any], job: Any, memory_scale: float) -> dict[str, Any]:
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO

    if job.method != "full":
        raise Unsupported("llm-analysis models full training only (no LoRA/QLoRA)")
    other_op = {"adamw": None, "adamw_8bit": 2, "sgd": 4 if job.precision != "bf16" else 2}.get(job.optimizer, -1)
    if other_op == -1:
        raise Unsupported(f"llm-analysis has no {job.optimizer} optimizer sizing")
    zero = {"none": DSZeRO.NONE, "zero1": DSZeRO.STAGE_1, "zero2": DSZeRO.STAGE_2, "zero3": DSZeRO.STAGE_3,
            "fsdp": DSZeRO.STAGE_3}[job.sharding]
    analysis = _llm_analysis(wire, job, memory_scale)
    gated = _text_config(_config(job.model)).get("hidden_act", "") in ("silu", "swiglu", "gelu_pytorch_tanh")
    return dict(analysis.training(
        batch_size_per_gpu=job.micro_batch, gradient_accumulation_steps=job.grad_accum, seq_len=job.seq_len,
        activation_recomputation=ActivationRecomputation.FULL if job.gradient_checkpointing
        else ActivationRecomputation.NONE,
        ds_zero=zero, master_weights_dtype_bytes=2 if job.precision == "bf16" else 4, other_op_bytes=other_op,
        flash_attn=job.attention != "eager", mlp_gated_linear_units=gated))


def _llm_analysis_inference(wire: dict[str, Any], job: Any, memory_scale: float) -> dict[str, Any]:
    from gpuscout.workload.shape import DTYPE_BYTES

    analysis = _llm_analysis(wire, job, memory_scale)
    return dict(analysis.inference(
        batch_size_per_gpu=job.concurrency, seq_len=job.prompt_tokens, num_tokens_to_generate=job.output_tokens,
        kv_cache_dtype_bytes=DTYPE_BYTES[job.kv_cache_dtype]))


def _llm_analysis_summary(wire: dict[str, Any], job: Any) -> tuple[dict[str, Any], str]:
    """The summary dict; if llm-analysis says the job does not fit (an assertion), the same analysis on
    a GPU with 1000× the memory, so that its sizes can still be compared (noted)."""
    run = _llm_analysis_training if job.kind == "finetune" else _llm_analysis_inference
    from llm_analysis.logger import logger  # type: ignore[import-untyped]

    logger.setLevel(logging.ERROR)  # its analysis logs every step at INFO (its logger is named "__name__")
    try:
        return run(wire, job, 1.0), ""
    except AssertionError as exc:
        if not any(words in str(exc) for words in ("fit", "too large", "max_batch_size")):
            raise
        return run(wire, job, 1000.0), DOES_NOT_FIT


def llm_analysis_value(wire: dict[str, Any]) -> tuple[float, str]:
    job, quantity, category = _job(wire), wire["quantity"], wire["category"]
    if job.kind == "image":
        raise Unsupported("llm-analysis models transformer LLMs only")
    stat = quantity.rpartition("_")[0]
    if category in ("kv_capacity", "max_seq_len") or stat in ("activation", "cuda_graph"):
        what = stat if stat in ("activation", "cuda_graph") else category
        raise Unsupported(f"llm-analysis reports no {what} figure")
    summary, note = _llm_analysis_summary(wire, job)
    if stat == "weights":
        return float(summary["weight_memory_per_gpu"]) / _memory_unit(quantity), note
    if category == "training_peak":
        return float(summary["(weight+op_state+grad+act)_memory_per_gpu"]) / _memory_unit(quantity), note
    if category == "inference_peak":
        weights = summary["weight_memory_per_gpu"]
        peak = max(weights + summary["prefill_activation_memory_per_gpu"],
                   weights + summary["kv_cache_memory_per_gpu"] + summary["decode_activation_memory_per_gpu"])
        return float(peak) / _memory_unit(quantity), note
    return _llm_analysis_speed(quantity, job, summary), note


def _llm_analysis_speed(quantity: str, job: Any, s: dict[str, Any]) -> float:
    if job.kind == "finetune":
        step = float(s["latency_per_iter"])
        samples = job.micro_batch * job.grad_accum * (job.gpus // job.tensor_parallel)
        values = {"step_s": step, "s_per_it": step, "samples_per_s": samples / step,
                  "tokens_per_s": samples * job.seq_len / step}
    else:
        values = {"ttft_s": float(s["prefill_latency"]), "tpot_s": float(s["decode_latency"]),
                  "output_tokens_per_s": float(s["decode_tokens_per_sec"]),
                  "tokens_per_s": float(s["decode_tokens_per_sec"])}
    if quantity not in values:
        raise Unsupported(f"llm-analysis reports no {quantity}")
    return float(values[quantity])


# ------------------------------------------------------------------------ hf-mem -----------------

SAFETENSORS_DTYPE = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}
HF_MEM_KV = {"bf16": "bfloat16", "fp16": "auto", "fp8": "fp8"}


@functools.cache
def _parameter_shapes(model: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Every parameter of the preset's causal-LM model built on the meta device (tied ones once),
    the tensors a save_pretrained checkpoint holds."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(_config_dir(model))
    with init_empty_weights(), _quiet_warnings():
        built = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    # Under init_empty_weights the tied lm_head stays a separate parameter until tie_weights() runs
    # (loading a checkpoint would run it); save_pretrained writes a tied tensor once.
    built.tie_weights()
    return tuple((name, tuple(p.shape)) for name, p in built.named_parameters())


@functools.cache
def _component_shapes(preset: str, component: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Every parameter of one diffusion-pipeline component, built on the meta device from its stored config."""
    import diffusers
    import transformers
    from accelerate import init_empty_weights

    from gpuscout.workload.image import image_component_configs, load_image_preset

    spec = next(c for c in load_image_preset(preset).components if c.name == component)
    config = dict(image_component_configs(preset)[component])
    with init_empty_weights(), _quiet_warnings():
        if spec.library == "diffusers":
            built = getattr(diffusers, config["_class_name"]).from_config(config)
        else:
            built = getattr(transformers, spec.class_name)(transformers.AutoConfig.for_model(**config))
            built.tie_weights()
    return tuple((name, tuple(p.shape)) for name, p in built.named_parameters())


def _safetensors_header(shapes: tuple[tuple[str, tuple[int, ...]], ...], dtype: str) -> bytes:
    """A .safetensors prefix: the 8-byte header length and the JSON header (no tensor data)."""
    item = {"F32": 4, "BF16": 2, "F16": 2}[dtype]
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes:
        size = item
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text


def _llm_files(model: str, dtype: str) -> dict[str, bytes]:
    return {"config.json": json.dumps(_config(model)).encode(),
            "model.safetensors": _safetensors_header(_parameter_shapes(model), dtype)}


def _pipeline_files(preset: str, dtype: str) -> dict[str, bytes]:
    """A diffusers repository: model_index.json and one weights file per component, all in `dtype`."""
    from gpuscout.workload.image import load_image_preset

    index: dict[str, Any] = {"_class_name": "DiffusionPipeline"}
    files: dict[str, bytes] = {}
    for c in load_image_preset(preset).components:
        index[c.name] = [c.library, c.class_name]
        weights = "diffusion_pytorch_model.safetensors" if c.library == "diffusers" else "model.safetensors"
        files[f"{c.name}/{weights}"] = _safetensors_header(_component_shapes(preset, c.name), dtype)
    return {"model_index.json": json.dumps(index).encode(), **files}


def _hub_transport(files: dict[str, bytes]) -> Any:
    """An httpx2 transport answering the Hub URLs hf-mem requests, for one repository of `files`."""
    import httpx2

    def handle(request: Any) -> Any:
        path = request.url.path
        if "/api/models/" in path and "/tree/" in path:
            listing = [{"path": name, "type": "file"} for name in files]
            return httpx2.Response(200, json=listing)
        name = path.split("/resolve/", 1)[-1].split("/", 1)[-1]  # after the revision
        if name not in files:
            return httpx2.Response(404, text=f"{name} not served")
        body = files[name]
        ranged = re.match(r"bytes=(\d+)-(\d+)", request.headers.get("Range", ""))
        if ranged:
            start, end = int(ranged.group(1)), int(ranged.group(2))
            return httpx2.Response(206, content=body[start:end + 1])
        return httpx2.Response(200, content=body)

    return httpx2.MockTransport(handle)


def _hf_mem_result(model: str, files: dict[str, bytes], **kwargs: Any) -> Any:
    import importlib

    import httpx2

    hf_run = importlib.import_module("hf_mem.run")  # `from hf_mem import run` is the function, not the module

    transport = _hub_transport(files)
    shim = types.SimpleNamespace(**{name: getattr(httpx2, name) for name in dir(httpx2) if not name.startswith("__")})
    shim.AsyncClient = functools.partial(httpx2.AsyncClient, transport=transport)
    original = hf_run.httpx2
    hf_run.httpx2 = shim  # type: ignore[attr-defined]  # only the network layer is replaced; the request and parsing code is hf-mem's
    try:
        with _quiet_warnings():
            return asyncio.run(hf_run.arun(model_id=f"local/{model}", **kwargs))
    finally:
        hf_run.httpx2 = original  # type: ignore[attr-defined]


def hf_mem_value(wire: dict[str, Any]) -> float:
    job, quantity, category = _job(wire), wire["quantity"], wire["category"]
    stat = quantity.rpartition("_")[0]
    if job.kind == "image" and stat in ("weights", "peak_allocated", "peak_reserved", "nvidia_smi"):
        result = _hf_mem_result(job.model, _pipeline_files(job.model, SAFETENSORS_DTYPE[job.dtype]))
        return float(result.memory / _memory_unit(quantity))  # hf-mem's figure for a pipeline: its weights
    if job.kind != "inference":
        raise Unsupported("hf-mem sizes inference weights (and KV cache) only")
    dtype = SAFETENSORS_DTYPE.get(job.weights)
    if dtype is None:
        raise Unsupported(f"no {job.weights} checkpoint headers to serve hf-mem offline")
    if stat == "weights":
        weights = _hf_mem_result(job.model, _llm_files(job.model, dtype)).memory
        return float(weights / job.tensor_parallel / _memory_unit(quantity))
    if category == "inference_peak" and stat in ("peak_allocated", "peak_reserved", "nvidia_smi"):
        kv = HF_MEM_KV.get(job.kv_cache_dtype)
        if kv is None:
            raise Unsupported(f"hf-mem has no {job.kv_cache_dtype} KV cache")
        result = _hf_mem_result(job.model, _llm_files(job.model, dtype), experimental=True,
                                max_model_len=job.context_tokens, batch_size=job.concurrency, kv_cache_dtype=kv)
        return float(result.total_memory / job.tensor_parallel / _memory_unit(quantity))
    raise Unsupported("hf-mem reports weights and weights + KV cache only")


@contextlib.contextmanager
def _quiet_transformers() -> Any:
    """transformers logs a deprecation for the torch_dtype argument accelerate passes; not ours to show."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


@contextlib.contextmanager
def _quiet_warnings() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
