"""``llama_cpp.llama_grammar``: ``LlamaGrammar`` (GBNF, or JSON Schema through llguidance)."""

from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.llama_cpp import not_provided

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"

__all__ = ["LLAMA_GRAMMAR_DEFAULT_ROOT", "LlamaGrammar"]


def __getattr__(name: str):
    return not_provided.missing("llama_grammar", name)
