"""``LlamaEmbedding``: a ``Llama`` set up for embeddings and reranking."""

from __future__ import annotations

import os

from llama_ffi.high.llama import Llama


class LlamaEmbedding(Llama):
    """A ``Llama`` set up for embeddings and reranking: embeddings on, the model's own context
    length, big batches of many sequences (unified KV) so inputs are packed per decode, vectors
    L2-normalised unless told otherwise."""

    DEFAULT_NORMALIZE = 2

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int | None = 0,
        n_batch: int | None = 2048,
        n_ubatch: int | None = 2048,
        n_seq_max: int | None = None,
        pooling_type: int | None = None,
        **kwargs,
    ) -> None:
        kwargs.setdefault("progress", False)
        if n_seq_max is None:  # many sequences per decode, but never more than n_batch
            n_seq_max = min(64, n_batch) if isinstance(n_batch, int) and not isinstance(n_batch, bool) else 64
        super().__init__(
            model_path,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_ubatch,
            n_seq_max=n_seq_max,
            pooling_type=pooling_type,
            embeddings=True,
            kv_unified=True,
            **kwargs,
        )
