"""Real diffusers video-model inputs shared by the bench (random) and the trace (fake tensors)."""

from __future__ import annotations

from typing import Any

from gpuscout.workload.video import VideoModelShape

LTX_FRAME_RATE = 25  # LTXPipeline.__call__ frame_rate default; only the rope scale reads it


def ltx_transformer_inputs(torch: Any, shape: VideoModelShape, lat: tuple[int, int, int], batch: int, dtype: Any,
                           device: Any, make: Any) -> dict[str, Any]:
    """LTXPipeline's transformer arguments: latents packed to (batch, tokens, channels) (patch size 1),
    the T5 states with their attention mask, the latent grid and the rope interpolation scale
    (vae temporal ratio / frame_rate 25, vae spatial ratio, vae spatial ratio). `make` builds a
    tensor (torch.empty for the trace, torch.randn for the bench)."""
    tokens = lat[0] * lat[1] * lat[2]
    return {"hidden_states": make(batch, tokens, shape.latent_channels, dtype=dtype, device=device),
            "encoder_hidden_states": make(batch, shape.text_tokens, shape.text_dim, dtype=dtype, device=device),
            "timestep": torch.full((batch,), 500, dtype=torch.long, device=device),
            "encoder_attention_mask": torch.ones(batch, shape.text_tokens, dtype=torch.long, device=device),
            "num_frames": lat[0], "height": lat[1], "width": lat[2],
            "rope_interpolation_scale": (shape.vae_scale_temporal / LTX_FRAME_RATE, shape.vae_scale_spatial,
                                         shape.vae_scale_spatial)}
