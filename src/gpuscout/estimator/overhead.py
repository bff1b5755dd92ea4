"""GPU-side overheads that no tensor accounts for, each with its source and its uncertainty.

These are the constants every calculator gets wrong by GBs (docs/estimator.md §2.7, §4).
They are deliberately few and named, so that a measurement (`gpuscout bench`) can replace them.
"""

from __future__ import annotations

from gpuscout.units import GIB, MIB

# CUDA context plus cuBLAS/cuDNN handles and workspaces, per process. Reported figures range
# from 300 MiB to 2 GiB depending on GPU, driver and lazy module loading (asmirnov
# vram-calculator README; its code uses 1000 MiB; gpu_poor uses 650 MB). gpuscout takes 768 MiB,
# inside that range, until a benchmark on the user's GPU measures it.
CUDA_CONTEXT_BYTES = 768 * MIB
CUDA_CONTEXT_SOURCE = "assumed 768 MiB (reported 300 MiB–2 GiB: asmirnov vram-calculator; gpu_poor 650 MB)"

# PyTorch's caching allocator reserves more than it hands out. Measured: Mistral-7B LoRA, bs 4,
# peak reserved 29.03 GiB vs allocated 26.11 GiB, 11% of the allocated peak
# (foundation-model-stack/fms-acceleration PR #14). gpuscout adds 10% of the allocated peak.
ALLOCATOR_FRACTION = 0.10
ALLOCATOR_SOURCE = "10% of allocated peak (fms-acceleration#14 measured 11%: 29.03 vs 26.11 GiB)"

# cuDNN convolution workspace in a VAE decode. PyTorch runs the first algorithm cuDNN's heuristics rank
# whose workspace it can allocate (pytorch#49207), from the caching allocator, so the workspace shows in
# torch.cuda.max_memory_allocated() and grows with the memory left free. The Hugging Face SDXL blog's
# A100 40GB runs peaked 3.1–3.2 GiB above the traced live tensors of a 4-image decode with 6.6–12.9 GiB
# of weights resident, and 5.8–8.4 GiB above them with the weights offloaded or one image decoded at a
# time (more memory free). gpuscout counts one buffer the size of the largest convolution input
# (the last up block's 2 × width channels at full resolution): 4 GiB in that case, so the resident runs
# are met and the roomier ones stay under-estimated. On a smaller card cuDNN falls back to an algorithm
# with less workspace, so this term only ever errs toward "does not fit". Sized after seeing those runs
# (docs/estimator.md §2.10): an in-sample fit.
CONV_WORKSPACE_INPUTS = 1.0
CONV_WORKSPACE_SOURCE = ("one buffer the size of the largest decoder convolution input (cuDNN takes the first "
                         "algorithm whose workspace fits, pytorch#49207; SDXL blog A100 runs: 3.1–8.4 GiB)")


# vLLM captures CUDA graphs for decode batch sizes after the KV cache is sized; since vLLM 0.21
# it estimates their memory first and takes it out of the KV budget ("CUDA graph memory profiling
# is enabled (default since v0.21.0)", start-up log quoted in noonghunna/club-3090#127, where a
# 27B model at TP 4 logged "Estimated CUDA graph memory: 0.17 GiB total"). Issues vllm#7553
# (2.4 GiB on an RTX 4090 at TP 4, vLLM 0.5) and #45178/#57475 (off by GBs both ways) show the
# spread. gpuscout keeps 1 GiB, counted inside the budget (the safe side for KV capacity), and
# zero under enforce_eager (no graphs are captured).
CUDA_GRAPHS_BYTES = 1 * GIB
CUDA_GRAPHS_SOURCE = ("assumed 1 GiB, inside vLLM's budget (vLLM ≥ 0.21 subtracts its estimate; logs show "
                      "0.17–2.4 GiB: club-3090#127, vllm#7553)")

# NCCL communicator buffers when a job spans GPUs (tensor parallel or data parallel).
# NCCL's default NCCL_BUFFSIZE is 4 MiB per channel and peer; with up to 32 channels and
# a few peers that is a few hundred MiB. Assumed 256 MiB.
NCCL_BYTES = 256 * MIB
NCCL_SOURCE = "assumed 256 MiB (NCCL_BUFFSIZE 4 MiB × channels × peers)"

# NCCL communicator memory of a training process group (DDP's all-reduces, FSDP / ZeRO's all-gathers and
# reduce-scatters), outside PyTorch's allocator. NCCL's memory grows with its channels, which it raises
# to reach NVLink bandwidth, and with the algorithms it sets up (NVIDIA/nccl#986, a maintainer's answer).
# Measured per GPU: a PyTorch NCCL group after one all-reduce, 4 × A100 NVLink: 544 MB for 2 ranks,
# 688 MB for 3-4 (NVIDIA/nccl#964); 8 × H100 after initialisation and collectives: 1.06 GB, PyTorch's
# own memory excluded (NVIDIA/nccl#1685); one communicator with an all-reduce, ~1.6 GB (NVIDIA/nccl#864,
# GPU not given). gpuscout takes 1 GiB: above the A100 and H100 figures, under the unexplained 1.6 GB.
NCCL_TRAINING_BYTES = 1 * GIB
NCCL_TRAINING_SOURCE = ("1 GiB (NCCL communicator per GPU: 0.54-0.69 GB on A100 NVLink, NVIDIA/nccl#964; "
                        "1.06 GB on 8 × H100, nccl#1685)")

# vLLM's page size in tokens (vllm/v1/kv_cache_interface.py block_size default 16).
VLLM_BLOCK_TOKENS = 16

# vLLM V1's scheduler defaults when the user sets nothing (vllm/engine/arg_utils.py, batch
# defaults per usage context): GPUs of 70 GiB or more that are not A100s get max_num_seqs 1024,
# others 256 (A100 excluded because larger batches lowered its throughput, vLLM PR #17885).
VLLM_MAX_NUM_SEQS_LARGE_GPU = 1024
VLLM_MAX_NUM_SEQS_DEFAULT = 256
VLLM_LARGE_GPU_BYTES = 70 * GIB

# vLLM profiles the sampler at max_num_seqs rows with top-p 0.9 and top-k = V − 1, so the
# sort-based top-k/top-p path runs (vllm/v1/worker/gpu_model_runner.py profile_run /
# _dummy_sampler_run; vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p_pytorch). Reading
# that path gives 23 B per vocabulary entry alive at once (fp32 logits 4, sorted copy 4, int64
# indices 8, softmax 4, bool mask 1, the LM head's 16-bit logits 2); the sampling step's own
# buffers (probabilities, exponential noise, logprobs) come on top. The V1 start-up logs of four
# dense models on an H100 at the 1,024-row default (llm-d/llm-d-benchmark
# config_explorer/empirical-vllm-memory-results.md: Llama-3.1-8B 4.76 GiB, Qwen3-0.6B 5.56,
# Qwen3-32B 5.64, Llama-3.3-70B FP8 at TP 2 4.84) all give 36 B per entry once the floor below is
# taken off, whatever the model's size; vLLM 0.31 on an A100 at 256 rows (1.44 GiB) agrees.
VLLM_SAMPLER_BYTES_PER_LOGIT = 36

# What the profiled peak holds beyond the larger of the forward pass and the sampler: logged
# "PyTorch activation peak memory 1.26GiB" for Meta-Llama-3-8B on an H100 at 8,192 batched
# tokens (vLLM PR #10511) against 0.91 GiB for the forward pass by gpuscout's per-token
# formula; 0.35 GiB is the difference (cuBLAS/attention workspaces, the hidden states held
# while the sampler runs). One observation, so it is a floor, not a fit.
VLLM_PROFILE_FLOOR_BYTES = int(0.35 * GIB)
