"""The JamePeng fork's ``llama_speculative``: ``SpecConfig`` and ``SpeculativeType`` for
``Llama(speculative=...)``, and llama-cpp-python's prompt-lookup drafter."""

import numpy as np

from llama_ffi.high.speculative import SpecConfig, SpeculativeStats, SpeculativeType
from llama_ffi.llama_cpp import not_provided

__all__ = ["LlamaPromptLookupDecoding", "SpecConfig", "SpeculativeStats", "SpeculativeType"]


class LlamaPromptLookupDecoding:
    """llama-cpp-python's prompt-lookup drafter, as ``Llama(draft_model=...)`` takes it: the last
    ``max_ngram_size`` tokens are looked up in the history and the ``num_pred_tokens`` that
    followed are drafted. Here it is the NGRAM_MAP_K engine with those sizes."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    def spec_config(self) -> SpecConfig:
        return SpecConfig(
            type=SpeculativeType.NGRAM_MAP_K, ngram_size_n=self.max_ngram_size, ngram_size_m=self.num_pred_tokens
        )

    @staticmethod
    def find_candidate_pred_tokens(input_ids: np.ndarray, max_ngram_size: int, num_pred_tokens: int) -> np.ndarray:
        """The ``num_pred_tokens`` that followed the first earlier occurrence of the history's last
        n-gram, trying n = ``max_ngram_size`` down to 1; an empty array when none occurred."""
        input_ids = np.asarray(input_ids)
        length = len(input_ids)
        for n in range(min(max_ngram_size, length - 1), 0, -1):
            tail = input_ids[length - n :]
            # every start position whose n tokens equal the tail, the tail itself excluded
            windows = np.lib.stride_tricks.sliding_window_view(input_ids[: length - 1], n)
            starts = np.flatnonzero((windows == tail).all(axis=1))
            for start in starts:
                follow = input_ids[start + n : start + n + num_pred_tokens]
                if len(follow):
                    return follow
        return np.array([], dtype=input_ids.dtype)


def __getattr__(name: str):
    return not_provided.missing("llama_speculative", name)
