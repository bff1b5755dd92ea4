"""Which job to run: a spec file, a shipped example by name, or the built-in default; and its model.

`load_job_ref` is the one way every command turns what the user typed into a validated job:
an existing path is read as a TOML spec; a name such as `tiny-finetune` is a shipped example
(`gpuscout examples` lists them); nothing at all is the built-in default job. `resolve_job_model`
then finds the model the job names and checks the job against it (context, LoRA rank, TP split).
"""

from __future__ import annotations

import difflib
import tomllib
from importlib import resources
from pathlib import Path

from gpuscout.errors import SpecError
from gpuscout.workload.colocated import resolve_colocated
from gpuscout.workload.job import ImageJob, InferenceJob, Job, VideoJob, load_job, parse_job
from gpuscout.workload.model import Model
from gpuscout.workload.resolve import resolve_image, resolve_llm, resolve_video
from gpuscout.workload.validate import validate_llm_job


def examples_dir() -> Path:
    """The folder of example job specs and the example price sheet shipped with the package."""
    return Path(str(resources.files("gpuscout").joinpath("examples")))


def example_names() -> list[str]:
    """Names of the shipped example jobs (the price sheet is not a job)."""
    return sorted(p.stem for p in examples_dir().glob("*.toml") if not p.stem.startswith("prices"))


def default_job() -> Job:
    """The job `gpuscout estimate` and `pick` screen when none is given."""
    text = resources.files("gpuscout.workload").joinpath("default_job.toml").read_text(encoding="utf-8")
    return parse_job(tomllib.loads(text), origin="built-in default job")


def load_job_ref(ref: str | Path | None) -> tuple[Job, Path | None]:
    """The job and the folder its relative paths resolve from (None for the built-in default)."""
    if ref is None:
        return default_job(), None
    path = Path(ref)
    if not path.exists():
        example = examples_dir() / f"{path.name.removesuffix('.toml')}.toml"
        if path.parent == Path(".") and example.is_file():
            path = example
        else:
            raise _no_spec(path)
    return load_job(path), path.parent


def resolve_job_model(job: Job, base_dir: Path | None) -> Model:
    """The job's model shape, with the job checked against it."""
    if isinstance(job, ImageJob):
        return resolve_image(job.model)
    if isinstance(job, VideoJob):
        return resolve_video(job.model)
    shape = resolve_llm(job.model, base_dir=base_dir)
    validate_llm_job(job, shape)
    if isinstance(job, InferenceJob) and job.co_served:
        return resolve_colocated(job, shape, base_dir)  # the models served beside it, each checked
    return shape


def _no_spec(path: Path) -> SpecError:
    names = example_names()
    close = difflib.get_close_matches(path.stem, names, n=3)
    return SpecError(f"No job spec at {path}.", "The path does not exist and it names no shipped example.",
                     (f"Did you mean {', '.join(close)}? " if close else "") +
                     f"Pass a TOML spec, or an example name: {', '.join(names)} (`gpuscout examples`).")
