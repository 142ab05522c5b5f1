"""Text ⇄ tokens over a model's vocabulary, and streaming detokenisation that never splits UTF-8."""

from __future__ import annotations

import codecs
import threading
from collections.abc import Iterable, Sequence

from llama_ffi import ffi, lib
from llama_ffi.high.errors import RequestTypeError, RequestValueError


class Tokenizer:
    """A model's vocabulary: ``tokenize``, ``detokenize``, ``piece``. Calling it (``llm.tokenizer()``,
    llama-cpp-python's method) gives the ``LlamaTokenizer`` view of the same vocabulary."""

    def __init__(self, vocab_owner) -> None:
        self._owner = vocab_owner  # a Model: its vocab lives as long as it is open
        self._local = threading.local()  # a reused piece buffer per thread (hot path)

    @property
    def _vocab(self):
        return self._owner.vocab_ptr

    @property
    def n_vocab(self) -> int:
        return lib.llama_vocab_n_tokens(self._vocab)

    def end_of_generation(self) -> tuple[int, ...]:
        """Every token that ends a generation (EOS, EOT, ...), computed once."""
        found = getattr(self, "_eog", None)
        if found is None:
            vocab = self._vocab
            found = self._eog = tuple(t for t in range(self.n_vocab) if lib.llama_vocab_is_eog(vocab, t))
        return found

    def tokenize(self, text: str | bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """``add_bos`` adds the model's special tokens (BOS/EOS as its vocabulary asks);
        ``special`` parses special-token text such as ``<|im_start|>`` into their ids."""
        if isinstance(text, str):
            data = text.encode("utf-8")
        elif isinstance(text, (bytes, bytearray)):
            data = bytes(text)
        else:
            raise RequestTypeError(f"text must be str or bytes, got {type(text).__name__}")
        vocab = self._vocab
        capacity = len(data) + 2
        buf = ffi.new("llama_token[]", capacity)
        n = lib.llama_tokenize(vocab, data, len(data), buf, capacity, add_bos, special)
        if n < 0:
            capacity = -n
            buf = ffi.new("llama_token[]", capacity)
            n = lib.llama_tokenize(vocab, data, len(data), buf, capacity, add_bos, special)
        if n < 0:
            raise RequestValueError(f"tokenization failed ({n}) for a text of {len(data)} bytes")
        return list(ffi.unpack(buf, n))

    def check_tokens(self, tokens: Sequence[int]) -> None:
        n_vocab = self.n_vocab
        for i, t in enumerate(tokens):
            if isinstance(t, bool) or not isinstance(t, int):
                raise RequestTypeError(f"token {i} is {type(t).__name__}, not int")
            if not 0 <= t < n_vocab:
                raise RequestValueError(f"token {i} ({t}) is outside the vocabulary (0..{n_vocab - 1})")

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (may be part of a UTF-8 character)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = ffi.new("char[]", 64)
        n = lib.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ffi.new("char[]", -n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return ffi.unpack(buf, n)

    def detokenize_after(self, tokens: Sequence[int], prev_tokens: Sequence[int], special: bool = False) -> bytes:
        """The text of ``tokens`` after ``prev_tokens``: a leading space that only exists at the
        start of a text is kept or dropped as in the whole text."""
        head = self.detokenize(list(prev_tokens), special)
        return self.detokenize(list(prev_tokens) + list(tokens), special)[len(head) :]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """Bytes of a token sequence, as llama.cpp joins them (leading space rules included)."""
        tokens = list(tokens)
        self.check_tokens(tokens)
        if not tokens:
            return b""
        arr = ffi.new("llama_token[]", tokens)
        capacity = max(64, 8 * len(tokens))
        buf = ffi.new("char[]", capacity)
        n = lib.llama_detokenize(self._vocab, arr, len(tokens), buf, capacity, False, special)
        if n < 0:
            capacity = -n
            buf = ffi.new("char[]", capacity)
            n = lib.llama_detokenize(self._vocab, arr, len(tokens), buf, capacity, False, special)
        return ffi.unpack(buf, n)

    def __call__(self) -> LlamaTokenizer:
        return LlamaTokenizer(self)


class BaseLlamaTokenizer:
    """llama-cpp-python's tokenizer interface: bytes in and out (``tokenize``/``detokenize``)."""

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        raise NotImplementedError

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes:
        raise NotImplementedError


class LlamaTokenizer(BaseLlamaTokenizer):
    """llama-cpp-python's ``LlamaTokenizer``: a Llama's (or a ``Tokenizer``'s) vocabulary with
    ``encode``/``decode`` on text and ``tokenize``/``detokenize`` on bytes."""

    def __init__(self, llama) -> None:
        self._tokenizer: Tokenizer = llama if isinstance(llama, Tokenizer) else llama.tokenizer
        self._owned = None  # a vocabulary-only model this view loaded itself (from_ggml_file)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._tokenizer.tokenize(text, add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes:
        if prev_tokens:
            return self._tokenizer.detokenize_after(tokens, prev_tokens, special)
        return self._tokenizer.detokenize(tokens, special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> LlamaTokenizer:
        """The tokenizer of a GGUF, loading its vocabulary only; ``close()`` frees it."""
        from llama_ffi.high.model import Model, ModelParams

        model = Model(path, ModelParams(vocab_only=True))
        view = cls(Tokenizer(model))
        view._owned = model
        return view

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None


class TextStream:
    """Joins token pieces into text, releasing only complete UTF-8 characters."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # push(bytes) -> str: the decoder's own method, so a token costs no extra Python frame
        self.push = self._decoder.decode

    def finish(self) -> str:
        return self._decoder.decode(b"", final=True)


def stream_text(pieces: Iterable[bytes]) -> Iterable[str]:
    stream = TextStream()
    for p in pieces:
        text = stream.push(p)
        if text:
            yield text
    tail = stream.finish()
    if tail:
        yield tail
