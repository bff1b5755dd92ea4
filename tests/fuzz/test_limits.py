"""Each problem the fuzzing found, pinned down: the limit that stops it and the message that names it."""

from __future__ import annotations

import copy
import json
import math
import os
import struct
import threading
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuscout import api
from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.hardware.price_sheet import load_price_sheet
from gpuscout.hardware.skypilot import import_skypilot_catalog
from gpuscout.loadgen.workload import dataset_workload
from gpuscout.measure.llm_setup import read_texts
from gpuscout.results.store import load_result
from gpuscout.userfile import MAX_NESTING, nesting_exceeds, read_user_text
from gpuscout.workload.checkpoint import read_checkpoint_weights
from gpuscout.workload.hf_config import load_hf_config, shape_from_hf_config
from gpuscout.workload.job import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_CONTEXT,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_TOKENS,
    FinetuneJob,
    ImageJob,
    InferenceJob,
    load_job,
)

from .corpus import SECRET, config_seeds, result_seed, safetensors_file, to_json

DATA = Path(__file__).resolve().parents[1] / "hardware" / "data"
LLAMA = next(c for c in config_seeds() if c.get("model_type") == "llama")
MIXTRAL = next(c for c in config_seeds() if c.get("model_type") == "mixtral")


def _shape(tmp_path: Path, config: dict[str, Any] | str) -> Any:
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return shape_from_hf_config(load_hf_config(path), name="x", source="x")


# --- config.json ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "field"), [
    ({"attention_dropout": "0.1"}, "attention_dropout"),
    ({"attention_dropout": {"p": 0.1}}, "attention_dropout"),
    ({"attention_dropout": 1.5}, "attention_dropout"),
    ({"attention_dropout": True}, "attention_dropout"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"num_hidden_layers": 2_000_000_000}, "num_hidden_layers"),
    ({"hidden_size": True}, "hidden_size"),
    ({"num_key_value_heads": 64}, "num_key_value_heads"),  # more than the 32 query heads
    ({"vocab_size": 0}, "vocab_size"),
    ({"hidden_act": ["silu"]}, "hidden_act"),
])
def test_config_numbers_are_checked_once_naming_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        _shape(tmp_path, {**LLAMA, **change})


def test_more_experts_per_token_than_experts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="num_experts_per_tok = 9 of 8 experts"):
        _shape(tmp_path, {**MIXTRAL, "num_experts_per_tok": 9})


def test_non_finite_json_numbers_are_refused(tmp_path: Path) -> None:
    text = json.dumps(LLAMA)[:-1] + ', "attention_dropout": 1e999}'  # float("1e999") is inf
    with pytest.raises(SpecError, match="'attention_dropout' is '1e999', not a finite number"):
        _shape(tmp_path, text)
    with pytest.raises(SpecError, match="not a finite number"):
        _shape(tmp_path, json.dumps(LLAMA)[:-1] + ', "rope_theta": NaN}')


def test_a_model_past_a_quadrillion_parameters_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="more than 1e\\+15"):
        _shape(tmp_path, {**LLAMA, "num_hidden_layers": 10_000, "hidden_size": 1_000_000, "num_attention_heads": 8,
                          "num_key_value_heads": 8})


# --- nesting, sizes, special files ------------------------------------------------------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(("name", "text", "read"), [
    ("job.toml", 'kind = "finetune"\nmodel = "x"\nlora = ' + "[" * 5000 + "]" * 5000, load_job),
    ("job.toml", 'kind = "finetune"\nmodel = "x"\n' + ".".join(["a"] * 5000) + " = 1", load_job),
    ("prices.toml", "offer = " + "{a=" * 3000 + "1" + "}" * 3000, load_price_sheet),
    ("config.json", '{"model_type": "llama", "x": ' + DEEP_JSON + "}", load_hf_config),
    ("result.json", DEEP_JSON, load_result),
    ("data.jsonl", '{"prompt": ' + DEEP_JSON + "}", lambda p: dataset_workload(p, n=None, output_tokens=8,
                                                                                 tokenizer_path=None, seed=0)),
    ("data.jsonl", '{"text": ' + DEEP_JSON + "}", read_texts),
])
def test_deep_nesting_is_refused_before_parsing(tmp_path: Path, name: str, text: str, read: Any) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError, match=f"more than {MAX_NESTING} levels deep"):
        read(path)


def test_nesting_scan_ignores_brackets_in_strings_and_comments() -> None:
    assert not nesting_exceeds('{"a": "' + "[" * 500 + '", "b": "\\"' + "{" * 500 + '"}', 64)
    assert not nesting_exceeds('a = "[[[[" # ' + "[" * 500 + "\nb = '''" + "{" * 500 + "'''", 64, toml=True)
    assert not nesting_exceeds("[" * 64 + "]" * 64, 64)
    assert nesting_exceeds("[" * 65 + "]" * 65, 64)
    assert nesting_exceeds("[" * 65, 64)  # a truncated file counts its open brackets


def test_dev_zero_and_a_fifo_are_refused_without_reading(tmp_path: Path) -> None:
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match="it is a device, not a file"):
        load_job(zero)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    done = threading.Event()

    def read() -> None:
        with pytest.raises(SpecError, match="named pipe"):
            load_result(fifo)
        done.set()

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    assert done.wait(5), "reading a FIFO blocked"


def test_oversized_files_are_refused_from_their_size(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    with path.open("wb") as handle:
        handle.truncate(2**20 + 1)
    with pytest.raises(SpecError, match="larger than 1 MiB"):
        load_job(path)


def test_invalid_utf8_is_reported_by_line_without_echo(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(b'kind = "finetune"\nmodel = "\xed\xa0\x80secret"\n')
    with pytest.raises(SpecError, match="invalid byte on line 2") as err:
        read_user_text(path, "job spec", "Fix it.")
    assert "secret" not in str(err.value)


# --- job specs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field"), [
    ("epochs = inf", "epochs"),
    ("epochs = nan", "epochs"),
    ("epochs = 1e999", "epochs"),
    ("dataset_tokens = 10_000_000_000_000_000", "dataset_tokens"),
    ("seq_len = 100_000_000", "seq_len"),
    ("micro_batch = 1_000_000", "micro_batch"),
    (f'name = "{"n" * 256}"', "name"),
    ("dataset_tokens = " + "1" * 5000, "4,300 digits"),
])
def test_job_numbers_are_finite_and_bounded(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "job.toml"
    path.write_text(f'kind = "finetune"\nmodel = "llama-3-8b"\n{body}\n')
    with pytest.raises(SpecError, match=field) as err:
        load_job(path)
    assert len(str(err.value)) < 1000


def _finite(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if hasattr(node, "model_dump"):
            node = node.model_dump()
        elif hasattr(node, "__dataclass_fields__"):
            node = {k: getattr(node, k) for k in node.__dataclass_fields__}
        if isinstance(node, float) and not math.isfinite(node):
            return False
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return True


@pytest.mark.parametrize("job", [
    FinetuneJob(kind="finetune", model="llama-3-8b", dataset_tokens=MAX_TOKENS, epochs=MAX_EPOCHS, seq_len=MAX_CONTEXT,
                micro_batch=MAX_BATCH, grad_accum=100_000, allow_long_context=True, name="n" * 255),
    FinetuneJob(kind="finetune", model="llama-3-8b", dataset_tokens=MAX_TOKENS, epochs=MAX_EPOCHS),
    FinetuneJob(kind="finetune", model="llama-3-8b", dataset_tokens=1, epochs=1e-300),
    InferenceJob(kind="inference", model="llama-3-8b", requests=MAX_COUNT, prompt_tokens=MAX_CONTEXT,
                 output_tokens=MAX_CONTEXT, concurrency=MAX_CONCURRENCY, allow_long_context=True),
    ImageJob(kind="image", model="sdxl", images=MAX_COUNT, steps=10_000, batch=MAX_BATCH, width=4096, height=4096),
], ids=["finetune-max", "finetune-long", "finetune-tiny", "inference-max", "image-max"])
def test_a_job_at_the_limits_estimates_and_prices_finitely(job: Any) -> None:
    """The maxima are safe: the estimator, the speed model and billing stay finite at every bound."""
    assert _finite(api.estimate(job, gpus=["h100"]))
    assert _finite(api.pick(job))


# --- SkyPilot catalogs ------------------------------------------------------------------------------


def test_a_catalog_row_that_fails_validation_is_skipped_with_its_reason(tmp_path: Path) -> None:
    lines = (DATA / "skypilot_aws_vms.csv").read_text().splitlines()
    header, row = lines[0], lines[1].split(",")
    big = ",".join([row[0] + "x", row[1], "2048", *row[3:]])
    nan_price = lines[1].replace("21.957642", "nan").replace("p4d.24xlarge", "p4dn.24xlarge")
    path = tmp_path / "vms.csv"
    path.write_text("\n".join([header, big, nan_price, *lines[1:]]) + "\n")
    imported = import_skypilot_catalog(path, cloud="aws", observed_at=date(2026, 11, 1))
    reasons = {s.line: s.reason for s in imported.skipped}
    assert reasons[2] == "more than 1,024 GPUs in one instance"
    assert reasons[3].startswith("no usable on-demand Price 'nan'")
    assert imported.offers  # the good rows still came through


# --- result files -----------------------------------------------------------------------------------


def _result(tmp_path: Path, change: Any) -> Path:
    document = copy.deepcopy(result_seed())
    change(document)
    path = tmp_path / "result.json"
    path.write_bytes(to_json(document))
    return path


def _metric(document: dict[str, Any]) -> dict[str, Any]:
    metric: dict[str, Any] = document["cases"][0]["metrics"][0]
    return metric


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: _metric(d)["samples"].__setitem__(0, math.nan), "samples\\[0\\]' is 'NaN', not a finite number"),
    (lambda d: _metric(d)["samples"].__setitem__(0, 1e300), "beyond ±1e\\+30"),
    (lambda d: _metric(d)["summary"].update(min="nan"), "summary.min is nan"),  # pydantic reads "nan" as NaN
    (lambda d: _metric(d)["samples"].__setitem__(0, 5e-324), "a value of 4.94e-324"),
    (lambda d: _metric(d).update(samples=[], summary={**_metric(d)["summary"], "n": 0}), "a summary of 0 samples"),
    (lambda d: _metric(d)["summary"].update(n=3), "a summary of 3 samples beside 4"),
    (lambda d: _metric(d).update(samples="fast"), "samples"),
    (lambda d: d["cases"][0]["peak_memory"].update(torch_allocated_bytes=-1), "torch_allocated_bytes"),
    (lambda d: d["cases"][0]["params"].update(micro_batch=10**30), "beyond ±9e\\+18"),
    (lambda d: d.update(schema_version=True), "schema version True"),
])
def test_broken_result_files_are_refused_clearly(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_result(_result(tmp_path, change))


def test_a_zero_throughput_sample_is_still_a_measurement(tmp_path: Path) -> None:
    result = load_result(_result(tmp_path, lambda d: d["cases"][0]["metrics"][0]["samples"].__setitem__(0, 0.0)))
    assert result.cases[0].metrics[0].samples[0] == 0.0


# --- datasets ---------------------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_prompt_is_replaced_and_noted(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "half an emoji \\ud83d here"}\n{"prompt": "fine \\ud83d\\ude00"}\n')
    workload = dataset_workload(path, n=None, output_tokens=8, tokenizer_path=None, seed=0)
    texts = sorted(p.text for p in workload.prompts)
    assert texts == ["fine \U0001f600", "half an emoji \ufffd here"]
    assert "1 with broken surrogate escapes repaired" in workload.description
    for text in texts:
        text.encode("utf-8")


def test_bench_dataset_surrogates_and_blank_prompts(tmp_path: Path) -> None:
    path = tmp_path / "text.jsonl"
    path.write_text('{"text": "a \\udc00 b"}\n')
    assert read_texts(path) == ["a \ufffd b"]
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"prompt": "   "}\n')
    with pytest.raises(SpecError, match="line 1 has no prompt"):
        dataset_workload(blank, n=None, output_tokens=8, tokenizer_path=None, seed=0)


# --- safetensors ------------------------------------------------------------------------------------


def _model(tmp_path: Path, shard: str) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "outside.safetensors").write_bytes(SECRET)
    (model / "a.safetensors").write_bytes(safetensors_file({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}},
                                                           2))
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors", "v": shard}}))
    return model


@pytest.mark.parametrize("shard", ["../outside.safetensors", str(Path("/etc/hostname")), "link.safetensors",
                                   "sub/../../outside.safetensors", "config.json"])
def test_an_index_cannot_name_files_outside_the_model_folder(tmp_path: Path, shard: str) -> None:
    model = _model(tmp_path, shard)
    (model / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    with pytest.raises(SpecError, match="which gpuscout will not read") as err:
        read_checkpoint_weights(model)
    (number,) = struct.unpack("<Q", SECRET[:8])
    assert "SECRET" not in str(err.value) and str(number) not in str(err.value)


def test_the_hugging_face_cache_layout_is_followed(tmp_path: Path) -> None:
    """snapshots/<rev>/*.safetensors are symlinks into ../../blobs: inside the repository's cache folder."""
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "f00d").write_bytes(safetensors_file({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}},
                                                           2))
    (snapshot / "a.safetensors").symlink_to("../../blobs/f00d")
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    assert read_checkpoint_weights(snapshot).total_bytes == 2


def test_a_huge_header_is_refused_from_its_length_prefix(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", 100_000_000))
        handle.truncate(100_000_100)  # sparse: nothing of it is read
    with pytest.raises(SpecError, match="over gpuscout's 16 MiB limit"):
        read_checkpoint_weights(path)


def test_errors_render_as_three_printable_parts(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "model_type": "\ud800" * 3}, ensure_ascii=True))
    with pytest.raises(GpuscoutError) as err:
        _shape(tmp_path, path.read_text())
    str(err.value).encode("utf-8")
