"""Speculative decoding for one text sequence: a drafter proposes tokens, the target verifies them
in one batch (``verify.py``). Drafters: n-gram maps over the history (``ngram.py``) and draft
models (``draft.py``). Settings in ``config.py``, per-generation figures in ``stats.py``."""

from __future__ import annotations

from llama_ffi.high.speculative.config import SpecConfig, SpeculativeType
from llama_ffi.high.speculative.draft import load_draft_model, mtp_layers
from llama_ffi.high.speculative.ngram import NgramMapK, NgramMapK4V
from llama_ffi.high.speculative.stats import SpeculativeStats
from llama_ffi.high.speculative.verify import SpeculativeStepper, log_stats

__all__ = ["SpecConfig", "SpeculativeStats", "SpeculativeStepper", "SpeculativeType", "create_drafter",
           "log_stats"]


def create_drafter(config: SpecConfig, target, n_ctx: int, n_batch: int):
    """The drafter for ``config`` over the target ``Model`` (None for type NONE). Raises at
    construction for anything that would otherwise fail mid-generation."""
    config.validate(n_batch)
    kind = config.kind
    if kind == SpeculativeType.NONE:
        return None
    if kind == SpeculativeType.NGRAM_MAP_K:
        return NgramMapK(config.ngram_size_n, config.ngram_size_m, config.ngram_min_hits)
    if kind == SpeculativeType.NGRAM_MAP_K4V:
        return NgramMapK4V(config.ngram_size_n, config.ngram_size_m, config.ngram_min_hits,
                           config.ngram_max_entries_per_key)
    if kind == SpeculativeType.DRAFT:
        return load_draft_model(target, config.draft_model_path, config.draft_n_gpu_layers, n_ctx,
                                n_batch, config.draft_p_min)
    if kind == SpeculativeType.DRAFT_MTP:
        n_layers = mtp_layers(target)
        if n_layers <= 0 and config.draft_model_path is None:
            raise ValueError("speculative type DRAFT_MTP needs a model with NextN/MTP layers; this one has "
                             "none (llama_model_n_layer_nextn = 0) and no draft_model_path MTP file was given")
        raise NotImplementedError(
            "speculative type DRAFT_MTP: this model has NextN/MTP layers, but llama-ffi's MTP engine "
            "(hidden-state hand-over to an MTP context) is not implemented yet; use DRAFT or NGRAM_MAP_K")
    raise NotImplementedError(f"speculative type {kind.name} has no engine in llama-ffi")
