"""What every parser must give back: a sane object or a clean, printable three-part error.

`check_parsed` asserts invariants on a parsed object (no NaN or infinity anywhere, no negative
sizes, numbers within the documented limits of docs/design.md §4.10); `check_error` asserts that an
error is a `GpuscoutError` whose message can be printed and does not repeat an outside file's bytes.
An `AssertionError` from either is "silent nonsense" in the fuzz counts. The limits are written
out here, not imported, so that the same checks judge the code before and after a change.
"""

from __future__ import annotations

import json
import math
import re
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


FRACTIONS = ("server_kv_cache_usage", "server_prefix_cache_hit_rate", "prefix_cache_hit_rate")
# A gauge past these is not a server's reading: no engine runs a billion requests at once.
SERVER_MAXIMA = {"server_running_requests": 1e9, "server_waiting_requests": 1e9}


def check_load_result(result: Any) -> None:
    """What `load` writes from /metrics: finite, gauges ≥ 0, fractions in [0, 1], and readable again by
    `compare`, `report` and `results` (a result they refuse as damaged was written with nonsense)."""
    from gpuscout.results.store import parse_result

    check_result(result)
    for case in result.cases:
        for metric in case.metrics:
            if not metric.name.startswith("server_") and metric.name not in FRACTIONS:
                continue
            for value in (metric.value, *metric.samples):
                assert value >= 0, f"{metric.name} = {value}"
                assert metric.name not in FRACTIONS or value <= 1, f"{metric.name} = {value}"
                assert value <= SERVER_MAXIMA.get(metric.name, 1e15), f"{metric.name} = {value}"
    try:
        parse_result(json.loads(result.model_dump_json()), "load.json")
    except GpuscoutError as refused:
        raise AssertionError(f"load wrote a result it then refuses: {refused.what[:120]}") from None


def check_trace_workload(workload: Any) -> None:
    check_workload(workload)
    arrivals = [p.arrival_s for p in workload.prompts]
    assert all(a is not None and math.isfinite(a) and a >= 0 for a in arrivals), "an arrival is not a time ≥ 0"
    assert arrivals == sorted(arrivals), "arrivals out of order"
    assert arrivals[-1] - arrivals[0] <= 366 * 86_400, f"a trace spanning {arrivals[-1] - arrivals[0]:.3g} s"
    for prompt in workload.prompts:
        assert prompt.output_tokens >= 1 and 0 <= prompt.prefix_tokens <= prompt.prompt_tokens


def check_report(rendered: Any) -> None:
    html = rendered.html
    html.encode("utf-8")
    assert "<script>alert" not in html, "text from the file reached the page as markup"


def check_compare(parsed: Any) -> None:
    report, text = parsed
    text.encode("utf-8")
    assert not CONTROL.search(text), "a control character from a result file reached the screen"
    for where, number in numbers(report.comparison):
        assert not isinstance(number, float) or not math.isnan(number), f"comparison{where} = NaN"
    assert report.verdict is not None


def check_store(parsed: Any) -> None:
    runs, total, shown = parsed
    assert total >= len(runs) >= 0
    for run in runs:
        printable(run)
        assert run.payload_bytes >= 0, f"payload of {run.payload_bytes} bytes"
    for result in shown:
        check_result(result)


def check_calibration(parsed: Any) -> None:
    observations, calibration, again = parsed
    for obs in observations:
        assert math.isfinite(obs.measured_s) and obs.measured_s > 0, f"measured {obs.measured_s}"
        assert math.isfinite(obs.estimated_s) and obs.estimated_s > 0, f"estimated {obs.estimated_s}"
    all_finite(calibration)
    for where, number in numbers(calibration):
        if where.endswith(("factor", "efficiency", "mfu")):
            assert number > 0, f"{where} = {number}"
    assert again == calibration, "the calibration file does not read back as written"


def check_estimate(report: Any) -> None:
    """An estimate: the job sane, every figure finite, no negative memory or time."""
    check_job(report.job)
    all_finite(report.screening)
    for where, number in numbers(report.screening):
        # Headroom and spare bytes are signed on purpose: a job or co-served set that does not fit is short.
        if where.endswith(("_bytes", "_s", "seconds", "hours")) and not where.endswith(SIGNED):
            assert number >= 0, f"{where} = {number}"


SIGNED = (".spare_bytes", ".headroom_bytes")  # negative when it does not fit: short by that much


CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x9b]")


CHECKS = {
    "job": check_job,
    "price_sheet": lambda sheet: check_offers(sheet.offers),
    "vms_csv": lambda imported: check_offers(imported.offers),
    "config_json": check_shape,
    "safetensors": check_checkpoint,
    "result_json": check_result,
    "dataset_jsonl": check_workload,
    "dataset_bench": check_texts,
    "metrics_body": check_load_result,
    "trace_jsonl": check_trace_workload,
    "sharegpt_json": check_workload,
    "report_doc": check_report,
    "compare_pair": check_compare,
    "store_file": check_store,
    "calibrate_inputs": check_calibration,
    "coserved_job": check_estimate,
    "video_job": check_estimate,
}


def check_parsed(case: FileCase, parsed: Any) -> None:
    CHECKS[case.parser](parsed)
    if case.parser == "metrics_body" or (case.parser == "store_file" and case.label == "missing"):
        return  # a page that is no plain file stands for no answer; no store file yet is an empty store
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
