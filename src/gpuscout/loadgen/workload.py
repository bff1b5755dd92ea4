"""The requests a load test sends: synthetic prompts of exact token lengths, or a JSONL dataset.

Synthetic prompts are built from random vocabulary tokens (seeded), so no two prompts share a prefix
and a server's prefix cache cannot make one request cheaper than another. With a local tokenizer
(`--tokenizer PATH`) every prompt has exactly the requested number of tokens (special tokens such as
BOS not counted; a chat template adds its own). Without one, gpuscout uses common English words and
assumes one word ≈ one token (true for these short words in the Llama, Mistral and GPT BPE
vocabularies give or take a few percent); `prompt_tokens` is then the target, and the workload's
description says "approximate".

Lengths follow a seeded distribution around the target: fixed, uniform(target ± spread) or
normal(target, σ = spread), each clipped to at least one token.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from gpuscout.errors import MissingDependencyError, SpecError
from gpuscout.frozen import Frozen
from gpuscout.outfile import write_atomic
from gpuscout.stats import reservoir
from gpuscout.userfile import MAX_DATASET_BYTES, parse_user_json, replace_surrogates, user_lines

Distribution = Literal["fixed", "uniform", "normal"]

# The bounds on what a workload may ask for, checked in `check_sizes` before any prompt is built:
# * prompt tokens: 10M, the longest context window an open model claims (Llama 4 Scout, Meta's model card);
# * output tokens: 1M, past any served model's context window;
# * all prompts together: 100M tokens, ~0.5 GB of text at ~5 bytes a token (and as much again in the
#   workload file): a few GiB of memory at most while it is built, where an unchecked --prompt-tokens took 9 GB
#   in two minutes. 100,000 requests of 1,000 tokens fit.
MAX_PROMPT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000
MAX_WORKLOAD_TOKENS = 100_000_000

# Exact-length search: decode → re-encode can merge or split tokens at the seams, so the text is
# trimmed or padded and checked again. It converges in one or two rounds for BPE/WordPiece/Unigram
# vocabularies; the bound only stops a pathological tokenizer from looping forever.
_MAX_ROUNDS = 64

# Short, frequent English words: each is a single token in common LLM vocabularies.
_WORD_TEXT = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had "
    "not but what all were when we there can an your which their said if do will each about how up "
    "out them then she many some so these would other into has more her two like him see time could "
    "no make than first been its who now people my made over did down only way find use may water "
    "long little very after words called just where most know get through back much before go good "
    "new write our used me man too any day same right look think also around another came come work "
    "three word must because does part even place well such here take why things help put years "
    "different away again off went old number great tell men say small every found still between name "
    "should home big give air line set own under read last never us left end along while might next "
    "sound below saw something thought both few those always looked show large often together asked house"
)
_WORDS = tuple(_WORD_TEXT.split())


def synthetic_vocabulary() -> tuple[str, ...]:
    """The words synthetic prompts are drawn from (without --tokenizer): a test engine's vocabulary."""
    return _WORDS


class Prompt(Frozen):
    text: str  # the prompt (completions) or the user message (chat)
    prompt_tokens: int  # by the tokenizer when given, else the target count (approximate)
    output_tokens: int  # requested max_tokens (with ignore_eos-style settings)
    prefix_tokens: int = 0  # leading tokens shared with other prompts (a system prompt, a document)
    group: int | None = None  # the shared prefix it carries (prompts of one group share it)
    arrival_s: float | None = None  # a trace's arrival time, s from its first request


class Workload(Frozen):
    prompts: tuple[Prompt, ...]
    source: str  # "synthetic" or the dataset path
    seed: int
    tokenizer: str | None  # path of the local tokenizer used, if any
    description: str  # e.g. "prompt tokens normal(512, 64), output 128, seed 0"
    # Multi-turn: each conversation's turns, as indices into `prompts` (their user messages, in order).
    conversations: tuple[tuple[int, ...], ...] = ()


def synthetic_workload(n: int, *, prompt_tokens: int, output_tokens: int, distribution: Distribution = "fixed",
                       spread: int = 0, tokenizer_path: str | None = None, seed: int = 0) -> Workload:
    """`n` random prompts whose lengths follow `distribution` around `prompt_tokens`."""
    check_sizes(n=n, prompt_tokens=prompt_tokens, output_tokens=output_tokens, spread=spread)
    lengths = prompt_lengths(n, prompt_tokens, distribution, spread, seed)
    # A second, independent stream for the text, so changing the lengths does not reshuffle words.
    text_rng = random.Random(f"gpuscout-text-{seed}")
    if tokenizer_path is None:
        prompts = [Prompt(text=" ".join(text_rng.choices(_WORDS, k=k)), prompt_tokens=k, output_tokens=output_tokens)
                   for k in lengths]
        counted = "approximate: one word ≈ one token, no tokenizer"
    else:
        tokenizer = _load_tokenizer(tokenizer_path)
        pool = _vocabulary_pool(tokenizer)
        prompts = [Prompt(text=_exact_text(tokenizer, pool, k, text_rng), prompt_tokens=k,
                          output_tokens=output_tokens) for k in lengths]
        counted = f"exact, tokenizer {tokenizer_path}"
    shape = {"fixed": f"fixed({prompt_tokens})", "uniform": f"uniform({prompt_tokens} ± {spread})",
             "normal": f"normal({prompt_tokens}, {spread})"}[distribution]
    return Workload(prompts=tuple(prompts), source="synthetic", seed=seed, tokenizer=tokenizer_path,
                    description=f"{n} prompts, prompt tokens {shape} ({counted}), output {output_tokens}, seed {seed}")


def prompt_lengths(n: int, target: int, distribution: Distribution, spread: int, seed: int) -> list[int]:
    """Seeded prompt lengths: fixed, uniform in [target − spread, target + spread], or normal(σ = spread)."""
    rng = random.Random(seed)
    match distribution:
        case "fixed":
            return [target] * n
        case "uniform":
            return [max(1, rng.randint(target - spread, target + spread)) for _ in range(n)]
        case "normal":  # the tail is cut at target + spread·6, so the sizes checked above bound every prompt
            return [min(max(1, round(rng.gauss(target, spread))), target + 6 * spread) for _ in range(n)]
    raise SpecError(f"Unknown prompt length distribution {distribution!r}.",  # pragma: no cover - typed
                    "gpuscout draws prompt lengths from fixed, uniform or normal.",
                    "Pass --prompt-dist fixed, uniform or normal.")


def dataset_workload(path: Path, *, n: int | None, output_tokens: int, tokenizer_path: str | None,
                     seed: int, at_most: int | None = None) -> Workload:
    """Prompts from a JSONL file, one object a line with "prompt", "text" or chat "messages".

    The file is streamed: every line is checked, and at most `n` (or `at_most`) of its entries are kept, a
    seeded uniform sample (reservoir sampling, Vitter's Algorithm R) in a seeded random order, so a run of
    100 requests holds 100 prompts whatever the file's size. A file with fewer entries gives each once,
    shuffled; `n` larger than that cycles through further seeded shuffles to `n` prompts, while `at_most`
    (and `n = None`) leaves the cycling to the client, which reuses prompts when it sends more requests.
    For "messages" the first user message is the prompt (as vLLM's ShareGPT loader takes the first human turn).
    """
    keep = n if n is not None else at_most
    if keep is not None:
        check_sizes(n=keep, prompt_tokens=1, output_tokens=output_tokens, spread=0)
    rng = random.Random(seed)
    chosen, total, repaired = _sample_jsonl(path, keep, rng)
    texts = list(chosen)
    while n is not None and len(chosen) < n:
        rng.shuffle(texts)
        chosen += texts[: n - len(chosen)]
    tokenizer = _load_tokenizer(tokenizer_path) if tokenizer_path else None
    prompts = tuple(Prompt(text=text, prompt_tokens=_count(tokenizer, text) if tokenizer else len(text.split()),
                           output_tokens=output_tokens) for text in chosen)
    counted = f"tokenizer {tokenizer_path}" if tokenizer_path else "approximate: words, no tokenizer"
    mean = sum(p.prompt_tokens for p in prompts) / len(prompts)
    note = f"; {repaired} with broken surrogate escapes repaired to U+FFFD" if repaired else ""
    how = "from" if len(prompts) == total else f"sampled from the {total:,} of" if len(prompts) < total \
        else f"cycling through the {total:,} of"
    taken = f"{len(prompts)} prompts {how}"
    return Workload(prompts=prompts, source=str(path), seed=seed, tokenizer=tokenizer_path,
                    description=f"{taken} {path} (mean {mean:.0f} prompt tokens, {counted}{note}), "
                                f"output {output_tokens}, seed {seed}")


def save_workload(workload: Workload, path: Path) -> None:
    """Write the workload as JSON atomically, next to the result that used it."""
    write_atomic(path, workload.model_dump_json(indent=2), what="workload file")


def text_maker(tokenizer_path: str | None) -> Callable[[int, random.Random], str]:
    """A function (k, rng) → text of k tokens: exact by the tokenizer when given, else k common words."""
    if tokenizer_path is None:
        return lambda k, rng: " ".join(rng.choices(_WORDS, k=k))
    tokenizer = _load_tokenizer(tokenizer_path)
    pool = _vocabulary_pool(tokenizer)
    return lambda k, rng: _exact_text(tokenizer, pool, k, rng)


def count_tokens(text: str, tokenizer_path: str | None) -> int | None:
    """Tokens in `text` by the local tokenizer (special tokens not added); None without a tokenizer."""
    if tokenizer_path is None:
        return None
    return _count(_load_tokenizer(tokenizer_path), text)


def check_sizes(*, n: int, prompt_tokens: int, output_tokens: int, spread: int = 0) -> None:
    """Counts and lengths within their bounds (above), each refused with the bound it broke."""
    for name, value, low, top in (("requests", n, 1, None), ("prompt tokens", prompt_tokens, 1, MAX_PROMPT_TOKENS),
                                  ("output tokens", output_tokens, 1, MAX_OUTPUT_TOKENS),
                                  ("prompt spread", spread, 0, MAX_PROMPT_TOKENS)):
        if value < low:
            raise SpecError(f"The number of {name} is {value}.",
                            f"A workload needs {'at least one' if low else 'a non-negative number'} of {name}.",
                            f"Pass a value ≥ {low}.")
        if top is not None and value > top:
            raise SpecError(f"The number of {name} is {value:,}, more than the {top:,} gpuscout builds.",
                            "No served model takes a longer prompt or answer, and building it would only fill "
                            "memory.", f"Pass at most {top:,}.")
    total = n * (prompt_tokens + spread)
    if total > MAX_WORKLOAD_TOKENS:
        raise SpecError(f"{n:,} prompts of up to {prompt_tokens + spread:,} tokens are {total:,} tokens to build, "
                        f"more than the {MAX_WORKLOAD_TOKENS:,} a workload may hold.",
                        "Every prompt is built in memory and written beside the result before the run.",
                        "Ask for fewer requests (--requests) or shorter prompts (--prompt-tokens, --prompt-spread).")


@lru_cache(maxsize=4)
def _load_tokenizer(path: str) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingDependencyError("--tokenizer needs the transformers package.",
                                     "Exact token counts come from the model's own tokenizer.",
                                     "pip install transformers (or drop --tokenizer for approximate counts).") from None
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise SpecError(f"Cannot load a tokenizer from {path}.", str(exc).splitlines()[0] if str(exc) else "",
                        "Point --tokenizer at a local folder with tokenizer.json / tokenizer_config.json "
                        "(e.g. a downloaded model folder); gpuscout does not download tokenizers.") from None


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def _vocabulary_pool(tokenizer: Any) -> list[int]:
    """Ordinary token ids: special tokens, byte-fallback pieces (<0x0A>) and tokens that decode to
    part of a UTF-8 character (byte-level BPE; they decode to U+FFFD, which re-encodes as three
    tokens and keeps the length search from settling) left out."""
    special = set(tokenizer.all_special_ids)
    candidates = sorted(i for token, i in tokenizer.get_vocab().items()
                        if i not in special and not (token.startswith("<") and token.endswith(">")))
    decoded = tokenizer.batch_decode([[i] for i in candidates])
    pool = [i for i, text in zip(candidates, decoded, strict=True) if text.strip() and "\ufffd" not in text]
    if not pool:
        raise SpecError("The tokenizer has no ordinary tokens.", "Synthetic prompts are sampled from its vocabulary.",
                        "Use the model's own tokenizer folder.")
    return pool


def _exact_text(tokenizer: Any, pool: list[int], target: int, rng: random.Random) -> str:
    """Text that re-encodes to exactly `target` tokens.

    Sample `target` ids, decode, re-encode; decoding can merge or split tokens at the seams, so
    repeat: too many → keep the first `target` ids of the re-encoding and decode again (swapping the
    last id for a fresh one when that changes nothing); too few → append freshly sampled ids. Each
    round the count moves towards the target; stop when exact, give up after `_MAX_ROUNDS`.
    """
    ids = rng.choices(pool, k=target)
    for _ in range(_MAX_ROUNDS):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == target:
            return str(text)
        if len(encoded) < target:
            ids = encoded + rng.choices(pool, k=target - len(encoded))
        else:  # a trim that changes nothing would loop; then swap the last token for a fresh one
            trimmed = encoded[:target]
            ids = trimmed if trimmed != ids else [*trimmed[:-1], *rng.choices(pool, k=1)]
    raise SpecError(f"Could not build a prompt of exactly {target} tokens.",
                    f"Decoding and re-encoding with this tokenizer did not settle in {_MAX_ROUNDS} rounds.",
                    "Use a different --prompt-tokens, or drop --tokenizer for approximate lengths.")


def _sample_jsonl(path: Path, n: int | None, rng: random.Random) -> tuple[list[str], int, int]:
    """(`n` prompts sampled from a JSONL dataset in a random order, the entries it holds, how many of the kept
    ones had unpaired surrogates replaced).

    The file is read through gpuscout.userfile, line by line: a regular file of at most 1 GiB of UTF-8,
    each line nested at most 64 levels. Other fields may hold anything (NaN included); only the prompt is
    used. A prompt with an unpaired surrogate escape (half of an emoji, common in scraped chat logs) gets
    U+FFFD in its place: it could not be sent as UTF-8, and one broken character should not stop a load
    test of a large dataset.
    """
    fix = 'Write one JSON object a line: {"prompt": "..."}, {"text": "..."} or {"messages": [{"role": "user", ...}]}.'

    def prompts() -> Iterator[str]:
        for number, line in user_lines(path, "dataset", fix, max_bytes=MAX_DATASET_BYTES):
            if line.strip():
                entry = parse_user_json(line, f"{path} line {number}", "A dataset is JSON Lines: one JSON object "
                                        f"on each line. {fix}", finite=False, surrogates=True)
                yield _entry_text(entry, path, number, fix)

    kept, total = reservoir(prompts(), n, rng)
    if not kept:
        raise SpecError(f"{path} has no prompts.", "The dataset file is empty.", fix)
    rng.shuffle(kept)
    clean = [replace_surrogates(p) for p in kept]
    return clean, total, sum(c != p for c, p in zip(clean, kept, strict=True))


def _entry_text(entry: object, path: Path, number: int, fix: str) -> str:
    """The line's prompt: "prompt", "text", or the first user message; blank text is no prompt."""
    if isinstance(entry, dict):
        for key in ("prompt", "text"):
            if isinstance(entry.get(key), str) and entry[key].strip():
                return str(entry[key])
        messages = entry.get("messages")
        if isinstance(messages, list):
            for message in messages:
                if isinstance(message, dict) and message.get("role") == "user":
                    content = _message_text(message.get("content"))
                    if content.strip():
                        return content
    raise SpecError(f"{path} line {number} has no prompt.",
                    'Each line needs a non-blank "prompt" or "text" string, or "messages" with a user message.', fix)


def _message_text(content: object) -> str:
    """A chat message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str))
    return ""
