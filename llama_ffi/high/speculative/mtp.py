"""The DRAFT_MTP drafter: the target model's own NextN / multi-token-prediction block.

An MTP block predicts token p+2 from the target's hidden state at p and the embedding of token
p+1. It runs in a second context over the same model (llama.cpp's MTP context type), whose KV
cache must hold, at every position p, the pair (token p, target hidden state at p-1). So the
drafter watches every target decode (``observe``: the engine calls it after each one), keeps the
target's hidden state per position, and feeds the pairs to its cache. A draft then chains the
block on its own output: (last token, h[L-1]) at L, (draft 1, the block's h) at L+1, ...; the
drafted entries are cut again, since the target's verification feeds the real ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.context import Context, ContextParams, DecodeError, raise_for_decode_status
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.speculative.draft import top_token, vocab_mismatch


def nextn_layers(model: Model) -> int:
    return lib.llama_model_n_layer_nextn(model.ptr)


class MtpDrafter:
    def __init__(self, target_context: Context, mtp_model: Model, own_model: bool, params: ContextParams,
                 p_min: float) -> None:
        self.target = target_context
        self.model = mtp_model
        self._own_model = own_model
        self.p_min = p_min
        self.n_embd = lib.llama_model_n_embd_out(mtp_model.ptr)
        self.context = None
        self._batch = ffi.NULL
        try:
            target_embd = lib.llama_model_n_embd_out(target_context.model.ptr)
            if self.n_embd != target_embd:
                raise ValueError(f"the MTP block takes hidden states of width {self.n_embd}, the target "
                                 f"model makes {target_embd}")
            self.context = Context(mtp_model, dataclasses.replace(params, mtp=True))
            self._batch = lib.llama_batch_ext_init(self.context.ptr)
        except BaseException:
            self.close()
            raise
        # The target outputs its hidden state for every token of a batch; the MTP context for
        # the tokens it outputs (the drafted ones).
        lib.llama_ffi_set_embeddings_nextn(target_context.ptr, True, False)
        lib.llama_ffi_set_embeddings_nextn(self.context.ptr, True, True)
        # Row p+1: the target's hidden state at p (row 0: zeros, before the first token). Grown
        # on demand: a long context times a wide model would be a large array up front.
        self.hidden = np.zeros((64, self.n_embd), dtype=np.float32)
        self.n_fed = 0  # MTP cache positions [0, n_fed) hold the pairs of the target's tokens
        self.n_vocab = mtp_model.n_vocab
        self._pos = ffi.new("llama_pos[1]")
        self._embd = ffi.new("struct llama_embd *")  # passed by value: one struct serves every add
        self._embd.n_rows, self._embd.n_embd = 1, self.n_embd
        self._keep: list[np.ndarray] = []  # hidden rows the batch points to until processed

    # ---- the target's decodes ----------------------------------------------------------------
    def observe(self, tokens: list[int], start: int) -> None:
        """The target just decoded ``tokens`` at positions ``start``...: keep its hidden states and
        feed (token p, h[p-1]) for each of them to the MTP cache."""
        n = len(tokens)
        ptr = lib.llama_ffi_get_embeddings_nextn(self.target.ptr)
        if ptr == ffi.NULL:
            raise DecodeError("the target context gave no NextN hidden states")
        rows = np.frombuffer(ffi.buffer(ptr, 4 * n * self.n_embd), dtype=np.float32)
        if start + n + 1 > len(self.hidden):
            grown = np.zeros((max(2 * len(self.hidden), start + n + 1), self.n_embd), dtype=np.float32)
            grown[:len(self.hidden)] = self.hidden
            self.hidden = grown
        self.hidden[start + 1:start + 1 + n] = rows.reshape(n, self.n_embd)
        self._cut(start)
        self._clear()
        for k, token in enumerate(tokens):
            self._add(token, start + k, self.hidden[start + k], output=False)
        self._process()
        self.n_fed = start + n

    # ---- the target's cache replaced (load_state, a parked stream resumed) ----------------------
    def snapshot(self) -> np.ndarray:
        """The hidden states of the positions fed so far (what resync needs to be exact)."""
        return self.hidden[:self.n_fed + 1].copy()

    def resync(self, tokens: list[int], hidden: np.ndarray | None = None) -> None:
        """The target's cache now holds ``tokens``: feed the MTP cache their pairs again, from
        ``hidden`` (a snapshot) where given, else from zeros (valid positions, poorer drafts)."""
        n = len(tokens)
        self.hidden = np.zeros((max(64, n + 1), self.n_embd), dtype=np.float32)
        if hidden is not None:
            rows = min(len(hidden), n + 1)
            self.hidden[:rows] = hidden[:rows]
        self.context.clear()
        self.n_fed = 0
        step = self.context.n_batch
        for start in range(0, n, step):
            self._clear()
            for pos in range(start, min(n, start + step)):
                self._add(tokens[pos], pos, self.hidden[pos], output=False)
            self._process()
        self.n_fed = n

    # ---- drafting ----------------------------------------------------------------------------
    def begin(self, prompt: list[int]) -> None:
        pass  # the prompt's decode went through observe

    def draft(self, history: list[int], n_max: int) -> list[int]:
        last = len(history) - 1  # position of the newest token: not decoded by the target yet
        n_max = min(n_max, self.context.n_ctx - len(history))
        if n_max <= 0:
            return []
        self._cut(last)
        token = history[-1]
        h = self.hidden[last] if last < len(self.hidden) else np.zeros(self.n_embd, dtype=np.float32)
        vocab = self.model.vocab_ptr
        out: list[int] = []
        try:
            for pos in range(last, last + n_max):
                self._clear()
                self._add(token, pos, h, output=True)
                self._process()
                token, p = top_token(self.context, self.n_vocab, self.p_min)
                if p < self.p_min:
                    break
                out.append(token)
                if lib.llama_vocab_is_eog(vocab, token):
                    break
                row = lib.llama_ffi_get_embeddings_nextn_ith(self.context.ptr, -1)
                h = np.frombuffer(ffi.buffer(row, 4 * self.n_embd), dtype=np.float32).copy()
        finally:
            self._cut(last)  # the drafted entries; verification feeds the real ones
        return out

    def accept(self, n_accepted: int) -> None:
        pass  # the verification batch went through observe; draft() cuts what was rejected

    # ---- the MTP batch and cache --------------------------------------------------------------
    def _clear(self) -> None:
        lib.llama_batch_ext_clear(self._batch)
        self._keep = []

    def _add(self, token: int, pos: int, h: np.ndarray, output: bool) -> None:
        idx = lib.llama_batch_ext_add_token(self._batch, 0, token)
        if idx < 0:
            raise DecodeError(f"MTP batch full (llama_batch_ext_add_token returned {idx})")
        self._pos[0] = pos
        lib.llama_batch_ext_set_pos(self._batch, idx, self._pos)
        row = np.ascontiguousarray(h, dtype=np.float32)
        self._keep.append(row)
        self._embd.data = ffi.cast("const float *", ffi.from_buffer(row))
        # the target's hidden state is the MTP block's "state" input (b11549; it was the token's embedding)
        if not lib.llama_batch_ext_set_embd_state(self._batch, idx, self._embd[0]):
            raise DecodeError("llama.cpp refused the hidden state for the MTP batch")
        if output:
            lib.llama_batch_ext_set_output_logits(self._batch, idx, True)

    def _process(self) -> None:
        rc = lib.llama_process(self.context.ptr, lib.LLAMA_PROCESS_TYPE_DECODE, self._batch)
        self._keep = []
        if rc != 0:
            raise_for_decode_status(rc)

    def _cut(self, pos: int) -> None:
        self.context.seq_rm(0, pos, -1)
        self.n_fed = min(self.n_fed, pos)

    def close(self) -> None:
        if self._batch != ffi.NULL:
            lib.llama_batch_ext_free(self._batch)
            self._batch = ffi.NULL
        if self.context is not None:
            self.context.close()
        if self._own_model and not self.model.closed:
            self.model.close()

    def __del__(self) -> None:
        if getattr(self, "_batch", ffi.NULL) != ffi.NULL:
            self.close()


def load_mtp_drafter(target: Model, target_context: Context, path, n_gpu_layers: int | None,
                     params: ContextParams, p_min: float) -> MtpDrafter:
    """The DRAFT_MTP engine over the target's built-in NextN block, or over the MTP GGUF ``path``
    (which must share the target's vocabulary and hidden width)."""
    if path is None:
        if nextn_layers(target) <= 0:
            raise ValueError("speculative type DRAFT_MTP needs a model with NextN/MTP layers; this one has "
                             "none (llama_model_n_layer_nextn = 0) and no draft_model_path MTP file was given")
        return MtpDrafter(target_context, target, False, params, p_min)
    model = Model(path, ModelParams(n_gpu_layers=n_gpu_layers, progress=False, load_mtp=True))
    try:
        if nextn_layers(model) <= 0:
            raise ValueError(f"MTP file {path} has no NextN/MTP layers")
        why = vocab_mismatch(target, model)
        if why is not None:
            raise ValueError(f"MTP file {path} cannot draft for this model: {why}")
    except BaseException:
        model.close()
        raise
    return MtpDrafter(target_context, model, True, params, p_min)
