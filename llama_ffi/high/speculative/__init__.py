"""Speculative decoding: drafters propose tokens per sequence, and the engine verifies them in its
shared batch (``llama_ffi.high.engine.speculation``). Drafters: n-gram maps over a sequence's
history (``ngram.py``), draft models (``draft.py``) and the target's own MTP block (``mtp.py``).
How long a draft may be: ``window.py``. Settings in ``config.py``, per-generation figures in
``stats.py``."""

from __future__ import annotations

from llama_ffi import lib
from llama_ffi.high.context import ContextParams
from llama_ffi.high.speculative.config import SpecConfig, SpeculativeType
from llama_ffi.high.speculative.draft import load_draft_model
from llama_ffi.high.speculative.mtp import load_mtp_drafter
from llama_ffi.high.speculative.ngram import NgramMapK, NgramMapK4V
from llama_ffi.high.speculative.stats import SpeculativeStats
from llama_ffi.high.speculative.window import DraftWindow

__all__ = ["DraftWindow", "SpecConfig", "SpeculativeStats", "SpeculativeType", "create_drafter"]


def draft_context_params(target_context, config: SpecConfig) -> ContextParams:
    """A drafter's context mirrors the target's size, sequences and thread counts (llama.cpp's
    default thread count may exceed the cores the target was given), unless ``config`` sets the
    draft's own threads."""
    ptr = target_context.ptr
    return ContextParams(
        n_ctx=target_context.n_ctx,
        n_batch=target_context.n_batch,
        n_seq_max=target_context.n_seq_max,
        kv_unified=True,
        n_threads=config.draft_n_threads or lib.llama_n_threads(ptr),
        n_threads_batch=config.draft_n_threads_batch or lib.llama_n_threads_batch(ptr),
    )


class NgramDrafters:
    """N-gram drafters need nothing shared: each sequence gets its own index of its history."""

    observe = None

    def __init__(self, config: SpecConfig) -> None:
        self.config = config

    def for_sequence(self, seq: int):
        c = self.config
        if c.kind == SpeculativeType.NGRAM_MAP_K:
            return NgramMapK(c.ngram_size_n, c.ngram_size_m, c.ngram_min_hits)
        return NgramMapK4V(c.ngram_size_n, c.ngram_size_m, c.ngram_min_hits, c.ngram_max_entries_per_key)

    def close(self) -> None:
        pass


def draft_layers(config: SpecConfig) -> int | None:
    """The draft model's n_gpu_layers for ModelParams: llama.h's -1 offloads them all."""
    if config.draft_n_gpu_layers is None:
        return None
    return max(-1, config.resolved_draft_n_gpu_layers())


def create_drafter(config: SpecConfig, target, target_context):
    """The drafters for ``config`` over the target ``Model`` and its ``Context`` (None for type
    NONE): ``for_sequence(seq)`` gives one sequence's drafter (``draft(history, n_max)``,
    ``accept(n)``); ``observe`` (or None) takes the target's hidden states after each decode.
    Raises at construction for anything that would otherwise fail mid-generation."""
    config.validate(target_context.n_batch)
    kind = config.kind
    if kind == SpeculativeType.NONE:
        return None
    if kind in (SpeculativeType.NGRAM_MAP_K, SpeculativeType.NGRAM_MAP_K4V):
        return NgramDrafters(config)
    if kind == SpeculativeType.DRAFT:
        return load_draft_model(
            target,
            config.draft_model_path,
            draft_layers(config),
            draft_context_params(target_context, config),
            config.draft_p_min,
        )
    if kind == SpeculativeType.DRAFT_MTP:
        return load_mtp_drafter(
            target,
            target_context,
            config.draft_model_path,
            draft_layers(config),
            draft_context_params(target_context, config),
            config.draft_p_min,
        )
    raise NotImplementedError(f"speculative type {kind.name} has no engine in llama-ffi")
