"""The JamePeng fork's ``llama_speculative``: ``SpecConfig`` and ``SpeculativeType`` for
``Llama(speculative=...)``, and llama-cpp-python's prompt-lookup drafter."""

from collections.abc import Sequence

import numpy as np

from llama_ffi.high.speculative import SpecConfig, SpeculativeStats, SpeculativeType
from llama_ffi.high.speculative.ngram import NgramMapK, NgramMapK4V
from llama_ffi.llama_cpp import not_provided

__all__ = [
    "LlamaMTPDecoding",
    "LlamaNGramMapDecoding",
    "LlamaPromptLookupDecoding",
    "LlamaSpecEngine",
    "SpecConfig",
    "SpeculativeStats",
    "SpeculativeType",
    "speculative_output_limits",
]


def speculative_output_limits(n_batch: int, n_parallel: int, n_draft: int) -> tuple[int, int]:
    """(outputs of one verification batch in all, outputs per sequence), as llama.cpp bounds them
    (``common_speculative_get_output_limits``): a sequence verifies its last token and its draft,
    within one batch."""
    if n_batch <= 0 or n_parallel <= 0:
        raise ValueError(f"n_batch and n_parallel must be positive, got {n_batch} and {n_parallel}")
    per_sequence = min(n_batch, 1 + max(0, n_draft))
    return min(n_batch, n_parallel * per_sequence), per_sequence


def _speculative_generation_timing_stats(
    generated_tokens: int, time_to_first_token_seconds: float, time_to_last_token_seconds: float
) -> dict:
    """The fork's generation figures: the whole generation, and the sustained rate after the
    first token (none for fewer than two tokens)."""
    tokens = max(int(generated_tokens), 0)
    seconds = max(float(time_to_last_token_seconds), 0.0)
    sustained_tokens = max(tokens - 1, 0)
    sustained_seconds = max(seconds - float(time_to_first_token_seconds), 0.0) if sustained_tokens else 0.0
    return {
        "generation_tokens": tokens,
        "generation_seconds": seconds,
        "generation_tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "time_to_first_token_seconds": float(time_to_first_token_seconds),
        "sustained_tokens": sustained_tokens,
        "sustained_seconds": sustained_seconds,
        "sustained_tokens_per_second": sustained_tokens / sustained_seconds if sustained_seconds > 0 else 0.0,
    }


class LlamaSpecEngine:
    """The fork's interface of a drafter with per-sequence state: ``begin`` with the decoded prompt,
    ``draft`` after the verified history, ``accept`` the verified count. ``Llama(draft_model=...)``
    takes one through ``spec_config()``: llama-ffi's engine then drafts in its own loop."""

    def begin(self, prompt_tokens: Sequence[int], seq_id: int = 0) -> None:
        pass

    def process(self, batch, seq_id: int = 0) -> None:
        pass

    def draft(self, input_ids: Sequence[int], *, n_past: int, id_last: int, n_max: int, seq_id: int = 0):
        raise NotImplementedError

    def accept(self, n_accepted: int, seq_id: int = 0) -> None:
        pass

    def spec_config(self) -> SpecConfig:
        raise NotImplementedError


class LlamaMTPDecoding(LlamaSpecEngine):
    """The fork's drafter over the target's own multi-token-prediction layers. Here that drafter
    lives in the engine's loop, beside the target's context it reads: ask for it with
    ``Llama(speculative=SpecConfig(type=SpeculativeType.DRAFT_MTP))``."""

    def __init__(self, config: SpecConfig, **targets) -> None:
        raise TypeError(
            "LlamaMTPDecoding is built by the engine in llama-ffi: pass "
            "Llama(speculative=SpecConfig(type=SpeculativeType.DRAFT_MTP)) instead"
        )


class LlamaNGramMapDecoding(LlamaSpecEngine):
    """n-gram map drafting (NGRAM_MAP_K, or NGRAM_MAP_K4V with up to ``max_entries_per_key``
    counted continuations) on llama-ffi's drafters, one per sequence, driven by the caller.
    ``min_hits`` counts earlier occurrences of the key. After a partly rejected draft a key drafts
    what was accepted, as llama.cpp's ``common_ngram_map_accept`` does (llama-ffi's engine, given
    ``spec_config()``, drafts twice that plus one: measured to lose fewer accepted tokens)."""

    def __init__(
        self,
        ngram_size: int = 3,
        num_pred_tokens: int = 10,
        spec_type: SpeculativeType = SpeculativeType.NGRAM_MAP_K,
        min_hits: int = 1,
        max_entries_per_key: int | None = None,
    ) -> None:
        if spec_type not in (SpeculativeType.NGRAM_MAP_K, SpeculativeType.NGRAM_MAP_K4V):
            raise ValueError(f"spec_type must be NGRAM_MAP_K or NGRAM_MAP_K4V, got {spec_type!r}")
        for name, value in (("ngram_size", ngram_size), ("num_pred_tokens", num_pred_tokens), ("min_hits", min_hits)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if spec_type == SpeculativeType.NGRAM_MAP_K4V and max_entries_per_key is None:
            max_entries_per_key = 4  # llama.cpp's COMMON_NGRAM_MAX_VALUES
        self.spec_type, self.ngram_size, self.num_pred_tokens = spec_type, ngram_size, num_pred_tokens
        self.min_hits, self.max_entries_per_key = min_hits, max_entries_per_key
        self._drafters: dict[int, NgramMapK | NgramMapK4V] = {}

    def _drafter(self, seq_id: int):
        drafter = self._drafters.get(seq_id)
        if drafter is None:
            if self.spec_type == SpeculativeType.NGRAM_MAP_K:
                drafter = NgramMapK(self.ngram_size, self.num_pred_tokens, self.min_hits)
            else:
                drafter = NgramMapK4V(self.ngram_size, self.num_pred_tokens, self.min_hits, self.max_entries_per_key)
            drafter.after_rejection = "accepted"
            self._drafters[seq_id] = drafter
        return drafter

    def begin(self, prompt_tokens: Sequence[int], seq_id: int = 0) -> None:
        self._drafters.pop(seq_id, None)
        self._drafter(seq_id).index.extend_to(list(prompt_tokens))

    def draft(self, input_ids: Sequence[int], *, n_past: int, id_last: int, n_max: int, seq_id: int = 0):
        return np.asarray(self._drafter(seq_id).draft(list(input_ids), n_max), dtype=np.intc)

    def accept(self, n_accepted: int, seq_id: int = 0) -> None:
        self._drafter(seq_id).accept(n_accepted)

    def spec_config(self) -> SpecConfig:
        return SpecConfig(
            type=self.spec_type,
            ngram_size_n=self.ngram_size,
            ngram_size_m=self.num_pred_tokens,
            ngram_min_hits=self.min_hits,
            ngram_max_entries_per_key=self.max_entries_per_key or 4,
        )


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
