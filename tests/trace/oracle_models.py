"""The small models and tolerances of the trace oracles (test_oracle, test_settings_trace): configs a CPU
traces in seconds, and the estimate's peak without what the trace cannot see."""

from __future__ import annotations

from typing import Any

from gpuscout.estimator.breakdown import MemoryBreakdown, bytes_by_category
from gpuscout.hardware.catalog import find_gpu

GPU = find_gpu("h100")
STATE_TOL = 0.01
PEAK_TOL = 0.10
DIMS = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "vocab_size": 4000, "max_position_embeddings": 4096}
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", **DIMS},
    "qwen2": {"model_type": "qwen2", **DIMS},
    "qwen3": {"model_type": "qwen3", "head_dim": 64, **DIMS},
    "mistral": {"model_type": "mistral", "sliding_window": None, **DIMS},
    "phi3": {"model_type": "phi3", "pad_token_id": 0, **DIMS},
    "gemma2": {"model_type": "gemma2", "head_dim": 32, "sliding_window": 256, **DIMS},
    # Dropout off: with dropout, CPU SDPA takes the math path and keeps s² scores that CUDA's
    # flash kernel does not, so the CPU trace would not be the GPU's oracle.
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 4, "n_head": 8, "vocab_size": 4000,
             "n_positions": 2048, "bos_token_id": 0, "eos_token_id": 0,
             "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
}
EAGER_ONLY = {"gemma2"}  # transformers has no SDPA path for Gemma 2


def allocated(b: MemoryBreakdown) -> int:
    """The estimate without the GPU-only overheads the trace cannot see."""
    return b.peak_bytes - bytes_by_category(b).get("overhead", 0)
