"""A local word-level tokenizer folder for tests: one token a whitespace-separated word ("tok" and all)."""

from __future__ import annotations

import json
from pathlib import Path


def write_tiny_tokenizer(path: Path) -> Path:
    """tokenizer.json + tokenizer_config.json that transformers' AutoTokenizer loads offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path.mkdir(parents=True, exist_ok=True)
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "tok": 3, **{f"w{i}": i + 4 for i in range(500)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
              "eos_token": "</s>", "model_max_length": 100_000}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path
