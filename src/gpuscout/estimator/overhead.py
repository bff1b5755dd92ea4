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

# vLLM captures CUDA graphs for decode batch sizes; their memory is outside the torch profile
# run. Issues vllm#45178/#57475 show the estimate missing by GBs either way; 1 GiB is an
# assumption in the middle of what those threads report, labelled as such.
CUDA_GRAPHS_BYTES = 1 * GIB
CUDA_GRAPHS_SOURCE = "assumed 1 GiB for vLLM CUDA graphs (vllm#45178, #57475: off by GBs both ways)"

# NCCL communicator buffers when a job spans GPUs (tensor parallel or data parallel).
# NCCL's default NCCL_BUFFSIZE is 4 MiB per channel and peer; with up to 32 channels and
# a few peers that is a few hundred MiB. Assumed 256 MiB.
NCCL_BYTES = 256 * MIB
NCCL_SOURCE = "assumed 256 MiB (NCCL_BUFFSIZE 4 MiB × channels × peers)"

# vLLM's page size in tokens (vllm/v1/kv_cache_interface.py block_size default 16).
VLLM_BLOCK_TOKENS = 16
# vLLM's sampler is profiled at max_num_seqs sequences (default 256) with fp32 logits.
VLLM_MAX_NUM_SEQS = 256
