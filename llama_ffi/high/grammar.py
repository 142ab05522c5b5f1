"""GBNF grammars: ``LlamaGrammar.from_string`` / ``from_file``, checked by llama.cpp's own parser."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from pathlib import Path

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors
from llama_ffi.high.errors import RequestValueError

log = logging.getLogger("llama_ffi")


# File descriptor 2 belongs to the whole process: one parse redirects it at a time.
_STDERR_LOCK = threading.Lock()


@contextlib.contextmanager
def _captured_stderr_fd():
    """llama.cpp's grammar parser reports errors with fprintf(stderr): catch them for the message.
    Whatever reached fd 2 meanwhile (another thread's output too) is written back afterwards, so
    nothing printed to stderr goes missing."""
    with _STDERR_LOCK, tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        out: list[str] = []
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured = tmp.read()
            if captured:
                os.write(2, captured)
            out.append(captured.decode("utf-8", "replace"))


class LlamaGrammar:
    """A GBNF grammar. It is parsed against a model's vocabulary when a completion uses it;
    ``check(model)`` parses it right away."""

    def __init__(self, text: str, root: str = "root") -> None:
        if not isinstance(text, str) or not text.strip():
            raise RequestValueError("grammar text must be a non-empty string")
        self.text = text
        self.root = root
        self._parsed: set[int] = set()  # vocabularies it parsed against

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True, root: str = "root") -> LlamaGrammar:
        """``verbose`` (llama-cpp-python's): log the grammar text to the llama_ffi logger."""
        if verbose:
            log.debug("grammar:\n%s", grammar)
        return cls(grammar, root)

    @classmethod
    def from_file(cls, path: str | os.PathLike, verbose: bool = True, root: str = "root") -> LlamaGrammar:
        return cls.from_string(Path(path).read_text(encoding="utf-8"), verbose, root)

    @classmethod
    def from_json_schema(cls, json_schema: str | dict, verbose: bool = True) -> LlamaGrammar:
        """The grammar of a JSON Schema (a JSON string, as llama-cpp-python takes it, or a dict)."""
        import json

        from llama_ffi.high.chat.json_schema import schema_to_gbnf  # the schema compiler lives with chat

        schema = json.loads(json_schema) if isinstance(json_schema, str) else json_schema
        return cls.from_string(schema_to_gbnf(schema), verbose)

    def sampler(self, vocab):
        """A new grammar sampler (owned by whoever adds it to a chain); ValueError if invalid. Only
        the first parse for a vocabulary watches stderr; a grammar that parsed once parses again."""
        key = int(ffi.cast("uintptr_t", vocab))
        if key in self._parsed:
            smpl = lib.llama_sampler_init_grammar(vocab, self.text.encode(), self.root.encode())
            if smpl != ffi.NULL:
                return smpl
        with capture_errors() as logged, _captured_stderr_fd() as printed:
            smpl = lib.llama_sampler_init_grammar(vocab, self.text.encode(), self.root.encode())
        if smpl == ffi.NULL:
            message = " ".join((printed[0] + " " + "".join(logged)).split())
            raise RequestValueError(f"invalid grammar: {message or 'llama.cpp rejected it'}")
        self._parsed.add(key)
        return smpl

    def check(self, model) -> None:
        lib.llama_sampler_free(self.sampler(model.vocab_ptr))
