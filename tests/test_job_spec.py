"""Job specs: every example loads and estimates; bad input gets a what / why / fix error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscout.errors import SpecError
from gpuscout.estimator.memory import estimate_memory
from gpuscout.hardware.catalog import find_gpu
from gpuscout.workload.job import load_job, parse_job
from gpuscout.workload.jobs import resolve_job_model as resolve_model

EXAMPLES = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.toml")
                  if not p.name.startswith("prices"))


def test_there_is_an_example_of_every_kind() -> None:
    assert {load_job(p).kind for p in EXAMPLES} == {"finetune", "inference", "image", "video"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_estimates(path: Path) -> None:
    job = load_job(path)
    model = resolve_model(job, path.parent)
    b = estimate_memory(job, model, find_gpu("h200"))
    assert b.peak_bytes > 0 and b.fits


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def test_malformed_toml_points_at_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'kind = "finetune"\nmodel = "llama-3-8b"\nmicro_batch = = 2\n')
    with pytest.raises(SpecError, match="line 3"):
        load_job(path)


@pytest.mark.parametrize(("body", "field"), [
    ('micro_batch = -2', "micro_batch"),
    ('gpus = 0', "gpus"),
    ('precision = "fp9"', "precision"),
    ('micro_btch = 2', "micro_btch"),
])
def test_impossible_values_name_the_field(tmp_path: Path, body: str, field: str) -> None:
    path = write(tmp_path, f'kind = "finetune"\nmodel = "llama-3-8b"\n{body}\n')
    with pytest.raises(SpecError) as err:
        load_job(path)
    assert field in str(err.value) and "To fix" in str(err.value)


def test_missing_kind_says_which_kinds_exist() -> None:
    with pytest.raises(SpecError, match="finetune"):
        parse_job({"model": "llama-3-8b"})


def test_context_beyond_the_model_maximum_needs_an_override() -> None:
    job = parse_job({"kind": "inference", "model": "llama-2-7b", "prompt_tokens": 8000})
    with pytest.raises(SpecError, match="longer than"):
        resolve_model(job, None)
    ok = parse_job({"kind": "inference", "model": "llama-2-7b", "prompt_tokens": 8000, "allow_long_context": True})
    resolve_model(ok, None)


def test_lora_rank_above_hidden_size_is_refused() -> None:
    job = parse_job({"kind": "finetune", "model": "gpt2", "seq_len": 512, "lora": {"rank": 1024}})
    with pytest.raises(SpecError, match="rank 1024"):
        resolve_model(job, None)


def test_unknown_lora_targets_list_the_real_names() -> None:
    job = parse_job({"kind": "finetune", "model": "phi-3-mini-4k", "seq_len": 512,
                     "lora": {"target_modules": ["q_proj"]}})
    with pytest.raises(SpecError, match="qkv_proj"):
        estimate_memory(job, resolve_model(job, None), find_gpu("h100"))
