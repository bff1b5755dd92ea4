"""Fuzz inputs for every user-file parser, shared by the hypothesis suite and `benchmarks/fuzz_parsers.py`.

An input is a `FileCase`: the files to lay out in an empty folder (bytes, or a special entry such as
a FIFO, a folder, a device node or a symlink) and the entry the parser is pointed at. Inputs are
drawn from a `random.Random`, so the benchmark replays a seed and hypothesis drives the same
generators through `st.randoms()`. Three kinds are mixed:

* structure-aware: a valid seed document (a shipped example, a preset config, a synthetic result)
  with a few values swapped for hostile ones (NaN, inf, 1e999, huge or negative numbers, wrong
  types, deep nesting, long strings, lone surrogates) and then serialised as TOML / JSON / CSV;
* byte-level: a serialised seed with bytes flipped, cut, repeated or spliced with hostile tokens;
* raw: random bytes, and special files (FIFO, folder, /dev/zero, sparse files over the size caps).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import random
import re
import stat
import struct
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import gpuscout

PACKAGE = Path(gpuscout.__file__).parent
TESTS = Path(__file__).resolve().parents[1]

PARSERS = ("job", "price_sheet", "vms_csv", "config_json", "safetensors", "result_json", "dataset_jsonl",
           "dataset_bench")
# The surfaces added since: /metrics pages, traces and ShareGPT files, result files into `report` and
# `compare`, the results store, `calibrate`'s inputs, co-served and video jobs (each as its command uses it).
SURFACES = ("metrics_body", "trace_jsonl", "sharegpt_json", "report_doc", "compare_pair", "store_file",
            "calibrate_inputs", "coserved_job", "video_job")

# Bytes an outside file carries; no error message may repeat them (nor the number they spell).
SECRET = b"\x53\x45\x43\x52\x45\x54\x21\x21TOP-SECRET-CONTENT\n"


@dataclass(frozen=True)
class Raw:
    """Text spliced into a serialised document as is, where the serialiser cannot express it."""

    json: str
    toml: str
    csv: str = ""


@dataclass(frozen=True)
class Special:
    """A file that is not plain bytes: fifo, dir, devzero, devnull (a char device), symlink, sparse."""

    kind: str
    target: str = ""  # symlink target; for sparse, unused
    size: int = 0  # sparse: apparent size in bytes


@dataclass
class FileCase:
    parser: str
    files: dict[str, bytes | Special]
    entry: str
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""


# --- hostile values ------------------------------------------------------------------------------

DEEP = 5000  # deeper than Python's default recursion limit of 1000


def _deep_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _deep_dict(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


HOSTILE: tuple[Any, ...] = (
    math.nan, math.inf, -math.inf, 0, -1, 1, 0.0, -0.0, -0.5, 0.5, 1.5, 2, 7, 64, 4097, 2**31, 2**53 + 1,
    2**63, 2**64, 10**9, 10**12, 10**15 + 1, 10**30, -(10**30), 10**100, 1e308, 1e-300, 5e-324,
    True, False, "", "x", "1", "0.1", "nan", "inf", "-1", "x" * 256, "y" * 5000, "\ud800", "a\udc00b", "\x00",
    "é", "../../etc/passwd", "/etc/passwd", "\x1b[2J\x1b[31mred", "\x9b31mcsi", "line\rover",
    "<script>alert(1)</script>", [], {}, [1, 2], [-1], {"a": 1}, ["x"], _deep_list(60),
    _deep_dict(60),
    Raw(json="1e999", toml="1e999", csv="1e999"),
    Raw(json="-1e999", toml="-1e999", csv="-1e999"),
    Raw(json="NaN", toml="nan", csv="NaN"),
    Raw(json="Infinity", toml="inf", csv="inf"),
    Raw(json="1" * 5000, toml="1" * 5000, csv="1" * 5000),  # past int's 4300-digit limit
    Raw(json="1" * 400 + ".0", toml="1" * 400 + ".0", csv="1" * 400 + ".0"),  # a finite-looking inf
    Raw(json="[" * DEEP + "]" * DEEP, toml="[" * DEEP + "]" * DEEP, csv="[" * 200),
    Raw(json='{"a":' * DEEP + "1" + "}" * DEEP, toml="{a=" * DEEP + "1" + "}" * DEEP, csv="{" * 200),
    Raw(json='"\\ud800"', toml='"\\ud800"', csv="\\ud800"),
    Raw(json='"\\udfff\\ud800"', toml='"\\U0010ffff"', csv="\U0010ffff"),
)

TOKENS: tuple[bytes, ...] = (
    b"nan", b"inf", b"NaN", b"Infinity", b"1e999", b"-1", b"0", b"9" * 40, b"\xff", b"\xed\xa0\x80", b"\x00",
    b"[" * 2000, b"{" * 2000, b'"\\ud800"', b"\r\n", b'"', b"'", b"=", b",", b"\n[[offer]]\n", b"]]", b"#",
)


NUMBERS = tuple(v for v in HOSTILE if isinstance(v, int | float) and not isinstance(v, bool)) + tuple(
    v for v in HOSTILE if isinstance(v, Raw) and v.json[:1] in "-1NI")


def hostile(rng: random.Random, like: Any = None) -> Any:
    """A hostile value; for a number, most often another number (so more documents get past the types)."""
    if isinstance(like, int | float) and not isinstance(like, bool) and rng.random() < 0.6:
        return rng.choice(NUMBERS)
    return _deep_copy(rng.choice(HOSTILE))  # a copy: a later mutation must not change the shared value


# --- seed documents --------------------------------------------------------------------------------


@cache
def job_seeds() -> tuple[dict[str, Any], ...]:
    files = sorted((PACKAGE / "examples").glob("*.toml"))
    return tuple(tomllib.loads(f.read_text("utf-8")) for f in files if not f.stem.startswith("prices"))


@cache
def price_seed() -> dict[str, Any]:
    document = tomllib.loads((PACKAGE / "examples" / "prices.example.toml").read_text("utf-8"))
    small = {"offer": document["offer"][:3]}
    if document.get("exchange_rate"):
        small["exchange_rate"] = document["exchange_rate"][:1]
    return small


@cache
def vms_seeds() -> tuple[tuple[str, str], ...]:
    data = TESTS / "hardware" / "data"
    return tuple((cloud, (data / f"skypilot_{cloud}_vms.csv").read_text("utf-8")) for cloud in ("aws", "gcp", "lambda"))


@cache
def config_seeds() -> tuple[dict[str, Any], ...]:
    files = sorted((PACKAGE / "workload" / "llm_presets").glob("*.json"))
    return tuple(json.loads(f.read_text("utf-8")) for f in files)


def safetensors_seed(rng: random.Random) -> tuple[dict[str, Any], int]:
    """A small valid header and the length of its data area."""
    dtypes = (("BF16", 2), ("F32", 4), ("I64", 8), ("U8", 1), ("F8_E4M3", 1))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for i in range(rng.randint(1, 6)):
        dtype, size = rng.choice(dtypes)
        shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 3))]
        nbytes = math.prod(shape) * size
        header[f"model.layers.{i}.weight"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    return header, offset


@cache
def result_seed() -> dict[str, Any]:
    from gpuscout.results.schema import (
        BenchResult,
        Case,
        Failure,
        Fingerprint,
        FixedVariables,
        Metric,
        PeakMemory,
        StartupPhase,
    )
    from gpuscout.stats import summarize

    def metric(name: str, samples: list[float], unit: str) -> Metric:
        s = summarize(samples)
        return Metric(name=name, unit=unit, value=s.mean, samples=tuple(samples), summary=s, higher_is_better=True)

    tps = [1000.0, 1012.0, 990.0, 1005.0]
    case = Case(name="train", params={"micro_batch": 1, "seq_len": 512},
                metrics=(metric("tokens_per_s", tps, "tokens/s"), metric("step_s", [512 / t for t in tps], "s")),
                peak_memory=PeakMemory(torch_allocated_bytes=15 * 2**30, device_total_bytes=80 * 2**30),
                startup=(StartupPhase(name="imports", seconds=3.0),), wall_s=12.5)
    failed = Case(name="big", params={"micro_batch": 8}, failure=Failure(case="big", kind="oom", message="OOM",
                                                                          size={"micro_batch": 8}))
    result = BenchResult(
        kind="finetune", created_at=datetime(2026, 11, 1, tzinfo=UTC), name="A",
        job={"kind": "finetune", "model": "llama-3-8b", "seq_len": 512, "dataset_tokens": 1_000_000, "epochs": 1.0},
        fixed=FixedVariables(kind="finetune", model="llama-3-8b", model_config_hash="abc", data="synthetic", seed=0,
                             precision="bf16_mixed", device="cuda", warmup=2, repeats=4,
                             settings={"micro_batch": 1, "seq_len": 512}),
        fingerprint=Fingerprint(gpuscout_version="0.1.0", python="3.11", platform="Linux", cpu_model="EPYC",
                                cpu_cores=32, libraries={"torch": "2.6.0"}, gpu_count=1, gpu_sku="h100-sxm5-80gb"),
        cases=(case, failed),
    )
    seed: dict[str, Any] = json.loads(result.model_dump_json())
    return seed


DATASET_LINES: tuple[Any, ...] = (
    {"prompt": "Explain the roofline model in two sentences."},
    {"text": "A GPU rents by the second on most clouds."},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is HBM?"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Count to five."}]}]},
)


# --- serialisers -----------------------------------------------------------------------------------


_STAND_IN = re.compile(r'"(@@RAW\d+@@)"')


class _Splicer:
    """Stands `Raw` values in as unique strings, then swaps the quoted stand-ins for the raw text."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.raws: dict[str, str] = {}

    def stand_in(self, raw: Raw) -> str:
        key = f"@@RAW{len(self.raws)}@@"
        self.raws[key] = getattr(raw, self.kind)
        return key

    def splice(self, text: str) -> str:
        if not self.raws:
            return text
        return _STAND_IN.sub(lambda match: self.raws.get(match.group(1), match.group(0)), text)  # one pass


def _replace_raw(value: Any, splicer: _Splicer) -> Any:
    if isinstance(value, Raw):
        return splicer.stand_in(value)
    if isinstance(value, dict):
        return {k: _replace_raw(v, splicer) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replace_raw(v, splicer) for v in value]
    return value


def to_json(value: Any, *, indent: int | None = None) -> bytes:
    splicer = _Splicer("json")
    text = json.dumps(_replace_raw(value, splicer), indent=indent)  # NaN / Infinity as Python writes them
    return splicer.splice(text).encode("utf-8", "surrogatepass")


def _toml_value(value: Any, splicer: _Splicer) -> str:
    if isinstance(value, Raw):
        return value.toml
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v, splicer)}" for k, v in value.items()
                               if v is not None) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v, splicer) for v in value if v is not None) + "]"
    return json.dumps(str(value))


def to_toml(document: dict[str, Any]) -> bytes:
    """Every value inline (`offer = [{...}]` is the same TOML as [[offer]] tables)."""
    splicer = _Splicer("toml")
    lines = [f"{json.dumps(str(k))} = {_toml_value(v, splicer)}" for k, v in document.items() if v is not None]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def to_csv(rows: list[list[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([cell.csv if isinstance(cell, Raw) else cell for cell in row])
    return out.getvalue().encode("utf-8", "surrogatepass")


# --- mutation ----------------------------------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 400) -> list[tuple[Any, ...]]:
    """Paths to the values inside a document (iterative, at most `limit`)."""
    out: list[tuple[Any, ...]] = []
    stack = [(prefix, value)]
    while stack and len(out) < limit:
        path, node = stack.pop()
        if isinstance(node, dict):
            children: list[tuple[Any, Any]] = list(node.items())
        elif isinstance(node, list):
            children = list(enumerate(node))
        else:
            continue
        for key, child in children:
            out.append((*path, key))
            if len(path) < 8:
                stack.append(((*path, key), child))
    return out


def _parent(document: Any, path: tuple[Any, ...]) -> Any:
    node = document
    for key in path[:-1]:
        node = node[key]
    return node


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def scaled(value: Any, rng: random.Random) -> Any:
    """A number pushed somewhere odd: negative, zero, tiny, huge; any other value: a hostile one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return hostile(rng)
    factor = rng.choice((-1, 0, 1e-9, 1e3, 1e6, 1e12, 1e30, 1e300))
    result = value * factor
    return int(result) if isinstance(value, int) and math.isfinite(result) and abs(result) < 1e300 else result


def mutate(document: Any, rng: random.Random, count: int | None = None) -> Any:
    """A copy of `document` with 1–3 values replaced, deleted, duplicated or added."""
    document = _deep_copy(document)
    for _ in range(count if count is not None else rng.choice((1, 1, 1, 2, 2, 3))):
        paths = _paths(document)
        if not paths:
            return hostile(rng)
        path = rng.choice(paths)
        parent, key = _parent(document, path), path[-1]
        op = rng.random()
        if op < 0.55:
            parent[key] = hostile(rng, parent[key])
        elif op < 0.75:
            parent[key] = scaled(parent[key], rng)
        elif op < 0.85:
            del parent[key]
        elif op < 0.92 and isinstance(parent, dict):
            parent[rng.choice(("unknown_key", "x" * 300, "\ud800", "kind", "model_type"))] = hostile(rng)
        elif isinstance(parent, list):
            parent.extend([parent[key]] * rng.choice((2, 50, 400)))
        else:
            parent[key] = [parent[key]] * rng.choice((2, 400))
    return document


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """1–4 byte-level edits: flips, cuts, repeats, splices of hostile tokens, truncation."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(buf))
        op = rng.randrange(8)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 2:
            del buf[pos:pos + rng.randint(1, 64)]
        elif op == 3:
            span = bytes(buf[pos:pos + rng.randint(1, 64)])
            buf[pos:pos] = span * rng.randint(1, 200)
        elif op in (4, 5):
            buf[pos:pos] = rng.choice(TOKENS)
        elif op == 6:
            del buf[pos:]
        else:
            buf[pos:pos] = rng.choice(TOKENS) * rng.randint(1, 50)
    return bytes(buf)


# --- per-parser inputs ------------------------------------------------------------------------------


def job_case(rng: random.Random) -> FileCase:
    document = mutate(rng.choice(job_seeds()), rng)
    return FileCase("job", {"job.toml": to_toml(document) if isinstance(document, dict) else b"x = 1"}, "job.toml")


def price_case(rng: random.Random) -> FileCase:
    document = mutate(price_seed(), rng)
    return FileCase("price_sheet", {"prices.toml": to_toml(document) if isinstance(document, dict) else b""},
                    "prices.toml")


CSV_HOSTILE = ("nan", "NaN", "inf", "-inf", "1e999", "-1", "0", "0.5", "2000", "1025", "1e300", "", " ", "x" * 300,
               "\ud800", "A100", "H100", "A100-80GB", "a3-highgpu-8g", "[" * 3000, "\n", '"', "1" * 5000, "\x00",
               "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 1e999}}]}", "{'Gpus': [{'MemoryInfo': {'SizeInMiB': " + "9" * 400
               + "}}]}", "é" * 100)


def vms_case(rng: random.Random) -> FileCase:
    cloud, text = rng.choice(vms_seeds())
    rows = [list(r) for r in csv.reader(io.StringIO(text))]
    for _ in range(rng.randint(1, 4)):
        row = rng.choice(rows[1:] if len(rows) > 1 and rng.random() < 0.9 else rows)
        if row:
            row[rng.randrange(len(row))] = rng.choice(CSV_HOSTILE) if rng.random() < 0.8 else hostile(rng)
        if rng.random() < 0.1:
            rows.append(list(rng.choice(rows)) + (["extra"] if rng.random() < 0.5 else []))
    rows = [[c if isinstance(c, str | Raw) else json.dumps(c) if not isinstance(c, float) else repr(c) for c in r]
            for r in rows]
    cloud = rng.choice((cloud, cloud, cloud, "azure", "weird cloud", ""))
    return FileCase("vms_csv", {"vms.csv": to_csv(rows)}, "vms.csv", {"cloud": cloud})


def config_case(rng: random.Random) -> FileCase:
    document = mutate(rng.choice(config_seeds()), rng)
    return FileCase("config_json", {"config.json": to_json(document)}, "config.json")


def safetensors_file(header: Any, data_bytes: int, rng: random.Random | None = None) -> bytes:
    raw = to_json(header)
    length = len(raw)
    if rng is not None and rng.random() < 0.1:
        length = rng.choice((0, 1, len(raw) + 1, len(raw) - 1, 2**63, 2**64 - 1, 100_000_000, 200_000_000))
    return struct.pack("<Q", length) + raw + b"\0" * data_bytes


def safetensors_case(rng: random.Random) -> FileCase:
    header, data = safetensors_seed(rng)
    if rng.random() < 0.8:
        header = mutate(header, rng)
    if rng.random() < 0.7:
        return FileCase("safetensors", {"model.safetensors": safetensors_file(header, data, rng)}, "model.safetensors")
    return _indexed_checkpoint(header, data, rng)


def _indexed_checkpoint(header: Any, data: int, rng: random.Random) -> FileCase:
    """A model folder whose index names shards, some of them outside the folder."""
    files: dict[str, bytes | Special] = {"outside.safetensors": SECRET, "model/config.json": b'{"model_type": "llama"}',
                                         "model/model-1.safetensors": safetensors_file(header, data)}
    shard = rng.choice(("model-1.safetensors", "model-1.safetensors", "../outside.safetensors",
                        "/etc/hostname", "link.safetensors", "missing.safetensors", "config.json", "", ".",
                        "sub/../../outside.safetensors", "\x00", "x" * 300))
    if shard == "link.safetensors":
        files["model/link.safetensors"] = Special("symlink", "../outside.safetensors")
    index = {"metadata": {"total_size": 1}, "weight_map": {"a": "model-1.safetensors", "b": shard}}
    if rng.random() < 0.5:
        index = mutate(index, rng)
    files["model/model.safetensors.index.json"] = to_json(index)
    return FileCase("safetensors", files, "model")


def result_case(rng: random.Random) -> FileCase:
    document = mutate(result_seed(), rng, rng.randint(1, 4))
    return FileCase("result_json", {"result.json": to_json(document, indent=rng.choice((None, 2)))}, "result.json")


def _dataset_bytes(rng: random.Random) -> bytes:
    lines = [mutate(rng.choice(DATASET_LINES), rng) if rng.random() < 0.4 else rng.choice(DATASET_LINES)
             for _ in range(rng.randint(1, 6))]
    return b"\n".join(to_json(line) for line in lines) + b"\n"


def dataset_case(rng: random.Random) -> FileCase:
    return FileCase("dataset_jsonl", {"data.jsonl": _dataset_bytes(rng)}, "data.jsonl")


def bench_dataset_case(rng: random.Random) -> FileCase:
    lines = [{"text": line.get("prompt") or line.get("text") or "x"} for line in DATASET_LINES]
    document = [mutate(line, rng) if rng.random() < 0.5 else line for line in lines]
    data = b"\n".join(to_json(line) for line in document)
    if rng.random() < 0.2:
        data = rng.choice((b"plain text file\nwith two lines\n", "caf\u00e9 \U0001f600\n".encode(), b"\xff\xfe",
                           "\ud800".encode("utf-8", "surrogatepass")))
    return FileCase("dataset_bench", {"data.jsonl": data}, "data.jsonl")


# --- the surfaces added with load, report, the store and calibrate -------------------------------------

# /metrics pages with each engine's names (server_metrics.py's table), a few scrapes of one level.
METRICS_PAGES: tuple[str, ...] = (
    '# HELP vllm:num_requests_running Number of requests running.\n# TYPE vllm:num_requests_running gauge\n'
    'vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 1\n'
    'vllm:kv_cache_usage_perc{model_name="m"} 0.25\nvllm:prefix_cache_queries_total{model_name="m"} 1000\n'
    'vllm:prefix_cache_hits_total{model_name="m"} 250\nvllm:num_preemptions_total 0\n'
    'vllm:prompt_tokens_total 4000\nvllm:generation_tokens_total 800\n'
    'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 9\nvllm:e2e_request_latency_seconds_count 9\n',
    'sglang:num_running_reqs{name="m"} 5\nsglang:num_queue_reqs 1\nsglang:token_usage 0.25\n'
    'sglang:cache_hit_rate 0.4\nsglang:prompt_tokens_total 3000\nsglang:generation_tokens_total 1.5e3\n',
    "tgi_queue_size 6\ntgi_batch_current_size 4\n",
    "llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\nllamacpp:kv_cache_usage_ratio 0.1\n"
    "llamacpp:tokens_predicted_total 77\nllamacpp:prompt_tokens_total 300\n",
)
METRIC_VALUES = ("1e308", "-1e308", "1e35", "-5", "-0", "0", "NaN", "+Inf", "-Inf", "1" * 400, "0x10", "1e-320",
                 "9" * 5000, "", "1_000", "\u0661", "3 1700000000000", "2.5e3", "inf", "\x1b[31m")


def metrics_case(rng: random.Random) -> FileCase:
    """Scrapes of one /metrics page (before, during, after a level) with hostile values, names and lines."""
    page = rng.choice(METRICS_PAGES)
    scrapes = []
    for k in range(rng.randint(2, 4)):
        lines = page.splitlines()
        for _ in range(rng.randint(0, 4)):
            i = rng.randrange(len(lines))
            name = lines[i].rpartition(" ")[0]
            op = rng.random()
            if op < 0.5 and name:
                lines[i] = f"{name} {rng.choice(METRIC_VALUES)}"
            elif op < 0.7:
                lines.insert(i, lines[i].replace("}", ',engine="1"}', 1) if "}" in lines[i] else lines[i])
            elif op < 0.8:
                lines[i] = lines[i].replace(name.split("{")[0], rng.choice(("x" * 300, "vllm:\u202e", "a{b", "")), 1)
            elif op < 0.9:
                lines.insert(i, "# " + "x" * rng.choice((10, 100_000)))
            else:
                lines.insert(i, lines[i] * rng.choice((2, 50)))
        text = "\n".join(lines) + "\n"
        data = text.encode("utf-8", "surrogatepass")
        scrapes.append(mutate_bytes(data, rng) if rng.random() < 0.3 else data)
        if k == 0 and rng.random() < 0.1:
            scrapes[0] = rng.randbytes(rng.randint(0, 2000))
    files: dict[str, bytes | Special] = {f"metrics/{k}.txt": body for k, body in enumerate(scrapes)}
    return FileCase("metrics_body", files, "metrics")


TRACE_LINES: tuple[dict[str, Any], ...] = (
    {"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]},
    {"timestamp": 200, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]},
    {"timestamp": 200, "input_length": 300, "output_length": 2, "hash_ids": [4]},
    {"timestamp": 600, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]},
)


def trace_case(rng: random.Random) -> FileCase:
    """A Mooncake trace (JSON Lines), lines mutated or repeated."""
    lines = [mutate(line, rng) if rng.random() < 0.4 else line for line in TRACE_LINES]
    if rng.random() < 0.1:
        lines = lines * rng.choice((50, 400))
    data = b"\n".join(to_json(line) for line in lines) + b"\n"
    return FileCase("trace_jsonl", {"trace.jsonl": data}, "trace.jsonl", {"multi_turn": rng.random() < 0.5})


SHAREGPT: tuple[dict[str, Any], ...] = (
    {"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"},
                                  {"from": "human", "value": "how are you"}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "nobody asked"}]},
    {"id": "c", "messages": [{"role": "user", "content": "one question"}, {"role": "assistant", "content": "ok"},
                             {"role": "user", "content": [{"type": "text", "text": "a part"}]}]},
)


def sharegpt_case(rng: random.Random) -> FileCase:
    """A ShareGPT-style JSON list of conversations, mutated."""
    document = mutate(list(SHAREGPT), rng, rng.randint(1, 3))
    return FileCase("sharegpt_json", {"sharegpt.json": to_json(document)}, "sharegpt.json",
                    {"multi_turn": rng.random() < 0.5})


@cache
def report_seeds() -> tuple[tuple[str, Any], ...]:
    """Every kind of file `report` draws, as its command writes it (tests/report/html_samples.py)."""
    import tempfile

    from report.html_samples import write_all  # tests/ is on the path in the suite and the benchmark

    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-seeds-") as folder:
        return tuple((name, json.loads(path.read_text("utf-8"))) for name, path in write_all(Path(folder)).items())


def report_case(rng: random.Random) -> FileCase:
    name, document = rng.choice(report_seeds())
    document = mutate(document, rng, rng.choice((1, 1, 1, 2, 4)))
    return FileCase("report_doc", {f"{name}.json": to_json(document, indent=rng.choice((None, 1)))}, f"{name}.json")


@cache
def compare_seeds() -> tuple[tuple[dict[str, Any], dict[str, Any]], ...]:
    """Pairs `compare` takes: two machines' load sweeps, and one bench result against a re-run of it."""
    from report.html_samples import load_sweep
    from report.samples import bench_demo

    bench = bench_demo()
    again = bench.model_copy(update={"name": "again"})
    return ((json.loads(load_sweep("load-a100", 1.0).model_dump_json()),
             json.loads(load_sweep("load-h100", 0.55).model_dump_json())),
            (json.loads(bench.model_dump_json()), json.loads(again.model_dump_json())))


def compare_case(rng: random.Random) -> FileCase:
    first, second = rng.choice(compare_seeds())
    if rng.random() < 0.8:
        second = mutate(second, rng, rng.randint(1, 3))
    if rng.random() < 0.3:
        first = mutate(first, rng)
    return FileCase("compare_pair", {"pair/a.json": to_json(first), "pair/b.json": to_json(second)}, "pair",
                    {"allow_diff": rng.random() < 0.5})


@cache
def _zlib_bomb() -> tuple[bytes, str]:
    """600 MiB of zeros (past the 512 MiB a result may hold) in under 1 MiB, and the SHA-256 of the zeros:
    made a piece at a time, once per machine (kept in the temporary folder; it takes seconds)."""
    import tempfile
    import zlib

    kept = Path(tempfile.gettempdir()) / "gpuscout-fuzz-zlib-bomb-600m"
    with contextlib.suppress(OSError, ValueError):
        digest, packed = kept.read_bytes().split(b"\n", 1)
        return packed, digest.decode()
    packer, zeros, sha = zlib.compressobj(9), bytes(1 << 20), hashlib.sha256()
    parts = []
    for _ in range(600):
        parts.append(packer.compress(zeros))
        sha.update(zeros)
    packed = b"".join(parts) + packer.flush()
    with contextlib.suppress(OSError):
        kept.write_bytes(sha.hexdigest().encode() + b"\n" + packed)
    return packed, sha.hexdigest()


def store_case(rng: random.Random) -> FileCase:
    """A results store (SQLite) holding two runs, then damaged: rows hand-edited, or bytes flipped."""
    import sqlite3
    import tempfile

    from gpuscout.results.database import record

    with tempfile.TemporaryDirectory(prefix="gpuscout-fuzz-store-") as folder:
        path = Path(folder) / "results.sqlite"
        seed = result_seed()
        record(path, "bench", seed, now=datetime(2026, 11, 2, tzinfo=UTC))
        second = mutate(seed, rng) if rng.random() < 0.5 else seed
        try:
            record(path, "bench", second, now=datetime(2026, 11, 3, tzinfo=UTC))
        except Exception:  # not a run any command stores (NaN, a 5,000-digit integer …)
            record(path, "bench", seed, now=datetime(2026, 11, 3, tzinfo=UTC))
        edits = rng.randint(0, 3)
        with sqlite3.connect(path) as db:
            for _ in range(edits):
                with contextlib.suppress(sqlite3.Error):  # an edit SQLite itself refuses is no input
                    _edit_store(db, rng, seed)
        db.close()
        data = path.read_bytes()
    if rng.random() < 0.3:
        data = mutate_bytes(data, rng)
    return FileCase("store_file", {"results.sqlite": data}, "results.sqlite", {"edits": edits})


def _edit_store(db: Any, rng: random.Random, seed: dict[str, Any]) -> None:
    """One hand edit of a store: a payload, a column, an id, the encoding, the schema, a row."""
    import zlib

    op = rng.randrange(7)
    if op in (0, 1):  # a hand-edited payload, its checksum mostly made to match (as an editor would)
        run_id, body = (2, to_json(mutate(seed, rng, rng.randint(1, 3)))) if op == 0 else (
            1, rng.choice((b"", b"[]", b"1e999", b'{"kind": 5}', b"null", b"\xff\xfe")))
        packed, digest = zlib.compress(body), hashlib.sha256(body).hexdigest()
        if op == 1 and rng.random() < 0.3:
            packed, digest = rng.choice((_zlib_bomb(), (b"not zlib", digest)))
        db.execute("UPDATE payloads SET body = ? WHERE run_id = ?", (packed, run_id))
        if rng.random() < 0.8:
            db.execute("UPDATE runs SET payload_sha256 = ? WHERE id = ?", (digest, run_id))
    elif op == 2:
        column = rng.choice(("kind", "result_kind", "created_at", "recorded_at", "job", "machine", "name",
                             "summary", "complete", "gpuscout_version", "payload_bytes", "payload_sha256"))
        db.execute(f"UPDATE runs SET {column} = ? WHERE id = 1",
                   (rng.choice((None, -1, 2**63 - 1, 1e308, "", "x" * 5000, "\x1b[2J", "2026-13-45",
                                b"\xff\xfe", "nan")),))
    elif op == 3:
        db.execute("UPDATE runs SET id = ? WHERE id = 2", (rng.choice((2**63 - 1, -5, 0)),))
    elif op == 4:
        db.execute("UPDATE payloads SET encoding = ? WHERE run_id = 1", (rng.choice(("gzip", "", None)),))
    elif op == 5:
        db.execute(rng.choice(("DROP TABLE payloads", "DELETE FROM payloads", "PRAGMA user_version = 99",
                               "CREATE TABLE extra (x)", "ALTER TABLE runs RENAME TO old")))
    else:
        db.execute("DELETE FROM runs WHERE id = 2")


def calibrate_case(rng: random.Random) -> FileCase:
    """Bench results that `calibrate` fits to: one or two, with hostile times and labels."""
    files: dict[str, bytes | Special] = {}
    for k in range(rng.choice((1, 1, 2))):
        document = mutate(result_seed(), rng, rng.randint(1, 3)) if rng.random() < 0.8 else result_seed()
        files[f"runs/{k}.json"] = to_json(document)
    return FileCase("calibrate_inputs", files, "runs")


@cache
def job_kind_seeds(kind: str) -> tuple[dict[str, Any], ...]:
    """The shipped examples of co-served (`[[co_served]]`) or video jobs."""
    return tuple(j for j in job_seeds() if (kind == "video" and j.get("kind") == "video")
                 or (kind == "coserved" and j.get("co_served")))


def coserved_case(rng: random.Random) -> FileCase:
    document = mutate(rng.choice(job_kind_seeds("coserved")), rng)
    return FileCase("coserved_job", {"job.toml": to_toml(document) if isinstance(document, dict) else b"x = 1"},
                    "job.toml")


def video_case(rng: random.Random) -> FileCase:
    document = mutate(rng.choice(job_kind_seeds("video")), rng)
    return FileCase("video_job", {"job.toml": to_toml(document) if isinstance(document, dict) else b"x = 1"},
                    "job.toml")


STRUCTURED: dict[str, Callable[[random.Random], FileCase]] = {
    "job": job_case, "price_sheet": price_case, "vms_csv": vms_case, "config_json": config_case,
    "safetensors": safetensors_case, "result_json": result_case, "dataset_jsonl": dataset_case,
    "dataset_bench": bench_dataset_case, "metrics_body": metrics_case, "trace_jsonl": trace_case,
    "sharegpt_json": sharegpt_case, "report_doc": report_case, "compare_pair": compare_case, "store_file": store_case,
    "calibrate_inputs": calibrate_case, "coserved_job": coserved_case, "video_job": video_case,
}

# Size caps the readers document (docs/design.md §4.10); a sparse file one byte over each must be refused
# from its size alone, without reading it.
SIZE_CAPS = {"job": 2**20, "price_sheet": 4 * 2**20, "vms_csv": 256 * 2**20, "config_json": 16 * 2**20,
             "safetensors": 16 * 2**20, "result_json": 512 * 2**20, "dataset_jsonl": 2**30, "dataset_bench": 2**30,
             "metrics_body": 16 * 2**20, "trace_jsonl": 2**30, "sharegpt_json": 2**30, "report_doc": 512 * 2**20,
             "compare_pair": 512 * 2**20, "store_file": 0, "calibrate_inputs": 512 * 2**20, "coserved_job": 2**20,
             "video_job": 2**20}


SPECIAL_KINDS = ("fifo", "dir", "devzero", "devnull", "sparse", "empty", "missing", "symlink")


def special_case(parser: str, rng: random.Random, kind: str = "") -> FileCase:
    """A file that is no document at all: a FIFO, a folder, /dev/zero, a device, a huge sparse file."""
    entry = STRUCTURED[parser](random.Random(0)).entry
    kind = kind or rng.choice(SPECIAL_KINDS)
    match kind:
        case "fifo" | "dir" | "devnull":
            files: dict[str, bytes | Special] = {entry: Special(kind)}
        case "devzero":
            files = {entry: Special("symlink", "/dev/zero")}
        case "sparse":
            files = {entry: Special("sparse", size=SIZE_CAPS[parser] + 1)}
        case "empty":
            files = {entry: b""}
        case "missing":
            files = {}
        case _:
            real = STRUCTURED[parser](rng)
            files = {**{f"real/{k}": v for k, v in real.files.items()}, entry: Special("symlink", f"real/{real.entry}")}
            return FileCase(parser, files, entry, real.options, "symlink to a real input")
    if parser == "safetensors" and entry == "model":
        files = {f"model/{k}" if k != entry else k: v for k, v in files.items()}
    return FileCase(parser, files, entry, {"cloud": "aws"} if parser == "vms_csv" else {}, kind)


def generate(parser: str, rng: random.Random) -> FileCase:
    """One input for `parser`: mostly structure-aware, some byte-mutated, some raw or special."""
    roll = rng.random()
    case = STRUCTURED[parser](rng)
    if roll < 0.55:
        case.label = "structured"
        return case
    if roll < 0.85:
        name = next(k for k, v in case.files.items() if isinstance(v, bytes) and not k.startswith("outside"))
        data = case.files[name]
        assert isinstance(data, bytes)
        case.files[name] = mutate_bytes(data, rng)
        case.label = "bytes"
        return case
    if roll < 0.97:
        case.files = {case.entry if case.entry != "model" else "model/model.safetensors":
                      rng.randbytes(rng.randint(0, 4000)) if rng.random() < 0.5 else
                      bytes(rng.choice(b" \n\t[]{}\"'=,.:#-+0123456789eEnaifINF") for _ in range(rng.randint(0, 4000)))}
        case.label = "raw"
        return case
    return special_case(parser, rng)


# --- laying a case out on disk ----------------------------------------------------------------------


def lay_out(case: FileCase, folder: Path) -> Path:
    """Create the case's files under `folder` (which must be empty) and return the entry's path."""
    for name, content in sorted(case.files.items(), key=lambda item: isinstance(item[1], Special)):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
            continue
        match content.kind:
            case "fifo":
                os.mkfifo(path)
            case "dir":
                path.mkdir(exist_ok=True)
            case "devnull":
                make_device(path)
            case "symlink":
                path.symlink_to(content.target)
            case "sparse":
                with path.open("wb") as handle:
                    handle.truncate(content.size)
    return folder / case.entry


def make_device(path: Path) -> None:
    """A character device like /dev/null (as root), else a FIFO stands in for it."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        os.mkfifo(path)
