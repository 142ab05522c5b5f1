"""llguidance's tokenizer for a llama.cpp vocabulary, built once per vocabulary from the model's own
token bytes (``llama_token_to_piece(..., special=True)``; control tokens marked as special, as
llguidance expects them) with llama.cpp's tokenizer for its strings: no Hub, no ``transformers``.
Building one reads every token (about a second for a large vocabulary): it is cached until the
model is freed (``forget``)."""

from __future__ import annotations

import threading

import llguidance

from llama_ffi import ffi, lib

_cache: dict[int, llguidance.LLTokenizer] = {}
_eog: dict[int, list[int]] = {}  # a pass over the whole vocabulary: once per vocabulary, not per request
_lock = threading.Lock()
_PIECE = 256  # bytes; a longer token is read again with its own length


def _key(vocab) -> int:
    return int(ffi.cast("uintptr_t", vocab))


def token_bytes(vocab) -> list[bytes]:
    """Every token's bytes; a control token (or a user-defined one shaped like one) prefixed with
    0xff, llguidance's mark of a special token."""
    buf = ffi.new("char[]", _PIECE)
    out = []
    for token in range(lib.llama_vocab_n_tokens(vocab)):
        n = lib.llama_token_to_piece(vocab, token, buf, _PIECE, 0, True)
        if n < 0:
            longer = ffi.new("char[]", -n)
            n = lib.llama_token_to_piece(vocab, token, longer, -n, 0, True)
            piece = ffi.unpack(longer, n)
        else:
            piece = ffi.unpack(buf, n)
        attr = lib.llama_vocab_get_attr(vocab, token)
        user_control = attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")
        if attr & lib.LLAMA_TOKEN_ATTR_CONTROL or user_control:
            piece = b"\xff" + piece
        out.append(piece)
    return out


def end_of_generation(vocab) -> list[int]:
    key = _key(vocab)
    found = _eog.get(key)
    if found is None:
        found = [t for t in range(lib.llama_vocab_n_tokens(vocab)) if lib.llama_vocab_is_eog(vocab, t)]
        _eog[key] = found  # one assignment (for_vocab calls this holding _lock)
    return list(found)


def for_vocab(vocab) -> llguidance.LLTokenizer:
    """The llguidance tokenizer of ``vocab`` (built on first use, then cached)."""
    key = _key(vocab)
    with _lock:
        found = _cache.get(key)
        if found is None:
            eog = end_of_generation(vocab) or [lib.llama_vocab_eos(vocab)]
            tokenize = int(ffi.cast("uintptr_t", ffi.addressof(lib, "llama_tokenize")))
            found = _llamacpp_tokenizer(token_bytes(vocab), key, tokenize, eog, lib.llama_vocab_eos(vocab))
            _cache[key] = found
        return found


def _llamacpp_tokenizer(tokens: list[bytes], key: int, tokenize: int, eog: list[int], eos: int):
    """llguidance's tokenizer over llama.cpp's vocabulary: every end-of-generation token ends a
    constrained reply; llguidance before 1.9 takes one, llama.cpp's EOS (guidance pins 1.5)."""
    try:
        return llguidance.LLTokenizer.from_llamacpp(
            tokens=tokens, vocab_ptr=key, tokenize_fptr=tokenize, eos_token=eog, slices=None
        )
    except TypeError as error:
        if "eos_token" not in str(error):
            raise
    one = eos if eos in eog else eog[0]
    return llguidance.LLTokenizer.from_llamacpp(
        tokens=tokens, vocab_ptr=key, tokenize_fptr=tokenize, eos_token=one, slices=None
    )


def forget(vocab) -> None:
    """The model owning ``vocab`` is freed: its tokenizer goes (another model may get the address)."""
    with _lock:
        _cache.pop(_key(vocab), None)
        _eog.pop(_key(vocab), None)
