"""``llama_cpp.llama``: ``Llama`` and the names llama-cpp-python defines beside it (processor and
criteria lists, caches, state, grammar, tokenizer, and every ``llama_types`` shape)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from llama_ffi.high.compat import LlamaState
from llama_ffi.high.engine.prompt_cache import LlamaCache, LlamaDiskCache, LlamaRAMCache
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.llama import Llama
from llama_ffi.high.tokenizer import BaseLlamaTokenizer, LlamaTokenizer
from llama_ffi.llama_cpp import not_provided
from llama_ffi.llama_cpp.llama_types import *  # noqa: F403 - llama-cpp-python's llama module re-exports them
from llama_ffi.llama_cpp.llama_types import __all__ as _types

BaseLlamaCache = LlamaCache

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


class LogitsProcessorList(list):
    """Logits processors applied in order: ``processors(input_ids, scores)`` returns the scores
    after each has had its turn (a plain list of callables works too)."""

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(list):
    """Stopping criteria: ``criteria(input_ids, logits)`` is True once any of them is."""

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


class MinTokensLogitsProcessor:
    """Bans ``token_eos`` until ``min_tokens`` tokens have been generated after the prompt (the
    length of ``input_ids`` at the first call)."""

    def __init__(self, min_tokens: int, token_eos: int) -> None:
        self.min_tokens, self.token_eos = min_tokens, token_eos
        self.prompt_tokens: int | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


__all__ = [
    "BaseLlamaCache",
    "BaseLlamaTokenizer",
    "Llama",
    "LlamaCache",
    "LlamaDiskCache",
    "LlamaGrammar",
    "LlamaRAMCache",
    "LlamaState",
    "LlamaTokenizer",
    "LogitsProcessor",
    "LogitsProcessorList",
    "MinTokensLogitsProcessor",
    "StoppingCriteria",
    "StoppingCriteriaList",
    *_types,
]


def __getattr__(name: str):
    return not_provided.missing("llama", name)
