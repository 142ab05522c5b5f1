"""Fill in the middle: ``create_completion(prefix, suffix=...)`` builds the prompt from the model's
FIM tokens exactly as llama-server's ``/infill`` does (``format_prompt_infill``: prefix and suffix
cut to fit one batch at 3:1, the repository/file header when the vocabulary has those tokens,
BOS when the model adds one), so the middle it generates is the server's."""

from __future__ import annotations

from llama_ffi import lib
from llama_ffi.high.errors import RequestTypeError, RequestValueError

PROJECT_HEADER = "myproject\n"  # llama-server's fixed repository name and file name
FILE_HEADER = "filename\n"
SERVER_N_PREDICT = -1  # llama-server sizes the extra context with its default n_predict


def fim_tokens(vocab) -> tuple[int, int, int]:
    """(prefix, suffix, middle) token ids; ValueError when the model has none."""
    ids = lib.llama_vocab_fim_pre(vocab), lib.llama_vocab_fim_suf(vocab), lib.llama_vocab_fim_mid(vocab)
    if min(ids) < 0:
        raise RequestValueError(
            "suffix= needs a model with fill-in-the-middle tokens (FIM prefix, suffix and middle); "
            "this model has none: use a code model trained for infill"
        )
    return ids


def prompt_tokens(tokenize, vocab, prefix: str, suffix: str, n_batch: int, n_ctx: int, spm: bool = False) -> list[int]:
    """The infill prompt; ``tokenize(text) -> tokens`` without BOS or special-token parsing;
    ``spm``: suffix before prefix (llama.cpp's --spm-infill)."""
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        raise RequestTypeError("with suffix=, the prompt (the prefix) and the suffix must be str")
    pre, suf, mid = fim_tokens(vocab)
    rep, sep = lib.llama_vocab_fim_rep(vocab), lib.llama_vocab_fim_sep(vocab)
    extra = ([rep, *tokenize(PROJECT_HEADER)] if rep >= 0 else []) + ([sep, *tokenize(FILE_HEADER)] if sep >= 0 else [])
    head, tail = tokenize(prefix), tokenize(suffix)
    head = head[len(head) - min(len(head), 3 * (n_batch // 4)) :]
    tail = tail[: min(len(tail), max(0, n_batch // 4 - 2))]
    first, second = [pre, *head], [suf, *tail]
    if spm:
        first, second = second, first
    if lib.llama_vocab_get_add_bos(vocab):
        first.insert(0, lib.llama_vocab_bos(vocab))
    n_extra = min(max(0, n_ctx - n_batch - 2 * SERVER_N_PREDICT), len(extra))
    return extra[len(extra) - n_extra :] + first + second + [mid]
