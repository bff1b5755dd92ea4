"""Workloads: exact token lengths with a real (tiny, offline) tokenizer, seeding, distributions, datasets."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuscout.errors import SpecError
from gpuscout.loadgen.workload import (
    Workload,
    count_tokens,
    dataset_workload,
    prompt_lengths,
    save_workload,
    synthetic_workload,
)

_SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a load test sends many requests to an inference server",
    "tokens per second and time to first token are measured per request",
    "prices change with time so cost is computed at report time",
    "hello world, this is a tiny corpus for a tiny tokenizer!",
]


def _save(tokenizer: object, folder: Path) -> str:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]")
    fast.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def wordlevel_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(_SENTENCES, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    return _save(tok, tmp_path_factory.mktemp("wordlevel"))


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Byte-level BPE, like GPT/Llama-3: decoding and re-encoding can merge tokens at the seams."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "[PAD]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_SENTENCES * 5, trainer)
    return _save(tok, tmp_path_factory.mktemp("bpe"))


@pytest.mark.parametrize("fixture", ["wordlevel_tokenizer", "bpe_tokenizer"])
def test_exact_token_counts_with_a_tokenizer(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    work = synthetic_workload(20, prompt_tokens=37, output_tokens=16, distribution="uniform", spread=30,
                              tokenizer_path=path, seed=3)
    assert work.tokenizer == path and "exact" in work.description
    for prompt in work.prompts:
        assert count_tokens(prompt.text, path) == prompt.prompt_tokens
        assert prompt.output_tokens == 16
    assert len({p.prompt_tokens for p in work.prompts}) > 5  # lengths really vary


def test_same_seed_same_workload_other_seed_differs(bpe_tokenizer: str) -> None:
    def make(seed: int) -> Workload:
        return synthetic_workload(5, prompt_tokens=20, output_tokens=8, distribution="normal", spread=5,
                                  tokenizer_path=bpe_tokenizer, seed=seed)

    assert make(1) == make(1)
    assert make(1).prompts != make(2).prompts
    plain = [synthetic_workload(5, prompt_tokens=20, output_tokens=8, seed=s) for s in (1, 1, 2)]
    assert plain[0] == plain[1] and plain[0].prompts != plain[2].prompts


def test_prompts_do_not_share_text() -> None:
    work = synthetic_workload(10, prompt_tokens=50, output_tokens=4)
    assert len({p.text for p in work.prompts}) == 10


def test_without_tokenizer_counts_are_approximate_words() -> None:
    work = synthetic_workload(3, prompt_tokens=12, output_tokens=4, seed=0)
    assert work.tokenizer is None and "approximate" in work.description
    assert all(len(p.text.split()) == 12 == p.prompt_tokens for p in work.prompts)
    assert count_tokens("a b c", None) is None


def test_distributions() -> None:
    assert prompt_lengths(4, 100, "fixed", 50, 0) == [100] * 4
    uniform = prompt_lengths(2000, 100, "uniform", 20, 0)
    assert min(uniform) == 80 and max(uniform) == 120
    assert abs(statistics.fmean(uniform) - 100) < 1.5
    normal = prompt_lengths(4000, 100, "normal", 10, 0)
    assert abs(statistics.fmean(normal) - 100) < 1 and abs(statistics.stdev(normal) - 10) < 0.6
    clipped = prompt_lengths(500, 2, "normal", 10, 0)
    assert min(clipped) == 1  # clipped to at least one token
    assert prompt_lengths(50, 3, "uniform", 10, 1) == prompt_lengths(50, 3, "uniform", 10, 1)


def test_description_states_the_distribution() -> None:
    work = synthetic_workload(2, prompt_tokens=512, output_tokens=128, distribution="normal", spread=64, seed=7)
    assert "normal(512, 64)" in work.description and "output 128" in work.description and "seed 7" in work.description


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"prompt_tokens": 0}, {"output_tokens": 0}, {"spread": -1}])
def test_bad_sizes_are_spec_errors(kwargs: dict[str, int]) -> None:
    args = {"n": 2, "prompt_tokens": 10, "output_tokens": 5, "spread": 0, **kwargs}
    with pytest.raises(SpecError):
        synthetic_workload(args.pop("n"), **args)


def test_missing_tokenizer_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="tokenizer"):
        synthetic_workload(1, prompt_tokens=5, output_tokens=1, tokenizer_path=str(tmp_path / "none"))


def _jsonl(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dataset_formats_and_deterministic_cycling(tmp_path: Path, wordlevel_tokenizer: str) -> None:
    path = _jsonl(tmp_path, [
        json.dumps({"prompt": "the quick brown fox"}),
        "",
        json.dumps({"text": "hello world"}),
        json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": [{"type": "text", "text": "a load test"}]}]}),
    ])
    everything = dataset_workload(path, n=None, output_tokens=32, tokenizer_path=None, seed=0)
    assert sorted(p.text for p in everything.prompts) == ["a load test", "hello world", "the quick brown fox"]
    assert everything.source == str(path)
    cycled = dataset_workload(path, n=7, output_tokens=32, tokenizer_path=wordlevel_tokenizer, seed=4)
    assert len(cycled.prompts) == 7
    assert cycled == dataset_workload(path, n=7, output_tokens=32, tokenizer_path=wordlevel_tokenizer, seed=4)
    for i in range(0, 6, 3):  # each pass of three is a full shuffle of the file
        assert len({p.text for p in cycled.prompts[i:i + 3]}) == 3
    assert {p.text: p.prompt_tokens for p in cycled.prompts}["the quick brown fox"] == 4
    assert all(p.output_tokens == 32 for p in cycled.prompts)


def test_dataset_bad_json_line_is_named(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [json.dumps({"prompt": "ok"}), "{not json"])
    with pytest.raises(SpecError, match="line 2 is not valid JSON"):
        dataset_workload(path, n=None, output_tokens=8, tokenizer_path=None, seed=0)


def test_dataset_entry_without_prompt_is_named(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [json.dumps({"prompt": "ok"}), json.dumps({"question": "?"})])
    with pytest.raises(SpecError, match="line 2 has no prompt"):
        dataset_workload(path, n=None, output_tokens=8, tokenizer_path=None, seed=0)


def test_dataset_missing_or_empty(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="Cannot read"):
        dataset_workload(tmp_path / "nope.jsonl", n=None, output_tokens=8, tokenizer_path=None, seed=0)
    with pytest.raises(SpecError, match="no prompts"):
        dataset_workload(_jsonl(tmp_path, [""]), n=None, output_tokens=8, tokenizer_path=None, seed=0)


def test_save_workload_round_trips_atomically(tmp_path: Path) -> None:
    work = synthetic_workload(3, prompt_tokens=5, output_tokens=2)
    target = tmp_path / "sub" / "workload.json"
    save_workload(work, target)
    assert Workload.model_validate_json(target.read_text(encoding="utf-8")) == work
    assert [p.name for p in target.parent.iterdir()] == ["workload.json"]  # no temporary file left
