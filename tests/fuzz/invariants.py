"""What every parser must give back: a sane object or a clean, printable three-part error.

`check_parsed` asserts invariants on a parsed object (no NaN or infinity anywhere, no negative
sizes, numbers within the documented limits of docs/design.md §4.10); `check_error` asserts that an
error is a `GpuscoutError` whose message can be printed and does not repeat an outside file's bytes.
An `AssertionError` from either is "silent nonsense" in the fuzz counts. The limits are written
out here, not imported, so that the same checks judge the code before and after a change.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from gpuscout.errors import GpuscoutError

from .corpus import SECRET, FileCase

MAX_NAME = 255
MAX_MESSAGE = 4000
MAX_INT = 2**63
JOB_MAXIMA = {
    "dataset_tokens": 10**15, "epochs": 10_000, "requests": 10**12, "images": 10**12, "seq_len": 10_000_000,
    "micro_batch": 65_536, "grad_accum": 100_000, "prompt_tokens": 10_000_000, "output_tokens": 10_000_000,
    "concurrency": 1_000_000, "steps": 10_000, "batch": 65_536, "max_num_batched_tokens": 100_000_000,
}


def numbers(value: Any, path: str = "") -> Iterator[tuple[str, float | int]]:
    """Every number inside a model dump, with its path (iterative: inputs may be deep)."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, BaseModel):
            node = node.model_dump()
        if isinstance(node, bool) or node is None:
            continue
        if isinstance(node, int | float):
            yield where, node
        elif isinstance(node, dict):
            stack.extend((f"{where}.{k}", v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))


def strings(value: Any) -> Iterator[str]:
    stack: list[Any] = [value.model_dump() if isinstance(value, BaseModel) else value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)


def all_finite(value: Any) -> None:
    for where, number in numbers(value):
        assert not isinstance(number, float) or math.isfinite(number), f"{where} = {number}"
        assert abs(number) <= MAX_INT or isinstance(number, float), f"{where} = {number} overflows int64"


def printable(value: Any) -> None:
    for text in strings(value):
        text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError here, as it would on output


def check_job(job: Any) -> None:
    all_finite(job)
    printable(job)
    assert len(job.name) <= MAX_NAME, f"name of {len(job.name)} characters"
    for name, limit in JOB_MAXIMA.items():
        value = getattr(job, name, None)
        assert value is None or 0 < value <= limit, f"{name} = {value} outside (0, {limit}]"


def check_offers(offers: Any) -> None:
    for offer in offers:
        all_finite(offer)
        printable(offer)
        assert 1 <= offer.gpu_count <= 1024 and offer.price > 0, offer.id
        assert len(offer.id) <= MAX_NAME


def check_shape(shape: Any) -> None:
    all_finite(shape)
    printable(shape)
    assert 1 <= shape.num_layers <= 10_000, shape.num_layers
    assert 1 <= shape.hidden_size <= 1_000_000, shape.hidden_size
    assert shape.num_attention_heads >= 1 and 1 <= shape.num_kv_heads <= shape.num_attention_heads
    assert shape.head_dim >= 1 and shape.vocab_size >= 1
    assert 0 <= shape.experts_per_token <= shape.num_experts or shape.num_experts == shape.experts_per_token == 0
    assert 0.0 <= shape.dropout <= 1.0, shape.dropout
    assert 0 <= shape.params_active <= shape.params_total
    for where, number in numbers(shape):
        assert number >= 0, f"{where} = {number}"


def check_checkpoint(weights: Any) -> None:
    all_finite(weights)
    assert weights.files >= 1 and weights.total_bytes >= 0
    assert weights.total_bytes == sum(g.bytes for g in weights.by_dtype)
    for where, number in numbers(weights):
        assert number >= 0, f"{where} = {number}"


def check_result(result: Any) -> None:
    all_finite(result)
    printable(result)
    for case in result.cases:
        for metric in case.metrics:
            if metric.summary is not None:
                assert metric.summary.n >= 1, f"{metric.name}: summary of {metric.summary.n} samples"
                assert not metric.samples or metric.summary.n == len(metric.samples), metric.name
            for sample in metric.samples:
                assert abs(sample) <= 1e30, f"{metric.name} sample {sample}"
        for where, number in numbers(case.peak_memory):
            assert number >= 0, f"peak_memory{where} = {number}"


def check_texts(texts: Any) -> None:
    assert texts, "no texts"
    for text in texts:
        text.encode("utf-8")


def check_workload(workload: Any) -> None:
    assert workload.prompts
    for prompt in workload.prompts:
        prompt.text.encode("utf-8")
        assert prompt.text.strip() and prompt.prompt_tokens >= 1, repr(prompt.text[:40])


CHECKS = {
    "job": check_job,
    "price_sheet": lambda sheet: check_offers(sheet.offers),
    "vms_csv": lambda imported: check_offers(imported.offers),
    "config_json": check_shape,
    "safetensors": check_checkpoint,
    "result_json": check_result,
    "dataset_jsonl": check_workload,
    "dataset_bench": check_texts,
}


def check_parsed(case: FileCase, parsed: Any) -> None:
    CHECKS[case.parser](parsed)
    if case.label in ("fifo", "dir", "devzero", "devnull", "sparse", "missing"):
        raise AssertionError(f"a {case.label} was read as a {case.parser}")


def check_error(case: FileCase, error: GpuscoutError) -> None:
    message = str(error)
    message.encode("utf-8")
    assert error.what and error.why and error.fix, "an error part is empty"
    assert len(message) <= MAX_MESSAGE, f"a {len(message)}-character error message"
    if case.parser == "safetensors":
        (number,) = struct.unpack("<Q", SECRET[:8])
        assert "SECRET" not in message and str(number) not in message, "the error repeats an outside file"
