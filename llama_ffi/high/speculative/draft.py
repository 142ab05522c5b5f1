"""The DRAFT drafter: a separate small draft GGUF with the target's vocabulary.

The draft model keeps its own context, with one sequence per slot of the target's: each
sequence's KV cache mirrors that slot's verified history. Each call keeps the common prefix,
drops the rejected tail, evaluates what is new, then drafts greedily.
"""

from __future__ import annotations

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.batch import Batch
from llama_ffi.high.context import Context, ContextParams, DecodeError
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.model import Model, ModelParams


def vocab_mismatch(target: Model, draft: Model) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (None when their vocabularies agree).
    Token ids must mean the same text: the target verifies the draft's ids as its own."""
    tv, dv = target.vocab_ptr, draft.vocab_ptr
    if lib.llama_vocab_type(tv) != lib.llama_vocab_type(dv):
        return f"vocabulary types differ (target {lib.llama_vocab_type(tv)}, draft {lib.llama_vocab_type(dv)})"
    if target.n_vocab != draft.n_vocab:
        return f"vocabulary sizes differ (target {target.n_vocab}, draft {draft.n_vocab})"
    for name in ("bos", "eos", "eot"):
        fn = getattr(lib, f"llama_vocab_{name}")
        if fn(tv) != fn(dv):
            return f"{name.upper()} tokens differ (target {fn(tv)}, draft {fn(dv)})"
    for token in range(target.n_vocab):
        a, b = lib.llama_vocab_get_text(tv, token), lib.llama_vocab_get_text(dv, token)
        if ffi.string(a) != ffi.string(b):
            return f"token {token} differs (target {ffi.string(a)!r}, draft {ffi.string(b)!r})"
    return None


def top_token(context: Context, n_vocab: int, p_min: float) -> tuple[int, float]:
    """A drafter's most likely next token at its last output, and its probability (computed only
    when ``p_min`` needs it; 1.0 otherwise)."""
    token = lib.llama_ffi_argmax(context.ptr, -1, n_vocab, ffi.NULL, ffi.NULL, 0)
    if p_min <= 0.0:
        return token, 1.0
    logits = context.logits(-1)
    return token, 1.0 / float(np.exp(logits.astype(np.float64) - float(logits[token])).sum())


class SequenceDrafter:
    """A shared drafter's view for one target sequence: ``draft(history, n_max)`` drafts in that
    sequence (a draft model's, an MTP block's), ``accept`` has nothing to do (the next draft call
    cuts the rejected tail)."""

    def __init__(self, source, seq: int) -> None:
        self.source, self.seq = source, seq

    def draft(self, history: list[int], n_max: int) -> list[int]:
        return self.source.draft(self.seq, history, n_max)

    def accept(self, n_accepted: int) -> None:
        pass


class ModelDrafter:
    """Greedy drafts from a context over ``model`` (owned when ``own_model``), one sequence per
    target slot (``for_sequence``)."""

    observe = None  # it follows the history by tokens, not the target's decodes

    def __init__(self, model: Model, params: ContextParams, p_min: float, own_model: bool) -> None:
        self.model = model
        self._own_model = own_model
        self.p_min = p_min
        try:
            self.context = Context(model, params)
        except Exception:
            if own_model:
                model.close()
            raise
        self.batch = Batch(self.context.n_batch)
        self.tokens: dict[int, list[int]] = {}  # per sequence: what its draft KV cache holds
        self._n_vocab = model.n_vocab

    def for_sequence(self, seq: int) -> SequenceDrafter:
        return SequenceDrafter(self, seq)

    def _sync(self, seq: int, history: list[int]) -> None:
        """Make sequence ``seq`` hold ``history`` with the last token's logits ready."""
        tokens = self.tokens.setdefault(seq, [])
        keep = self.context.keep_prefix(tokens, history, seq)
        new = history[keep:]
        step = self.batch.capacity
        for i in range(0, len(new), step):
            part = new[i : i + step]
            self.context.decode(self.batch.fill(part, keep + i, seq).c)
            tokens.extend(part)

    def _top(self) -> tuple[int, float]:
        return top_token(self.context, self._n_vocab, self.p_min)

    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]:
        room = self.context.n_ctx - len(history)
        n_max = min(n_max, room)
        if n_max <= 0:
            return []
        try:
            self._sync(seq, history)
        except DecodeError:  # the draft cells are full (idle slots' histories too): start over, no draft now
            self.context.clear()
            self.tokens = {}
            return []
        tokens = self.tokens[seq]
        vocab = self.model.vocab_ptr
        out: list[int] = []
        while True:
            token, p = self._top()
            if p < self.p_min:
                break
            out.append(token)
            if len(out) >= n_max or lib.llama_vocab_is_eog(vocab, token):
                break
            try:
                self.context.decode(self.batch.fill([token], len(tokens), seq).c)
            except DecodeError:
                break
            tokens.append(token)
        return out

    def close(self) -> None:
        self.batch.close()
        self.context.close()
        if self._own_model:
            self.model.close()


def load_draft_model(
    target: Model, path, n_gpu_layers: int | None, params: ContextParams, p_min: float
) -> ModelDrafter:
    """The DRAFT engine: loads ``path`` and checks its vocabulary against the target's."""
    model = Model(path, ModelParams(n_gpu_layers=n_gpu_layers, progress=False))
    why = vocab_mismatch(target, model)
    if why is not None:
        model.close()
        raise RequestValueError(f"draft model {path} cannot draft for this model: {why}")
    return ModelDrafter(model, params, p_min, own_model=True)
