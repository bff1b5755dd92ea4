"""Host RAM and disk a job needs on the machine around its GPUs (docs/estimator.md §2.13).

A GPU offer is a whole machine: vCPUs, host RAM and a disk. A job that fits in GPU memory can
still die loading its checkpoint into host RAM, or stop when the disk fills with checkpoints.
Each term below carries its formula, like the GPU memory breakdown:

    host RAM   process baseline × GPU processes          (Python, torch, CUDA libraries)
             + DataLoader workers × per-worker RAM        (fine-tuning)
             + checkpoint load copies × model bytes       (each process that materialises the model)
             + offloaded optimizer states × 1.5           (ZeRO-Offload: fp32 master, grads, Adam m, v)
             + offloaded parameters, gradients, states × 1.5 (FSDP / ZeRO-3 parameter offload)
             + offloaded activations × GPU processes      (activation offloading, pinned)
             + vLLM swap space × GPUs                     (serving)
    disk       software environment + model download + checkpoints kept + final output
             + dataset + outputs (generations, images)

Pure: no torch, no prices. What the offer has and what extra disk costs is `cost.machine`'s.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from gpuscout.estimator.breakdown import total_bytes
from gpuscout.estimator.image import weight_terms as image_weight_terms
from gpuscout.estimator.inference import weight_terms as inference_weight_terms
from gpuscout.estimator.memory import kind_mismatch
from gpuscout.estimator.training import (
    PARAM_BYTES,
    Layout,
    optimizer_state_bytes,
    saved_activation_terms,
    trainable_param_bytes,
    trainable_params,
)
from gpuscout.estimator.video import component_bytes as video_component_bytes
from gpuscout.frozen import Frozen
from gpuscout.workload.colocated import ColocatedShape, served_jobs
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.job import FinetuneJob, ImageJob, InferenceJob, Job, VideoJob
from gpuscout.workload.jobtime import checkpoint_saves
from gpuscout.workload.model import Model
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape

GIB = 2**30
GB = 10**9

# ASSUMPTION (band 1–4 GiB): resident memory of one GPU process before its model loads: the Python
# interpreter, torch and the CUDA libraries it maps (cuBLAS, cuDNN, NCCL). The CUDA context alone is
# 0.3–2 GiB of *device* memory (docs/estimator.md §2.7); its host side is of the same order.
PROCESS_BASELINE_BYTES = 3 * GIB
# ASSUMPTION (band 0.5–4 GiB): one DataLoader worker is a forked copy of the training process whose
# pages become private as Python touches their reference counts; a worker measured about as large as
# the main process, ~1.2 GB for an ImageNet ResNet-18 (pytorch/pytorch#19355; the copy-on-read cause:
# pytorch/pytorch#13246). Tokenised text batches are small, so a worker is taken near the low end.
WORKER_BYTES = 1.5 * GIB
# DeepSpeed's own estimator multiplies the offloaded states by this "additional_buffer_factor" for
# pinned transfer buffers and fragmentation (deepspeed/runtime/zero/stage_1_and_2.py,
# estimate_zero2_model_states_mem_needs: cpu_mem = P × max(4·N_gpu, 16) × 1.5).
OFFLOAD_BUFFER_FACTOR = 1.5
# vLLM reserves `swap_space` GiB of CPU memory per GPU for preempted sequences' KV blocks (default 4;
# `LLM(..., swap_space=4)` and `EngineArgs.swap_space` in vllm-project/vllm).
VLLM_SWAP_BYTES = 4 * GIB
# ASSUMPTION (band 10–40 GB): the OS image, CUDA, PyTorch and the job's libraries on the boot disk;
# NVIDIA's NGC PyTorch container is about 10 GB compressed and twice that unpacked.
ENVIRONMENT_DISK_BYTES = 20 * GB
# "One token generally corresponds to ~4 characters of text for common English text" (OpenAI
# tokenizer help page): the raw dataset as UTF-8 text.
TEXT_BYTES_PER_TOKEN = 4
# `datasets` stores tokenised columns as Arrow lists of int64 (Python ints): input_ids and
# attention_mask, 8 B each per token, in its cache beside the raw text.
TOKEN_CACHE_BYTES_PER_TOKEN = 16
# A generated image saved as 8-bit RGB without compression; PNG is smaller, so this is the bound.
IMAGE_BYTES_PER_PIXEL = 3
FP32_BYTES = 4
# Host copies per device byte under activation offloading: each save is copied separately (measured
# 1.13–1.86 with FakeTensor traces of the offload hooks, docs/estimator.md §2.14).
OFFLOAD_HOST_COPIES = 2


class HostTerm(Frozen):
    """One line of host RAM or disk, with the formula it used."""


    name: str
    kind: Literal["ram", "disk"]
    bytes: int
    formula: str
    output: bool = False  # what the job produces: shipped back where the data lives (docs/cost.md §2.14)


class HostNeeds(Frozen):
    """Host RAM and disk of the whole job on one machine (all its GPU processes together)."""


    processes: int  # GPU processes on the machine (one per GPU used)
    workers_per_process: int  # DataLoader workers per GPU process (0 for serving and images)
    ram: tuple[HostTerm, ...]
    disk: tuple[HostTerm, ...]

    @cached_property  # read for every offer `pick` judges
    def ram_bytes(self) -> int:
        return sum(t.bytes for t in self.ram)

    @cached_property
    def disk_bytes(self) -> int:
        return sum(t.bytes for t in self.disk)

    @property
    def output_bytes(self) -> int:
        return sum(t.bytes for t in self.disk if t.output)

    @property
    def vcpus_wanted(self) -> int:
        """One core per GPU process and one per DataLoader worker."""
        return self.processes * (1 + self.workers_per_process)


def _ram(name: str, nbytes: float, formula: str) -> HostTerm:
    return HostTerm(name=name, kind="ram", bytes=int(-(-nbytes // 1)), formula=formula)


def _disk(name: str, nbytes: float, formula: str, *, output: bool = False) -> HostTerm:
    return HostTerm(name=name, kind="disk", bytes=int(-(-nbytes // 1)), formula=formula, output=output)


def default_processes(job: Job) -> int:
    """GPU processes of the job as written: one per GPU (torchrun, vLLM's TP workers, one pipeline)."""
    match job:
        case FinetuneJob():
            return job.gpus
        case InferenceJob():
            return job.tensor_parallel
        case ImageJob() | VideoJob():
            return 1
    raise AssertionError(job)


def estimate_host(job: Job, model: Model, *, processes: int | None = None,
                  dataset_bytes: float | None = None) -> HostNeeds:
    """Host RAM and disk of `job` run as `processes` GPU processes (default: as written).

    `dataset_bytes` is the dataset's size when the user knows it (`--dataset-gb`); otherwise it is
    derived from the job (tokens × bytes per token), or left out where the job has none to speak of.
    """
    procs = processes or default_processes(job)
    match job, model:
        case FinetuneJob(), ModelShape():
            return _finetune(job, model, procs, dataset_bytes)
        case InferenceJob(), ModelShape():
            return _inference(job, model, procs, dataset_bytes)
        case ImageJob(), ImageModelShape():
            return _image(job, model, procs, dataset_bytes)
        case VideoJob(), VideoModelShape():
            return _video(job, model, procs, dataset_bytes)
    raise kind_mismatch(job, model)


def _baseline(procs: int) -> HostTerm:
    return _ram("process baseline", procs * PROCESS_BASELINE_BYTES,
                f"{procs} GPU processes × {PROCESS_BASELINE_BYTES / GIB:g} GiB (Python, torch, CUDA libraries; "
                "ASSUMPTION, band 1–4 GiB)")


def _environment() -> HostTerm:
    return _disk("software environment", ENVIRONMENT_DISK_BYTES,
                 f"{ENVIRONMENT_DISK_BYTES / GB:g} GB: OS, CUDA, PyTorch, libraries (ASSUMPTION, band 10–40 GB)")


def _dataset(given: float | None, derived: float, formula: str) -> HostTerm:
    if given is not None:
        return _disk("dataset", given, f"{given / GB:g} GB as given (--dataset-gb)")
    return _disk("dataset", derived, formula)


# ---------------------------------------------------------------- fine-tuning ---------------------

def _finetune(job: FinetuneJob, model: ModelShape, procs: int, dataset_bytes: float | None) -> HostNeeds:
    workers = job.dataloader_workers
    ram = [_baseline(procs),
           _ram("DataLoader workers", procs * workers * WORKER_BYTES,
                f"{procs} processes × {workers} workers × {WORKER_BYTES / GIB:g} GiB (ASSUMPTION, band "
                "0.5–4 GiB; each worker is a forked copy, pytorch/pytorch#19355)"),
           _load_copies(job, model, procs)]
    if job.offload_params:
        ram = [*ram[:2], *_param_offload_terms(job, model, ram[2])]
    elif job.optimizer_offload:
        ram = [*ram[:2], *_offload_terms(job, model, ram[2])]
    if job.activation_offload:
        ram.append(_activation_offload_term(job, model, procs))
    tokens = job.dataset_tokens
    disk = [_environment(), _download(model, model.params_total * 2, "16-bit, as published"),
            *_checkpoint_terms(job, model), _final_output(job, model),
            _dataset(dataset_bytes, tokens * (TEXT_BYTES_PER_TOKEN + TOKEN_CACHE_BYTES_PER_TOKEN),
                     f"{tokens:,} tokens × ({TEXT_BYTES_PER_TOKEN} B text + {TOKEN_CACHE_BYTES_PER_TOKEN} B "
                     "tokenised cache: int64 input_ids + attention_mask)")]
    return HostNeeds(processes=procs, workers_per_process=workers, ram=tuple(ram), disk=tuple(disk))


def _load_copies(job: FinetuneJob, model: ModelShape, procs: int) -> HostTerm:
    """Each data-parallel rank builds the whole model on the CPU before moving it (DeepSpeed's estimator
    counts 4 B × params per GPU process); ZeRO-3/FSDP load once on rank 0 and scatter (accelerate's
    cpu_ram_efficient_loading, huggingface/transformers#25107)."""
    b = PARAM_BYTES[job.precision] if job.method == "full" else (4 if job.precision == "fp32" else 2)
    sharded = job.sharding in ("zero3", "fsdp") and procs > 1
    copies = 1 if sharded else max(procs // job.tensor_parallel, 1)
    why = "rank 0 loads, the rest receive shards" if sharded else "one per data-parallel rank"
    p = model.params_total
    return _ram("checkpoint load copies", copies * p * b,
                f"{copies} ({why}) × {p:,} params × {b} B (the dtype the model is built in)")


def _offload_terms(job: FinetuneJob, model: ModelShape, load: HostTerm) -> list[HostTerm]:
    """ZeRO-Offload keeps fp32 master weights, fp32 gradients and the optimizer states in host RAM
    (Ren et al. 2021, arXiv 2101.06840 §4; 16 B/param for Adam), plus pinned buffers. The model's CPU
    copies are freed as those partitions are built, so only their excess adds: DeepSpeed's estimator
    takes max(4·N_gpu, 16) B/param, not the sum."""
    n = trainable_params(job, model)
    cpu_job = job.model_copy(update={"precision": "fp32"})  # DeepSpeed's CPU Adam keeps fp32 states
    states, formula = optimizer_state_bytes(cpu_job, model, n)
    held = n * 8 + states
    return _offloaded_terms(load, held, "optimizer states",
                            f"{n:,} trainable × (4 B fp32 master + 4 B fp32 gradient) + {formula}",
                            freed="the offloaded states): freed as the states are built")


def _param_offload_terms(job: FinetuneJob, model: ModelShape, load: HostTerm) -> list[HostTerm]:
    """FSDP CPUOffload(offload_params=True) keeps every parameter shard, its gradient and the optimizer
    states in host RAM (the step runs on the CPU); all ranks' shards together are the whole model. Pinned
    transfer buffers and slack as for ZeRO-Offload (DeepSpeed's estimate_zero3_model_states_mem_needs counts
    offloaded params the same way, × the same 1.5 additional_buffer_factor)."""
    p, n = model.params_total, trainable_params(job, model)
    pb = PARAM_BYTES[job.precision] if job.method == "full" else (4 if job.precision == "fp32" else 2)
    gb = FP32_BYTES
    cpu_job = job.model_copy(update={"precision": "fp32"})  # the CPU step keeps fp32 states
    states, formula = optimizer_state_bytes(cpu_job, model, n)
    held = p * pb + n * gb + states
    return _offloaded_terms(load, held, "parameters, gradients and optimizer states",
                            f"{p:,} params × {pb} B + {n:,} trainable × {gb} B gradients + {formula}",
                            freed="the offloaded model): freed as the shards are built")


def _offloaded_terms(load: HostTerm, held: float, what: str, formula: str, *, freed: str) -> list[HostTerm]:
    """What offloading to host RAM holds: the load copies beyond it (freed as the offloaded part is built),
    the offloaded part itself, and DeepSpeed's pinned buffers and slack on top."""
    return [_ram("checkpoint load copies", max(load.bytes - held, 0),
                 f"max(0, {load.bytes:,} B of load copies − {freed}"),
            _ram(f"offloaded {what}", held, formula),
            _ram("pinned buffers and slack", held * (OFFLOAD_BUFFER_FACTOR - 1),
                 f"{OFFLOAD_BUFFER_FACTOR - 1:g} × offloaded states (DeepSpeed's additional_buffer_factor 1.5)")]


def _activation_offload_term(job: FinetuneJob, model: ModelShape, procs: int) -> HostTerm:
    """Activation offloading copies every saved activation of a micro-batch to pinned host RAM (the layer
    still in flight on the GPU too: its host copy exists as well), except the LM head's, which stays.

    Each save is copied on its own: a tensor that several ops save (the normed input of q, k and v
    projections, LoRA's A and the base weight) lands in host RAM once per save. FakeTensor traces of the
    offload hooks measure 1.13–1.86 × the device's saved bytes (tests/trace/test_settings_trace.py);
    `OFFLOAD_HOST_COPIES` = 2 covers that range.
    """
    layout = Layout(gpus=job.gpus, tp=job.tensor_parallel, sharding=job.sharding)
    kept = job.model_copy(update={"activation_offload": False})
    saved = sum(t.bytes for t in saved_activation_terms(kept, model, layout) if "lm_head" not in t.name)
    moved = saved * OFFLOAD_HOST_COPIES
    return _ram("offloaded activations (pinned)", procs * moved,
                f"{procs} processes × {OFFLOAD_HOST_COPIES} × {saved:,} B (one micro-batch's saved activations, "
                "copied once per save; torchtune pins them: use_pin_memory=True)")


def _download(model: ModelShape, estimated: float, how: str, *, name: str = "model weights") -> HostTerm:
    if model.checkpoint is not None:
        ck = model.checkpoint
        return _disk(name, ck.total_bytes, f"{ck.total_bytes:,} B read from {ck.files} safetensors headers")
    return _disk(name, estimated, f"{model.params_total:,} params, {how}")


def checkpoint_bytes(job: FinetuneJob, model: ModelShape) -> tuple[float, str]:
    """One training checkpoint: the trainable weights at their training bytes plus the optimizer states
    (transformers' Trainer writes the model and optimizer.pt; DeepSpeed the same states in shards)."""
    n = trainable_params(job, model)
    pb = trainable_param_bytes(job)
    states, formula = optimizer_state_bytes(job, model, n)
    return n * pb + states, f"{n:,} trainable × {pb} B + {formula}"


def _checkpoint_terms(job: FinetuneJob, model: ModelShape) -> list[HostTerm]:
    saves = checkpoint_saves(job)
    if not saves:
        return []
    kept = min(saves, job.checkpoints_kept)
    one, formula = checkpoint_bytes(job, model)
    return [_disk("checkpoints kept", kept * one,
                  f"min({saves} saves, checkpoints_kept {job.checkpoints_kept}) × ({formula})")]


def _final_output(job: FinetuneJob, model: ModelShape) -> HostTerm:
    """The trained weights as saved: at their training bytes (fp32 masters under AMP), adapters only for LoRA."""
    n = trainable_params(job, model)
    b = trainable_param_bytes(job)
    what = "the trained model" if job.method == "full" else "the LoRA adapters"
    return _disk("final output", n * b, f"{what}: {n:,} params × {b} B", output=True)


# ---------------------------------------------------------------- serving and images --------------

def _inference(job: InferenceJob, model: ModelShape, procs: int, dataset_bytes: float | None) -> HostNeeds:
    """One engine per served model (co-served models run their own vLLM process, docs/estimator.md §2.12)."""
    served = _served(job, model)
    replicas = max(procs // job.tensor_parallel, 1)
    ram, disk = [_baseline(procs * len(served))], [_environment()]
    for one, shape in served:
        tag = f" ({one.name})" if len(served) > 1 else ""
        weights = total_bytes(inference_weight_terms(one.model_copy(update={"tensor_parallel": 1}), shape))
        ram.append(_ram(f"weights staged while loading{tag}", replicas * weights,
                        f"{replicas} replicas × {weights:,} B (each engine reads the memory-mapped safetensors; "
                        "the mapped pages are resident while it loads; ASSUMPTION)"))
        if job.engine == "vllm":
            ram.append(_ram(f"vLLM swap space{tag}", procs * VLLM_SWAP_BYTES,
                            f"{procs} GPUs × {VLLM_SWAP_BYTES / GIB:g} GiB (vLLM swap_space default)"))
        disk.append(_download(shape, weights, f"{one.weights} weights", name=f"model weights{tag}"))
    prompts = sum(one.requests * one.prompt_tokens for one, _ in served)
    outputs = sum(one.requests * one.output_tokens for one, _ in served)
    disk += [_dataset(dataset_bytes, prompts * TEXT_BYTES_PER_TOKEN,
                      f"{prompts:,} prompt tokens (requests × prompt) × {TEXT_BYTES_PER_TOKEN} B"),
             _disk("outputs", outputs * TEXT_BYTES_PER_TOKEN,
                   f"{outputs:,} output tokens (requests × output) × {TEXT_BYTES_PER_TOKEN} B", output=True)]
    return HostNeeds(processes=procs, workers_per_process=0, ram=tuple(ram), disk=tuple(disk))


def _served(job: InferenceJob, model: ModelShape) -> list[tuple[InferenceJob, ModelShape]]:
    """The main model's job and shape, then each co-served one's."""
    if isinstance(model, ColocatedShape) and job.co_served:
        return list(zip(served_jobs(job), (model, *model.co_served), strict=True))
    return [(job, model)]


def _image(job: ImageJob, model: ImageModelShape, procs: int, dataset_bytes: float | None) -> HostNeeds:
    pipeline = total_bytes(image_weight_terms(job.model_copy(update={"offload": "none"}), model))
    why = ("with CPU offload the components wait in host RAM" if job.offload != "none"
           else "diffusers builds the pipeline on the CPU, then moves it")
    ram = [_baseline(procs),
           _ram("pipeline weights", procs * pipeline, f"{procs} pipelines × {pipeline:,} B ({why})")]
    pixels = job.width * job.height
    disk = [_environment(),
            _disk("model weights", pipeline, f"{len(model.components)} components at the job's dtype"),
            _disk("outputs", job.images * pixels * IMAGE_BYTES_PER_PIXEL,
                  f"{job.images:,} images × {job.width}×{job.height} px × {IMAGE_BYTES_PER_PIXEL} B (RGB, uncompressed "
                  "bound)", output=True)]
    if dataset_bytes is not None:
        disk.append(_dataset(dataset_bytes, 0, ""))
    return HostNeeds(processes=procs, workers_per_process=0, ram=tuple(ram), disk=tuple(disk))


def _video(job: VideoJob, model: VideoModelShape, procs: int, dataset_bytes: float | None) -> HostNeeds:
    """As for images: the whole pipeline sits in host RAM while it loads, and stays there under offload
    (diffusers keeps every offloaded component's weights in CPU memory, docs/video.md §4)."""
    pipeline = sum(video_component_bytes(job, c) for c in model.components)
    why = (f"{job.offload} offload: the components wait in host RAM" if job.offload != "none"
           else "diffusers builds the pipeline on the CPU, then moves it")
    ram = [_baseline(procs),
           _ram("pipeline weights", procs * pipeline, f"{procs} pipelines × {pipeline:,.0f} B ({why})")]
    frame = job.width * job.height * IMAGE_BYTES_PER_PIXEL
    disk = [_environment(),
            _disk("model weights", pipeline, f"{len(model.components)} components at their run dtypes"),
            _disk("outputs", job.clips * job.frames * frame,
                  f"{job.clips:,} clips × {job.frames} frames × {job.width}×{job.height} px × "
                  f"{IMAGE_BYTES_PER_PIXEL} B (RGB, uncompressed bound; an MP4 is far smaller)", output=True)]
    if dataset_bytes is not None:
        disk.append(_dataset(dataset_bytes, 0, ""))
    return HostNeeds(processes=procs, workers_per_process=0, ram=tuple(ram), disk=tuple(disk))
