"""Replaying a request trace in the public Mooncake format (docs/measurement.md §2.11).

One JSON object a line (kvcache-ai/Mooncake `FAST25-release/traces`, `mooncake_trace.jsonl`):

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 1213, …]}

* `timestamp`: arrival in milliseconds since the trace's first request (several may share one);
* `input_length`, `output_length`: prompt and output tokens;
* `hash_ids`: one id per block of `block_size` prompt tokens (512 in the published traces); two
  requests whose lists start with the same ids share that prefix, which is what a prefix cache
  reuses. The last block may be partial (input_length is not a multiple of the block size).

Each distinct id becomes one seeded block of text of `block_size` tokens (exact with a tokenizer,
words otherwise), the same text wherever the id appears, so requests share exactly the prefixes
the trace says they share; the prompt is its blocks joined and cut to `input_length` tokens. The
client sends request i at timestamp_i / 1000 / speedup seconds after t0 (`schedule.send_offsets`),
so `--speedup 2` replays the trace at twice its rate.
"""

from __future__ import annotations

import random
from pathlib import Path

from gpuscout.errors import SpecError
from gpuscout.loadgen.schedule import MAX_REQUESTS_PER_LEVEL
from gpuscout.loadgen.workload import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, Prompt, Workload, count_tokens, text_maker
from gpuscout.userfile import MAX_DATASET_BYTES, parse_user_json, shown, user_lines

BLOCK_TOKENS = 512  # tokens per hash id in the Mooncake traces (their README and AIPerf's loader)
# The latest arrival a replay waits for: 7 days, the span of the longest public LLM serving trace
# (Azure LLM inference trace 2024, Azure/AzurePublicDataset, one week); a later one is a broken line.
MAX_TIMESTAMP_MS = 7 * 86_400_000
FIX = 'Write one JSON object a line: {"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}.'


def trace_workload(path: Path, *, tokenizer_path: str | None, seed: int, block_tokens: int = BLOCK_TOKENS,
                   limit: int | None = None) -> Workload:
    """The trace's requests in arrival order, prompts built block by block from their hash ids."""
    rows = read_trace(path, limit)
    make = text_maker(tokenizer_path)
    blocks: dict[int, list[str]] = {}
    uses: dict[int, int] = {}  # requests each block appears in: one that appears once is no shared prefix
    for row in rows:
        for b in set(row[3]):
            uses[b] = uses.get(b, 0) + 1
    prompts: list[Prompt] = []
    for timestamp_ms, input_len, output_len, ids in rows:
        words = []
        for block in ids:
            if block not in blocks:  # one seeded text per id: the same wherever it appears
                blocks[block] = make(block_tokens, random.Random(f"gpuscout-trace-{seed}-{block}")).split(" ")
            words += blocks[block]
        if len(words) < input_len:  # a trace line with fewer blocks than its length: its own tail
            words += make(input_len - len(words), random.Random(f"gpuscout-tail-{seed}-{len(prompts)}")).split(" ")
        text = " ".join(words[:input_len]) if tokenizer_path is None else _cut(" ".join(words), input_len,
                                                                                tokenizer_path)
        shared = min(input_len, block_tokens * sum(1 for b in ids if uses[b] > 1))
        prompts.append(Prompt(text=text, prompt_tokens=input_len, output_tokens=output_len, prefix_tokens=shared,
                              arrival_s=timestamp_ms / 1000))
    span = rows[-1][0] / 1000 - rows[0][0] / 1000
    return Workload(prompts=tuple(prompts), source=str(path), seed=seed, tokenizer=tokenizer_path,
                    description=f"{len(prompts)} requests over {span:.1f} s from the Mooncake trace {path} "
                                f"({len(blocks)} distinct {block_tokens}-token blocks), seed {seed}")


def read_trace(path: Path, limit: int | None = None) -> list[tuple[float, int, int, tuple[int, ...]]]:
    """(timestamp_ms, input_length, output_length, hash_ids) of each line, sorted by time.

    The file is streamed and read only as far as needed: `limit` requests, and one line past the most a
    level replays (`MAX_REQUESTS_PER_LEVEL`) is refused at once, before any prompt is built."""
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    for number, line in user_lines(path, "trace", FIX, max_bytes=MAX_DATASET_BYTES):
        if not line.strip():
            continue
        if limit is None and len(rows) >= MAX_REQUESTS_PER_LEVEL:
            raise SpecError(f"{path} holds more than {MAX_REQUESTS_PER_LEVEL:,} requests.",
                            f"A level replays at most {MAX_REQUESTS_PER_LEVEL:,} requests (each one's record is kept "
                            "in memory).", f"Pass --requests N (at most {MAX_REQUESTS_PER_LEVEL:,}) to replay the "
                            "trace's first N lines, or split the trace.")
        entry = parse_user_json(line, f"{path} line {number}", f"A trace is JSON Lines. {FIX}")
        rows.append(_row(entry, path, number))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise SpecError(f"{path} has no requests.", "The trace file is empty.", FIX)
    rows.sort(key=lambda r: r[0])
    return rows


def _row(entry: object, path: Path, number: int) -> tuple[float, int, int, tuple[int, ...]]:
    where = f"{path} line {number}"
    if not isinstance(entry, dict):
        raise SpecError(f"{where} is not a JSON object.", "Each trace line describes one request.", FIX)
    stamp, inp, out = entry.get("timestamp"), entry.get("input_length"), entry.get("output_length")
    ids = entry.get("hash_ids", [])
    if not _number(stamp) or not 0 <= stamp <= MAX_TIMESTAMP_MS:  # type: ignore[operator]
        raise SpecError(f"{where}: timestamp {shown(stamp)} is not a time in ms from 0 to {MAX_TIMESTAMP_MS:,} "
                        "(7 days).",
                        "It is the request's arrival, and the replay waits for it: the longest public LLM serving "
                        "trace (Azure's 2024 week-long one) spans 7 days.", FIX)
    for name, value, top in (("input_length", inp, MAX_PROMPT_TOKENS), ("output_length", out, MAX_OUTPUT_TOKENS)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top):
            raise SpecError(f"{where}: {name} {shown(value)} is not a whole number of tokens from 1 to {top:,}.",
                            "Each request needs its prompt and output lengths.", FIX)
    if not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        raise SpecError(f"{where}: hash_ids is not a list of integers.", "Each id names one block of the prompt.", FIX)
    return float(stamp), int(inp), int(out), tuple(ids)  # type: ignore[arg-type]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cut(text: str, tokens: int, tokenizer_path: str) -> str:
    """`text` cut to `tokens` tokens of the tokenizer (blocks joined can merge at their seams)."""
    words = text.split(" ")
    counted = count_tokens(text, tokenizer_path) or 0
    while counted > tokens and words:
        words = words[: max(1, int(len(words) * tokens / counted))] if counted > tokens * 1.05 else words[:-1]
        counted = count_tokens(" ".join(words), tokenizer_path) or 0
    return " ".join(words)
