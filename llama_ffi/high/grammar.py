"""GBNF grammars: ``LlamaGrammar.from_string`` / ``from_file``, checked by llama.cpp's own parser."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors


@contextlib.contextmanager
def _captured_stderr_fd():
    """llama.cpp's grammar parser reports errors with fprintf(stderr): catch them for the message."""
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        out: list[str] = []
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


class LlamaGrammar:
    """A GBNF grammar. It is parsed against a model's vocabulary when a completion uses it;
    ``check(model)`` parses it right away."""

    def __init__(self, text: str, root: str = "root") -> None:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("grammar text must be a non-empty string")
        self.text = text
        self.root = root

    @classmethod
    def from_string(cls, grammar: str, root: str = "root") -> "LlamaGrammar":
        return cls(grammar, root)

    @classmethod
    def from_file(cls, path: str | os.PathLike, root: str = "root") -> "LlamaGrammar":
        return cls(Path(path).read_text(encoding="utf-8"), root)

    def sampler(self, vocab):
        """A new grammar sampler (owned by whoever adds it to a chain); ValueError if invalid."""
        with capture_errors() as logged, _captured_stderr_fd() as printed:
            smpl = lib.llama_sampler_init_grammar(vocab, self.text.encode(), self.root.encode())
        if smpl == ffi.NULL:
            message = " ".join((printed[0] + " " + "".join(logged)).split())
            raise ValueError(f"invalid grammar: {message or 'llama.cpp rejected it'}")
        return smpl

    def check(self, model) -> None:
        lib.llama_sampler_free(self.sampler(model.vocab_ptr))
