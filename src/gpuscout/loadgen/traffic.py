"""Workloads shaped like production traffic: shared prefixes, multi-turn conversations, ShareGPT files.

* **Shared prefixes** (`shared_prefix_workload`): `groups` prefixes, each the first
  round(`prefix_share` × prompt_tokens) tokens of every prompt in its group (a system prompt,
  few-shot examples, a RAG document), the rest of each prompt its own. Requests take the groups in
  turn (request i: group i mod groups), so each group's first request meets a cold cache and the
  others can hit it; vLLM's and SGLang's benchmarks build their shared-prefix datasets the same way
  (`prefix_repetition`, `generated-shared-prefix`). `unshared=True` builds the same lengths with
  every prefix its own: the control a cache saving is measured against.
* **Conversations** (`conversation_workload`): `conversations` × `turns` user messages of
  `prompt_tokens` each; the client sends each turn with the history so far (its own earlier
  messages and the server's actual answers), so the prompt grows turn by turn (`conversation`).
* **ShareGPT** (`sharegpt_workload`): a local JSON file in the ShareGPT layout, a list of
  {"conversations": [{"from": "human" | "gpt", "value": …}, …]} (also "messages" with "role" /
  "content"): the human turns of each conversation, as single prompts (its first human turn, as
  vLLM's ShareGPT loader does) or as multi-turn conversations.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gpuscout.errors import SpecError
from gpuscout.loadgen.workload import Prompt, Workload, check_sizes, count_tokens, text_maker
from gpuscout.stats import reservoir
from gpuscout.userfile import MAX_DATASET_BYTES, replace_surrogates, user_json_items

MAX_TURNS = 1000


def shared_prefix_workload(n: int, *, prompt_tokens: int, output_tokens: int, prefix_share: float, groups: int,
                           tokenizer_path: str | None = None, seed: int = 0, unshared: bool = False) -> Workload:
    """`n` prompts of `prompt_tokens`, each opening with its group's shared prefix (or, `unshared`, its own)."""
    _check(n=n, prompt_tokens=prompt_tokens, output_tokens=output_tokens, groups=groups, share=prefix_share)
    make = text_maker(tokenizer_path)
    prefix_len = round(prefix_share * prompt_tokens)
    rng = random.Random(f"gpuscout-prefix-{seed}")
    prefixes = [make(prefix_len, rng) if prefix_len else "" for _ in range(groups)]
    prompts = []
    for i in range(n):
        group = i % groups
        prefix = make(prefix_len, rng) if unshared and prefix_len else prefixes[group]
        text = (prefix + " " + make(prompt_tokens - prefix_len, rng)).strip() if prompt_tokens > prefix_len else prefix
        counted = count_tokens(text, tokenizer_path) if tokenizer_path else prompt_tokens
        prompts.append(Prompt(text=text, prompt_tokens=counted or prompt_tokens, output_tokens=output_tokens,
                              prefix_tokens=0 if unshared else prefix_len, group=None if unshared else group))
    how = "each prefix unshared (control)" if unshared else f"{groups} shared prefix(es)"
    return Workload(prompts=tuple(prompts), source="synthetic", seed=seed, tokenizer=tokenizer_path,
                    description=f"{n} prompts of {prompt_tokens} tokens, the first {prefix_len} ({prefix_share:.0%}) "
                                f"from {how}, output {output_tokens}, seed {seed}")


def conversation_workload(conversations: int, *, turns: int, prompt_tokens: int, output_tokens: int,
                          tokenizer_path: str | None = None, seed: int = 0) -> Workload:
    """`conversations` × `turns` synthetic user messages; turn k is sent with the k − 1 before it."""
    if not 1 <= turns <= MAX_TURNS:
        raise SpecError(f"{turns} turns per conversation.", f"A conversation has 1 to {MAX_TURNS} turns.",
                        "Pass --turns between 1 and 1000.")
    _check(n=conversations * turns, prompt_tokens=prompt_tokens, output_tokens=output_tokens, groups=1, share=0.0)
    make = text_maker(tokenizer_path)
    rng = random.Random(f"gpuscout-conversation-{seed}")
    prompts = [Prompt(text=make(prompt_tokens, rng), prompt_tokens=prompt_tokens, output_tokens=output_tokens)
               for _ in range(conversations * turns)]
    order = tuple(tuple(range(c * turns, (c + 1) * turns)) for c in range(conversations))
    return Workload(prompts=tuple(prompts), source="synthetic", seed=seed, tokenizer=tokenizer_path,
                    conversations=order,
                    description=f"{conversations} conversations × {turns} turns, {prompt_tokens} tokens a user "
                                f"message, output {output_tokens} a turn, history resent each turn, seed {seed}")


def sharegpt_workload(path: Path, *, output_tokens: int, tokenizer_path: str | None, seed: int,
                      multi_turn: bool, at_most: int | None = None) -> Workload:
    """The human turns of a ShareGPT-style JSON file, shuffled with the seed: first turns or whole conversations.

    The file is streamed conversation by conversation, and with `at_most` a seeded uniform sample of that many
    conversations is kept (reservoir sampling), so a run holds what it can send, not the whole file."""
    fix = ('Pass a JSON list of {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}]} '
           '(ShareGPT), or of {"messages": [{"role": "user", "content": "..."}]}.')
    rng = random.Random(seed)
    entries = user_json_items(path, "ShareGPT dataset", fix, max_bytes=MAX_DATASET_BYTES)
    talks, total = reservoir((talk for entry in entries if (talk := _human_turns(entry))), at_most, rng)
    if not talks:
        raise SpecError(f"{path} has no conversation with a human turn.", "Each prompt is a human turn.", fix)
    rng.shuffle(talks)
    prompts: list[Prompt] = []
    order: list[tuple[int, ...]] = []
    for talk in talks:
        chosen = talk if multi_turn else talk[:1]
        start = len(prompts)
        prompts += [_prompt(text, output_tokens, tokenizer_path) for text in chosen[:MAX_TURNS]]
        order.append(tuple(range(start, len(prompts))))
    counted = f"tokenizer {tokenizer_path}" if tokenizer_path else "approximate: words, no tokenizer"
    what = f"{len(order)} conversations ({len(prompts)} human turns)" if multi_turn else f"{len(prompts)} first turns"
    if len(talks) < total:
        what += f" of {len(talks):,} conversations sampled from its {total:,}"
    return Workload(prompts=tuple(prompts), source=str(path), seed=seed, tokenizer=tokenizer_path,
                    conversations=tuple(order) if multi_turn else (),
                    description=f"{what} from ShareGPT file {path} ({counted}), output {output_tokens}, seed {seed}")


def _prompt(text: str, output_tokens: int, tokenizer_path: str | None) -> Prompt:
    counted = count_tokens(text, tokenizer_path) if tokenizer_path else len(text.split())
    return Prompt(text=text, prompt_tokens=max(1, counted or 1), output_tokens=output_tokens)


def _human_turns(entry: Any) -> list[str]:
    """The human (user) messages of one ShareGPT entry, in order; blank ones dropped."""
    if not isinstance(entry, dict):
        return []
    turns = entry.get("conversations", entry.get("messages"))
    if not isinstance(turns, list):
        return []
    found = []
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        who = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if who in ("human", "user") and isinstance(text, str) and text.strip():
            found.append(replace_surrogates(text))
    return found


def _check(*, n: int, prompt_tokens: int, output_tokens: int, groups: int, share: float) -> None:
    check_sizes(n=n, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    if groups < 1:
        raise SpecError(f"The number of prefix groups is {groups}.", "A workload needs at least one prefix group.",
                        "Pass a value ≥ 1.")
    if not 0 <= share < 1:
        raise SpecError(f"The prefix share {share} is not in [0, 1).",
                        "It is the fraction of each prompt's tokens shared with its group; each prompt keeps some "
                        "tokens of its own.", "Pass --prefix-share between 0 and 0.99, e.g. 0.8.")
