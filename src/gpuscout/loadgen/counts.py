"""A server's token counts held against what it actually streamed (docs/measurement.md §2.4).

Output throughput is Σ `usage.completion_tokens` / duration, so a server that misreports its counts
misreports its speed. Each request's count is checked once, after the run, against the stream:

* impossible (the count is dropped and the run is invalid): more than `ABSURD_PER_MAX_TOKENS` ×
  max_tokens; more visible tokens than `ABSURD_PER_CHAR` per content character (+ `CHAR_SLACK`;
  `reasoning_tokens` the server reports as hidden are not visible); fewer tokens than content chunks
  (every chunk with text carries at least one token); more than `TOKENIZER_FACTOR` × off the local
  tokenizer's count (+ `TOKENIZER_SLACK`), when one is given. Negative, fractional and non-finite
  counts are refused earlier, by `sse.read_usage`.
* short: the server accepted `ignore_eos`/`min_tokens` but returned fewer than `SHORT_FRACTION` ×
  max_tokens, so output lengths are not pinned (`metrics.validity` decides how many are too many).

The bounds are loose on purpose: honest servers differ from a local tokenizer by a few percent and
one token can be one emoji byte, so only counts no tokenizer can produce are called impossible.
"""

from __future__ import annotations

ABSURD_PER_MAX_TOKENS = 100
ABSURD_PER_CHAR = 16
CHAR_SLACK = 16
TOKENIZER_FACTOR = 4
TOKENIZER_SLACK = 16
SHORT_FRACTION = 0.5


def impossible_count(n: int, *, max_tokens: int | None, content_chars: int, chunks: int, reasoning: int | None,
                     tokenizer_count: int | None) -> str | None:
    """Why `n` output tokens cannot be what the server streamed, or None when it can be."""
    if max_tokens and n > ABSURD_PER_MAX_TOKENS * max_tokens:
        return f"usage.completion_tokens {n:,} > {ABSURD_PER_MAX_TOKENS} × max_tokens {max_tokens:,}"
    visible = n - reasoning if reasoning is not None and 0 <= reasoning <= n else n
    if content_chars and visible > ABSURD_PER_CHAR * content_chars + CHAR_SLACK:
        return (f"usage.completion_tokens {n:,} for {content_chars:,} characters of content "
                f"(> {ABSURD_PER_CHAR} tokens a character)")
    if n < chunks:
        return f"usage.completion_tokens {n:,} < {chunks:,} content chunks (each carries at least one token)"
    if tokenizer_count is not None and tokenizer_count > 0 and (
            visible > TOKENIZER_FACTOR * tokenizer_count + TOKENIZER_SLACK
            or tokenizer_count > TOKENIZER_FACTOR * visible + TOKENIZER_SLACK):
        return f"usage.completion_tokens {n:,} but the local tokenizer counts {tokenizer_count:,}"
    return None


def short_output(tokens: int | None, max_tokens: int | None, pinned: bool) -> bool:
    """A pinned request (ignore_eos/min_tokens accepted) that came back far below max_tokens."""
    return pinned and bool(max_tokens) and tokens is not None and tokens < SHORT_FRACTION * (max_tokens or 0)
