"""Embeddings and reranking: pooling, normalisation, the streaming batcher, rank.

The batcher packs as many whole sequences into one ``llama_decode`` as ``n_batch`` tokens and
``n_seq_max`` sequences allow, reads one pooled vector per sequence (or one per token with
pooling ``none``), clears the memory and goes on: throughput comes from batching, memory stays
bounded for any number of inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.batch import Batch
from llama_ffi.high.errors import RequestTypeError, RequestValueError

NORM_NONE, NORM_MAX_INT16, NORM_TAXICAB, NORM_EUCLIDEAN = -1, 0, 1, 2


def normalize_rows(vectors: np.ndarray, mode: int | bool = NORM_EUCLIDEAN) -> np.ndarray:
    """Normalise rows as llama.cpp does: -1 none, 0 max-abs scaled to int16 range, 1 taxicab,
    2 euclidean, p > 2 the p-norm. ``True`` means 2, ``False`` means -1."""
    if mode is True:
        mode = NORM_EUCLIDEAN
    elif mode is False:
        mode = NORM_NONE
    if isinstance(mode, bool) or not isinstance(mode, int) or mode < -1:
        raise RequestValueError(f"normalize must be -1, 0, 1, 2, an integer p > 2, or a bool; got {mode!r}")
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


def check_inputs(inputs) -> list:
    """The inputs as a list: texts, or token lists (lists of ints) already tokenized."""
    if isinstance(inputs, str):
        return [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise RequestTypeError(f"input must be a str or a list of str, got {type(inputs).__name__}")
    for i, x in enumerate(inputs):
        if isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
            continue
        if not isinstance(x, str):
            raise RequestTypeError(f"input {i} is {type(x).__name__}, not str (or a list of token ids)")
    return list(inputs)


def fit(tokens: list[int], limit: int, index: int, truncate: bool) -> list[int]:
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise RequestValueError(
            f"input {index} is too large to process: {len(tokens)} tokens, more than the {limit} a "
            f"sequence can hold (n_batch/n_ctx); pass truncate=True to cut it"
        )
    return tokens[:limit]


# Inputs are packed into one decode until it holds this many tokens (a longer input still goes
# alone, up to n_batch). An encoder's attention spans the whole batch (masked per sequence), so
# its cost grows with the square of the batch: measured with MiniLM on 2 cores, 100 texts of
# ~205 tokens run at 11-13 texts/s packed to 2048 tokens and 16-17 packed to 512, while 1000
# short texts run as fast either way.
PACK_TOKENS = 512


def embed_token_lists(
    ctx,
    token_lists: Sequence[list[int]],
    pooling: int,
    n_out: int,
    seqs: Sequence[int],
    pack_tokens: int = PACK_TOKENS,
    decoded: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """(input index, vectors) for each input: shape (n_out,) pooled, (n_tokens, n_embd) for none.

    ``n_out`` is n_embd, or for rank pooling 1 (only the first score of each sequence is read).
    ``seqs``: the sequences it may use (empty; they are left empty). ``decoded``: told the tokens
    of each decode (the engine's figures).
    """
    n_batch = min(ctx.n_batch, max(pack_tokens, 1))
    per_token = pooling == lib.LLAMA_POOLING_TYPE_NONE
    batch = Batch(ctx.n_batch, 1)
    pending: list[tuple[int, int, int]] = []  # (input index, first batch row, n_tokens)

    def flush() -> Iterator[tuple[int, np.ndarray]]:
        try:
            ctx.decode(batch.c)
            if decoded is not None:
                decoded(batch.c.n_tokens)
        finally:  # embeddings need no cache: every batch starts empty
            for seq in seqs[: len(pending)]:
                lib.llama_memory_seq_rm(ctx.memory, seq, -1, -1)
        for seq, (index, row, n) in zip(seqs, pending):
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

    try:
        for index, tokens in enumerate(token_lists):
            if pending and (len(pending) == len(seqs) or batch.c.n_tokens + len(tokens) > n_batch):
                yield from flush()
            seq, row = seqs[len(pending)], batch.c.n_tokens
            for pos, tok in enumerate(tokens):
                batch.add(tok, pos, (seq,), True)
            pending.append((index, row, len(tokens)))
        if pending:
            yield from flush()
    finally:
        batch.close()


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    unit = normalize_rows(vectors, NORM_EUCLIDEAN)
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


# ---- what Llama's embed / create_embedding / rank do ----------------------------------------------
def _context_and_pooling(llm, need_rank: bool = False):
    ctx = llm.context
    pooling = lib.llama_pooling_type(ctx.ptr)
    if not llm.context_params.embeddings:
        raise RequestValueError(
            "this Llama was created without embeddings=True: create it with "
            "Llama(..., embeddings=True) or use LlamaEmbedding"
        )
    if need_rank and pooling != lib.LLAMA_POOLING_TYPE_RANK:
        raise RequestValueError(
            f"rank() needs a reranking model (pooling type rank); this context pools with type {pooling}"
        )
    return ctx, pooling


def embed_all(llm, texts: list[str], truncate: bool, tokens_of=None) -> tuple[list[np.ndarray], int]:
    """One vector (or one row per token) per text, and how many tokens they had. They are computed
    in idle slots between the engine's steps: requests generating in other slots go on."""
    ctx, pooling = _context_and_pooling(llm)
    limit = min(ctx.n_batch, ctx.n_ctx_seq)
    tokens_of = tokens_of or (lambda t: llm.tokenize(t, add_bos=True, special=False))
    for i, text in enumerate(texts):
        if isinstance(text, list):  # token ids: checked before llama.cpp reads them
            try:
                llm.tokenizer.check_tokens(text)
            except ValueError as error:
                raise RequestValueError(f"input {i}: {error}") from None
    token_lists = [fit(t if isinstance(t, list) else tokens_of(t), limit, i, truncate) for i, t in enumerate(texts)]
    for i, toks in enumerate(token_lists):
        if not toks:
            raise RequestValueError(f"input {i} has no tokens")
    n_out = 1 if pooling == lib.LLAMA_POOLING_TYPE_RANK else llm.loaded_model.n_embd
    out: list[np.ndarray] = [np.empty(0)] * len(texts)

    def embed_in_spare_slots() -> None:
        with ctx.embedding_mode():
            seqs = [slot.seq for slot in llm.engine.slots.spare(len(token_lists))]
            counted = llm.engine.stats.count_embedding
            for index, vec in embed_token_lists(ctx, token_lists, pooling, n_out, seqs, decoded=counted):
                out[index] = vec

    llm.engine.run(embed_in_spare_slots, main=False, spare=True)
    return out, sum(len(t) for t in token_lists)


def embed(
    llm,
    input: str | Sequence[str],
    normalize: int | bool | None = None,
    truncate: bool = True,
    return_count: bool = False,
    separator: str | None = None,
):
    """``Llama.embed``: embeddings as lists of floats, one vector per input, or per token with
    pooling none. ``normalize``: see ``normalize_rows`` (True: euclidean); default the Llama's
    DEFAULT_NORMALIZE. ``separator`` (the fork's): one string split into several inputs."""
    mode = llm.DEFAULT_NORMALIZE if normalize is None else normalize
    if separator is not None:
        if not isinstance(separator, str) or not separator:
            raise RequestValueError(f"separator must be a non-empty str, got {separator!r}")
        if not isinstance(input, str):
            raise RequestTypeError("separator splits one string: input must be a str")
        input = input.split(separator)
    texts = check_inputs(input)
    if not texts:
        return ([], 0) if return_count else []
    vectors, count = embed_all(llm, texts, truncate)
    result = [normalize_rows(v, mode).tolist() for v in vectors]
    if isinstance(input, str):
        result = result[0]
    return (result, count) if return_count else result


def create_embedding(
    llm,
    input: str | Sequence[str],
    model: str | None = None,
    normalize: int | bool | None = None,
    truncate: bool = True,
    output_format: str = "json",
):
    """``Llama.create_embedding``: OpenAI-shaped embeddings. ``output_format``: "json" (the dict),
    "json+" (adds the cosine similarity matrix), "array" (list of vectors) or "numpy" (one 2-D
    array, pooled only)."""
    if output_format not in ("json", "json+", "array", "numpy"):
        raise RequestValueError(f"output_format must be json, json+, array or numpy, not {output_format!r}")
    mode = llm.DEFAULT_NORMALIZE if normalize is None else normalize
    texts = check_inputs(input)
    vectors, count = embed_all(llm, texts, truncate) if texts else ([], 0)
    vectors = [normalize_rows(v, mode) for v in vectors]
    if output_format == "numpy":
        return np.stack(vectors) if vectors else np.empty((0, llm.n_embd), dtype=np.float32)
    if output_format == "array":
        return [v.tolist() for v in vectors]
    out = {
        "object": "list",
        "model": model or llm.model_path,
        "data": [{"object": "embedding", "embedding": v.tolist(), "index": i} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": count, "total_tokens": count},
    }
    if output_format == "json+":
        out["cosine_similarity"] = cosine_matrix(np.stack(vectors)).tolist() if vectors and vectors[0].ndim == 1 else []
    return out


def rank(llm, query: str, documents: Sequence[str]) -> list[float]:
    """``Llama.rank``: one relevance score per document (a reranking model: pooling type rank)."""
    _context_and_pooling(llm, need_rank=True)
    if not isinstance(query, str):
        raise RequestTypeError("query must be a str")
    docs = check_inputs(list(documents) if not isinstance(documents, str) else documents)
    if not docs:
        return []
    scores, _ = embed_all(
        llm, docs, truncate=True, tokens_of=lambda d: rerank_tokens(llm.tokenizer, llm.loaded_model.ptr, query, d)
    )
    return [float(s[0]) for s in scores]
