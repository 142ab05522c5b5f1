"""Test helpers over the raw C API only (no llama_ffi.high): load, tokenize, decode, logits."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from llama_ffi import ffi, lib


@contextlib.contextmanager
def raw_model(path: Path, **params):
    mp = lib.llama_model_default_params()
    for k, v in params.items():
        setattr(mp, k, v)
    model = lib.llama_model_load_from_file(str(path).encode(), mp)
    assert model != ffi.NULL, f"failed to load {path}"
    try:
        yield model
    finally:
        lib.llama_model_free(model)


@contextlib.contextmanager
def raw_context(model, **params):
    cp = lib.llama_context_default_params()
    for k, v in params.items():
        setattr(cp, k, v)
    ctx = lib.llama_init_from_model(model, cp)
    assert ctx != ffi.NULL
    try:
        yield ctx
    finally:
        lib.llama_free(ctx)


def tokenize(vocab, text: str | bytes, add_special: bool, parse_special: bool = False) -> list[int]:
    data = text.encode() if isinstance(text, str) else text
    n = len(data) + 8
    buf = ffi.new("llama_token[]", n)
    got = lib.llama_tokenize(vocab, data, len(data), buf, n, add_special, parse_special)
    if got < 0:
        buf = ffi.new("llama_token[]", -got)
        got = lib.llama_tokenize(vocab, data, len(data), buf, -got, add_special, parse_special)
    assert got >= 0
    return list(buf[0:got])


def piece(vocab, token: int) -> bytes:
    buf = ffi.new("char[]", 256)
    n = lib.llama_token_to_piece(vocab, token, buf, 256, 0, False)
    assert n >= 0
    return ffi.unpack(buf, n)


def decode_all_logits(ctx, tokens: list[int], n_vocab: int) -> np.ndarray:
    """Decode ``tokens`` as one batch (positions 0..), logits requested for every position."""
    batch = lib.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = len(tokens)
        assert lib.llama_decode(ctx, batch) == 0
        out = (
            np.frombuffer(ffi.buffer(lib.llama_get_logits(ctx), 4 * n_vocab * len(tokens)), dtype=np.float32)
            .reshape(len(tokens), n_vocab)
            .copy()
        )
    finally:
        lib.llama_batch_free(batch)
    return out


def greedy_continue(ctx, vocab, prompt: list[int], n: int) -> list[int]:
    """Prompt in one batch, then one token at a time, taking the argmax of the logits."""
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    logits = decode_all_logits(ctx, prompt, n_vocab)[-1]
    out, pos = [], len(prompt)
    tok = ffi.new("llama_token[1]")
    for _ in range(n):
        nxt = int(np.argmax(logits))
        out.append(nxt)
        if lib.llama_vocab_is_eog(vocab, nxt):
            break
        tok[0] = nxt
        batch = lib.llama_batch_get_one(tok, 1)
        assert lib.llama_decode(ctx, batch) == 0
        logits = np.frombuffer(ffi.buffer(lib.llama_get_logits_ith(ctx, -1), 4 * n_vocab), np.float32)
        pos += 1
    return out
