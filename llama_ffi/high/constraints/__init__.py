"""Constrained decoding with llguidance (the engine behind llama.cpp's optional ``LLAMA_LLGUIDANCE``,
vLLM and SGLang): JSON Schema, regular expressions, choices and Lark grammars become a llguidance
grammar (``grammars``), checked before any decoding; a matcher over the model's own vocabulary
(``tokenizer``) runs inside llama.cpp's sampler chain as a sampler of ours (``sampler``): every path
that samples through a chain — ``Llama``, the engine's steps, speculative verification, the server —
gets it without a loop of its own."""

from llama_ffi.high.constraints.grammars import (
    ConstraintError,
    choice_grammar,
    enforceable,
    json_schema_grammar,
    lark_grammar,
    parsed_schema,
    regex_grammar,
)
from llama_ffi.high.constraints.sampler import new_sampler

__all__ = [
    "ConstraintError",
    "choice_grammar",
    "enforceable",
    "json_schema_grammar",
    "lark_grammar",
    "new_sampler",
    "parsed_schema",
    "regex_grammar",
]
