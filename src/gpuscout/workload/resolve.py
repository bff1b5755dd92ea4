"""Turn the `model` string of a job spec into a shape: a preset id, a config.json, or a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscout.errors import UnknownNameError
from gpuscout.workload.checkpoint import read_checkpoint_weights
from gpuscout.workload.hf_config import load_hf_config, shape_from_hf_config
from gpuscout.workload.image import ImageModelShape, image_preset_ids, load_image_preset
from gpuscout.workload.model import Model
from gpuscout.workload.presets import llm_preset_config, llm_preset_ids, load_llm_preset
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape, load_video_preset, video_preset_ids


def resolve_llm(ref: str, *, base_dir: Path | None = None) -> ModelShape:
    """A language model from a path (config.json file or model directory) or a preset id.

    A directory with *.safetensors files also gets exact weight bytes from their headers.
    Relative paths are tried from the current directory, then from `base_dir` (the spec's folder).
    """
    path = _existing_path(ref, base_dir)
    if path is None:
        return load_llm_preset(ref)
    shape = shape_from_hf_config(load_hf_config(path), name=path.name if path.is_dir() else path.parent.name,
                                 source=str(path))
    if path.is_dir() and any(path.glob("*.safetensors")):
        shape = shape.model_copy(update={"checkpoint": read_checkpoint_weights(path)})
    return shape


def resolve_image(ref: str) -> ImageModelShape:
    return load_image_preset(ref)


def resolve_video(ref: str) -> VideoModelShape:
    return load_video_preset(ref)


def resolve_any(ref: str, *, base_dir: Path | None = None) -> Model:
    """For `gpuscout model`: a language model if the name is one, else an image or video model preset."""
    try:
        return resolve_llm(ref, base_dir=base_dir)
    except UnknownNameError as llm_error:
        for resolve in (resolve_image, resolve_video):
            try:
                return resolve(ref)
            except UnknownNameError:
                continue
        raise UnknownNameError(
            llm_error.what,
            "It is neither a path, a language-model preset nor an image- or video-model preset.",
            f"Use a config.json path, a model directory, or one of: "
            f"{', '.join(llm_preset_ids() + image_preset_ids() + video_preset_ids())}.",
        ) from None


def _existing_path(ref: str, base_dir: Path | None) -> Path | None:
    for candidate in (Path(ref), (base_dir / ref) if base_dir else None):
        try:
            if candidate is not None and candidate.exists():
                return candidate
        except (OSError, ValueError):  # a name too long for a path, or a NUL in it: not a path, maybe a preset
            continue
    return None


def llm_config(ref: str, *, base_dir: Path | None = None) -> dict[str, Any]:
    """The raw config.json dict behind a language-model reference (for real-model tools)."""
    path = _existing_path(ref, base_dir)
    return load_hf_config(path) if path is not None else llm_preset_config(ref)
