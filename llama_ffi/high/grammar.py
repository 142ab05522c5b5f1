"""``LlamaGrammar``, the one front door to constrained output: GBNF (``from_string`` / ``from_file``,
run by llama.cpp's own grammar engine), and JSON Schema, regular expressions, choices and Lark
grammars (``from_json_schema``, ``from_regex``, ``from_choice``, ``from_lark``, run by llguidance:
``high.constraints``). Each is checked when made; ``sampler(vocab)`` gives a llama.cpp sampler
for a chain (``llama_sampler_apply`` / ``accept`` / ``reset`` drive it)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from pathlib import Path

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors
from llama_ffi.high import constraints
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
    """A constraint: a GBNF grammar (``engine`` "gbnf": parsed against a model's vocabulary when a
    completion uses it, or by ``check(model)``), or a llguidance grammar (``engine`` "llguidance":
    compiled when made)."""

    def __init__(self, text: str, root: str = "root", engine: str = "gbnf") -> None:
        if not isinstance(text, str) or not text.strip():
            raise RequestValueError("grammar text must be a non-empty string")
        self.text = text
        self.root = root
        self.engine = engine
        self._parsed: set[int] = set()  # vocabularies it parsed against (GBNF)
        # vocabulary -> (its llguidance tokenizer, the matcher before any token); the tokenizer tells a
        # vocabulary from a later one at the same address (the first model freed)
        self._compiled: dict[int, tuple] = {}

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True, root: str = "root") -> LlamaGrammar:
        """``verbose`` (llama-cpp-python's): log the grammar text to the llama_ffi logger."""
        if verbose:
            log.debug("grammar:\n%s", grammar)
        return cls(grammar, root)

    @classmethod
    def from_file(cls, path: str | os.PathLike, verbose: bool = True, root: str = "root") -> LlamaGrammar:
        """A GBNF grammar read from ``path`` (as ``from_string``)."""
        return cls.from_string(Path(path).read_text(encoding="utf-8"), verbose, root)

    @classmethod
    def from_json_schema(cls, json_schema: str | dict, verbose: bool = True) -> LlamaGrammar:
        """Output that validates against a JSON Schema (a JSON string, as llama-cpp-python takes
        it, or a dict); ``ConstraintError`` (a ValueError) naming what cannot be enforced and where.
        As llama.cpp's converter, integers get at most 16 digits and objects that name their
        properties no others unless the schema allows them (``constraints.bounds``)."""
        return cls._llguidance(constraints.json_schema_grammar(json_schema, generation=True), verbose)

    @classmethod
    def from_regex(cls, pattern: str, verbose: bool = True) -> LlamaGrammar:
        """Output that the regular expression matches whole."""
        return cls._llguidance(constraints.regex_grammar(pattern), verbose)

    @classmethod
    def from_choice(cls, choices, verbose: bool = True) -> LlamaGrammar:
        """Exactly one of the strings ``choices``."""
        return cls._llguidance(constraints.choice_grammar(choices), verbose)

    @classmethod
    def from_lark(cls, text: str, verbose: bool = True) -> LlamaGrammar:
        """A Lark grammar, in llguidance's dialect (``%json``, ``%regex``, lexemes and rules)."""
        return cls._llguidance(constraints.lark_grammar(text), verbose)

    @classmethod
    def _llguidance(cls, grammar: str, verbose: bool) -> LlamaGrammar:
        if verbose:
            log.debug("llguidance grammar:\n%s", grammar)
        return cls(grammar, engine="llguidance")

    def sampler(self, vocab):
        """A new sampler enforcing the grammar (owned by whoever adds it to a chain); ValueError if
        invalid. For GBNF only the first parse for a vocabulary watches stderr; a grammar that
        parsed once parses again."""
        key = int(ffi.cast("uintptr_t", vocab))
        if self.engine == "llguidance":
            tokenizer = constraints.tokenizer.for_vocab(vocab)
            found = self._compiled.get(key)
            if found is None or found[0] is not tokenizer:
                found = self._compiled[key] = (tokenizer, constraints.sampler.compiled(self.text, vocab))
            return constraints.new_sampler(found[1], vocab)
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
        """Raises ``RequestValueError`` (a ``ValueError``) if this grammar's sampler cannot be built for ``model``."""
        lib.llama_sampler_free(self.sampler(model.vocab_ptr))
