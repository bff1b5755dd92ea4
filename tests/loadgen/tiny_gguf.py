"""Write a tiny random-weight Llama as a GGUF file that llama.cpp can load and serve.

The model is useless as a language model but it is a real llama.cpp model: a byte-fallback
SentencePiece-style ("llama") vocabulary, every ``llama.*`` hyper-parameter llama.cpp requires, and
all the tensors of a 2-layer Llama block stack, in F32.

Generation is steered towards plain ASCII tokens: every token embedding carries a large constant in
dimension 0 (the residual stream keeps it through the layers), and the ``output`` rows of the ASCII
tokens get a large positive weight in that dimension while byte, control and end-of-sequence tokens get a
large negative one. So greedy or sampled decoding emits printable single-character tokens and never
``</s>``: the requested number of output tokens is always produced, and every streamed chunk is valid
UTF-8 (random bytes >= 0x80 would otherwise be held back by the server as incomplete characters).

Usage: ``python tests/loadgen/tiny_gguf.py OUT.gguf`` or ``write_tiny_llama_gguf(path)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# Token types of the GGUF tokenizer metadata (llama.cpp's llama_token_type).
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6
# Printable pieces the model is steered to emit ("▁" is SentencePiece's word boundary, i.e. a space).
_ASCII_PIECES = ["▁", *"abcdefghijklmnopqrstuvwxyz", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"0123456789"]


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: <unk>, <s>, </s>, <0x00>…<0xFF>, then printable pieces."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_BYTE] * 256
    tokens += _ASCII_PIECES
    types += [_NORMAL] * len(_ASCII_PIECES)
    # SentencePiece scores are log-probabilities used for merges; normal pieces rank above bytes.
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(len(_ASCII_PIECES))]
    return tokens, scores, types


def write_tiny_llama_gguf(
    path: Path | str,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 4,
    ffn: int = 128,
    context: int = 2048,
    seed: int = 0,
) -> Path:
    """Write the model to ``path`` and return it. Needs the ``gguf`` package (and numpy)."""
    import gguf  # imported here so a missing package surfaces where the file is written

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = tiny_vocab()
    vocab = len(tokens)
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        # numpy shape (out, in) = ggml ne [in, out]
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("gpuscout-tiny-llama")
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    embd = mat(vocab, hidden, 0.5)
    embd[:, 0] = 8.0  # a constant direction that survives the residual stream
    w.add_tensor("token_embd.weight", embd)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(hidden, heads * head_dim))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    out = mat(vocab, hidden, 1.0)
    first_ascii = vocab - len(_ASCII_PIECES)
    out[:, 0] = -20.0  # control, byte and </s> tokens: never chosen
    out[first_ascii:, 0] = 20.0  # printable pieces: always chosen (which one depends on the context)
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama.gguf")
    print(write_tiny_llama_gguf(target))
