"""Speculative decoding for one text sequence: a drafter proposes tokens, the target verifies them
in one batch (``verify.py``). Drafters: n-gram maps over the history (``ngram.py``), draft
models (``draft.py``) and the target's own MTP block (``mtp.py``). Settings in ``config.py``,
per-generation figures in ``stats.py``."""

from __future__ import annotations

from llama_ffi import lib
from llama_ffi.high.context import ContextParams
from llama_ffi.high.speculative.config import SpecConfig, SpeculativeType
from llama_ffi.high.speculative.draft import load_draft_model
from llama_ffi.high.speculative.mtp import load_mtp_drafter
from llama_ffi.high.speculative.ngram import NgramMapK, NgramMapK4V
from llama_ffi.high.speculative.stats import SpeculativeStats
from llama_ffi.high.speculative.verify import SpeculativeStepper, log_stats

__all__ = ["SpecConfig", "SpeculativeStats", "SpeculativeStepper", "SpeculativeType", "create_drafter",
           "log_stats"]


def draft_context_params(target_context) -> ContextParams:
    """A drafter's context mirrors the target's size and thread counts (llama.cpp's default
    thread count may exceed the cores the target was given)."""
    ptr = target_context.ptr
    return ContextParams(n_ctx=target_context.n_ctx, n_batch=target_context.n_batch,
                         n_threads=lib.llama_n_threads(ptr), n_threads_batch=lib.llama_n_threads_batch(ptr))


def create_drafter(config: SpecConfig, target, target_context):
    """The drafter for ``config`` over the target ``Model`` and its ``Context`` (None for type
    NONE). Raises at construction for anything that would otherwise fail mid-generation."""
    config.validate(target_context.n_batch)
    kind = config.kind
    if kind == SpeculativeType.NONE:
        return None
    if kind == SpeculativeType.NGRAM_MAP_K:
        return NgramMapK(config.ngram_size_n, config.ngram_size_m, config.ngram_min_hits)
    if kind == SpeculativeType.NGRAM_MAP_K4V:
        return NgramMapK4V(config.ngram_size_n, config.ngram_size_m, config.ngram_min_hits,
                           config.ngram_max_entries_per_key)
    if kind == SpeculativeType.DRAFT:
        return load_draft_model(target, config.draft_model_path, config.draft_n_gpu_layers,
                                draft_context_params(target_context), config.draft_p_min)
    if kind == SpeculativeType.DRAFT_MTP:
        return load_mtp_drafter(target, target_context, config.draft_model_path, config.draft_n_gpu_layers,
                                draft_context_params(target_context), config.draft_p_min)
    raise NotImplementedError(f"speculative type {kind.name} has no engine in llama-ffi")
