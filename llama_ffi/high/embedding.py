"""Embeddings and reranking: pooling, normalisation, the streaming batcher, rank.

The batcher packs as many whole sequences into one ``llama_decode`` as ``n_batch`` tokens and
``n_seq_max`` sequences allow, reads one pooled vector per sequence (or one per token with
pooling ``none``), clears the memory and goes on: throughput comes from batching, memory stays
bounded for any number of inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.batch import Batch

NORM_NONE, NORM_MAX_INT16, NORM_TAXICAB, NORM_EUCLIDEAN = -1, 0, 1, 2


def normalize(vectors: np.ndarray, mode: int | bool = NORM_EUCLIDEAN) -> np.ndarray:
    """Normalise rows as llama.cpp does: -1 none, 0 max-abs scaled to int16 range, 1 taxicab,
    2 euclidean, p > 2 the p-norm. ``True`` means 2, ``False`` means -1."""
    if mode is True:
        mode = NORM_EUCLIDEAN
    elif mode is False:
        mode = NORM_NONE
    if isinstance(mode, bool) or not isinstance(mode, int) or mode < -1:
        raise ValueError(f"normalize must be -1, 0, 1, 2, an integer p > 2, or a bool; got {mode!r}")
    v = np.asarray(vectors, dtype=np.float32)
    if mode == NORM_NONE:
        return v
    x = v.astype(np.float64)
    if mode == NORM_MAX_INT16:
        scale = np.abs(x).max(axis=-1, keepdims=True) / 32760.0
    elif mode == NORM_EUCLIDEAN:
        scale = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    else:
        scale = (np.abs(x) ** mode).sum(axis=-1, keepdims=True) ** (1.0 / mode)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(scale > 0, x / np.where(scale > 0, scale, 1.0), 0.0)
    return out.astype(np.float32)


def check_inputs(inputs) -> list[str]:
    if isinstance(inputs, str):
        return [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"input must be a str or a list of str, got {type(inputs).__name__}")
    for i, x in enumerate(inputs):
        if not isinstance(x, str):
            raise TypeError(f"input {i} is {type(x).__name__}, not str")
    return list(inputs)


def fit(tokens: list[int], limit: int, index: int, truncate: bool) -> list[int]:
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise ValueError(f"input {index} has {len(tokens)} tokens, more than the {limit} a sequence can "
                         f"hold (n_batch/n_ctx); pass truncate=True to cut it")
    return tokens[:limit]


# Inputs are packed into one decode until it holds this many tokens (a longer input still goes
# alone, up to n_batch). An encoder's attention spans the whole batch (masked per sequence), so
# its cost grows with the square of the batch: measured with MiniLM on 2 cores, 100 texts of
# ~205 tokens run at 11-13 texts/s packed to 2048 tokens and 16-17 packed to 512, while 1000
# short texts run as fast either way.
PACK_TOKENS = 512


def embed_token_lists(ctx, token_lists: Sequence[list[int]], pooling: int, n_out: int,
                      pack_tokens: int = PACK_TOKENS) -> Iterator[tuple[int, np.ndarray]]:
    """(input index, vectors) for each input: shape (n_out,) pooled, (n_tokens, n_embd) for none.

    ``n_out`` is n_embd, or for rank pooling 1 (only the first score of each sequence is read).
    """
    n_seq_max = ctx.n_seq_max
    n_batch = min(ctx.n_batch, max(pack_tokens, 1))
    per_token = pooling == lib.LLAMA_POOLING_TYPE_NONE
    batch = Batch(ctx.n_batch, 1)
    pending: list[tuple[int, int, int]] = []  # (input index, first batch row, n_tokens)
    try:
        def flush() -> Iterator[tuple[int, np.ndarray]]:
            ctx.clear()  # embeddings need no cache: every batch starts empty
            ctx.decode(batch.c)
            for seq, (index, row, n) in enumerate(pending):
                if per_token:
                    vecs = np.empty((n, n_out), dtype=np.float32)
                    for j in range(n):
                        ptr = lib.llama_get_embeddings_ith(ctx.ptr, row + j)
                        vecs[j] = np.frombuffer(ffi.buffer(ptr, 4 * n_out), dtype=np.float32)
                    yield index, vecs
                else:
                    ptr = lib.llama_get_embeddings_seq(ctx.ptr, seq)
                    if ptr == ffi.NULL:
                        raise RuntimeError(f"llama.cpp returned no embedding for input {index}")
                    yield index, np.frombuffer(ffi.buffer(ptr, 4 * n_out), dtype=np.float32).copy()
            pending.clear()
            batch.clear()

        for index, tokens in enumerate(token_lists):
            if pending and (len(pending) == n_seq_max or batch.c.n_tokens + len(tokens) > n_batch):
                yield from flush()
            seq, row = len(pending), batch.c.n_tokens
            for pos, tok in enumerate(tokens):
                batch.add(tok, pos, (seq,), True)
            pending.append((index, row, len(tokens)))
        if pending:
            yield from flush()
    finally:
        batch.close()


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    unit = normalize(vectors, NORM_EUCLIDEAN)
    return unit @ unit.T


def rerank_tokens(tokenizer, model_ptr, query: str, document: str) -> list[int]:
    """The model's "rerank" chat template when the GGUF has one, else BOS query EOS SEP doc EOS
    (each special token where the vocabulary asks for it), as llama.cpp's server builds it."""
    template = lib.llama_model_chat_template(model_ptr, b"rerank")
    if template != ffi.NULL:
        text = ffi.string(template).decode("utf-8")
        text = text.replace("{query}", query).replace("{document}", document)
        return tokenizer.tokenize(text, add_bos=False, special=True)
    vocab = lib.llama_model_get_vocab(model_ptr)
    eos = lib.llama_vocab_eos(vocab)
    if eos == lib.LLAMA_TOKEN_NULL:
        eos = lib.llama_vocab_sep(vocab)
    out: list[int] = []
    if lib.llama_vocab_get_add_bos(vocab):
        out.append(lib.llama_vocab_bos(vocab))
    out += tokenizer.tokenize(query, add_bos=False)
    if lib.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    if lib.llama_vocab_get_add_sep(vocab):
        out.append(lib.llama_vocab_sep(vocab))
    out += tokenizer.tokenize(document, add_bos=False)
    if lib.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    return out
