"""A model's shape, weight bytes and KV cache per token; the preset list (`gpuscout model`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table

from gpuscout.report.footnotes import Footnotes
from gpuscout.report.layout import label_column, number_column, prose_column
from gpuscout.report.numbers import exact, gib, size
from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.model import Model
from gpuscout.workload.presets import LlmPreset
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape


def model_table(shape: ModelShape) -> Table:
    table = Table(title=f"{shape.name} ({shape.family})", show_header=False)
    table.add_column("field")
    table.add_column("value")
    experts = f"{shape.num_experts} (top-{shape.experts_per_token})" if shape.num_experts else "-"
    expert_width = f" (experts {shape.moe_intermediate_size})" if shape.num_experts else ""
    rows = [
        ("source", shape.source),
        ("layers / hidden", f"{shape.num_layers} / {shape.hidden_size}"),
        ("heads / KV heads / head_dim", f"{shape.num_attention_heads} / {shape.num_kv_heads} / {shape.head_dim}"),
        ("FFN width", f"{shape.intermediate_size}{expert_width}"),
        ("experts", experts),
        ("vocab / tied embeddings", f"{exact(shape.vocab_size)} / {shape.tie_word_embeddings}"),
        ("max context", exact(shape.max_position_embeddings)),
        ("params total / active", f"{exact(shape.params_total)} / {exact(shape.params_active)}"),
        ("attention layers", ", ".join(f"{a.count}× {a.kind}" + (f" (window {a.window})" if a.window else "")
                                       for a in shape.attention)),
    ]
    for label, value in rows:
        table.add_row(label, value)
    return table


def weights_table(weight_bytes: Mapping[str, int], kv_per_token: Mapping[str, int]) -> Table:
    table = Table(title="Weights and KV cache")
    table.add_column("format")
    table.add_column("weights", justify="right")
    table.add_column("KV cache per token", justify="right")
    for fmt, nbytes in weight_bytes.items():
        kv = kv_per_token.get(fmt)
        table.add_row(fmt, gib(nbytes), size(kv) if kv is not None else "-")
    return table


def image_model_table(model: ImageModelShape) -> Table:
    return _components_table(f"{model.name} ({model.family}, {model.denoiser_kind})", model)


def video_model_table(model: VideoModelShape) -> Table:
    return _components_table(f"{model.name} ({model.family}, video DiT)", model)


def _components_table(title: str, model: ImageModelShape | VideoModelShape) -> Table:
    """A diffusion model's components, each with its class, parameters and default dtype, and the total."""
    table = Table(title=title)
    for col in ("component", "class"):
        label_column(table, col)
    number_column(table, "params")
    label_column(table, "default dtype")
    for c in model.components:
        table.add_row(c.name, c.class_name, exact(c.params), c.default_dtype)
    table.add_row("total", "", exact(model.params_total), "")
    return table


def preset_table(presets: Sequence[LlmPreset], image_ids: Sequence[str],
                 video_ids: Sequence[str] = ()) -> RenderableType:
    """The built-in model presets: language models (each source a footnote), then image and video models."""
    notes = Footnotes()
    table = Table(title="Built-in model presets")
    label_column(table, "id")
    prose_column(table, "name")
    label_column(table, "source")
    for p in presets:
        table.add_row(p.id, p.name, notes.ref(p.source))
    for image_id in image_ids:
        table.add_row(image_id, "(image model)", "")
    for video_id in video_ids:
        table.add_row(video_id, "(video model)", "")
    return Group(table, notes.flush())


def model_screen(shape: Model, weights: Mapping[str, int],
                 kv_per_token: Mapping[str, int]) -> RenderableType:
    """A language model's shape with its weights and KV cache, or an image or video model's components."""
    if isinstance(shape, ImageModelShape):
        return image_model_table(shape)
    if isinstance(shape, VideoModelShape):
        return video_model_table(shape)
    return Group(model_table(shape), weights_table(weights, kv_per_token))
