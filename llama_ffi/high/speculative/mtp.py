"""The DRAFT_MTP drafter: the target model's own NextN / multi-token-prediction block.

An MTP block predicts token p+2 from the target's hidden state at p and the embedding of token
p+1. It runs in a second context over the same model (llama.cpp's MTP context type), one sequence
per slot of the target's, whose KV cache must hold, at every position p, the pair (token p, target
hidden state at p-1). The engine hands the drafter the target's hidden states after every decode
(``observe``); a draft first feeds the pairs its sequence lacks, then chains the block on its own
output: (last token, h[L-1]) at L, (draft 1, the block's h) at L+1, ...; the drafted entries are
cut again, since the target's verification brings the real ones. Where a position's hidden state
was never seen (a copied or restored cache) zeros stand in: valid positions, poorer drafts.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.context import Context, ContextParams, DecodeError, raise_for_decode_status
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.speculative.draft import SequenceDrafter, top_token, vocab_mismatch


def nextn_layers(model: Model) -> int:
    return lib.llama_model_n_layer_nextn(model.ptr)


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclasses.dataclass
class _Sequence:
    """One target sequence as the MTP block sees it."""

    hidden: np.ndarray  # row p+1: the target's hidden state at p (row 0: zeros)
    seen: list[int] = dataclasses.field(default_factory=list)  # tokens whose hidden states the rows hold
    fed: list[int] = dataclasses.field(default_factory=list)  # tokens whose pairs the MTP cache holds


class MtpDrafter:
    def __init__(
        self, target_context: Context, mtp_model: Model, own_model: bool, params: ContextParams, p_min: float
    ) -> None:
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
                raise RequestValueError(
                    f"the MTP block takes hidden states of width {self.n_embd}, the target model makes {target_embd}"
                )
            self.context = Context(mtp_model, dataclasses.replace(params, mtp=True))
            self._batch = lib.llama_batch_ext_init(self.context.ptr)
        except BaseException:
            self.close()
            raise
        # The target outputs its hidden state for every token of a batch; the MTP context for
        # the tokens it outputs (the drafted ones).
        lib.llama_ffi_set_embeddings_nextn(target_context.ptr, True, False)
        lib.llama_ffi_set_embeddings_nextn(self.context.ptr, True, True)
        self.sequences: dict[int, _Sequence] = {}
        self.n_vocab = mtp_model.n_vocab
        self._pos = ffi.new("llama_pos[1]")
        self._embd = ffi.new("struct llama_embd *")  # passed by value: one struct serves every add
        self._embd.n_rows, self._embd.n_embd = 1, self.n_embd
        self._keep: list[np.ndarray] = []  # hidden rows the batch points to until processed
        self._zeros = np.zeros(self.n_embd, dtype=np.float32)

    def for_sequence(self, seq: int) -> SequenceDrafter:
        return SequenceDrafter(self, seq)

    def _sequence(self, seq: int) -> _Sequence:
        found = self.sequences.get(seq)
        if found is None:
            # Grown on demand: a long context times a wide model would be a large array up front.
            found = self.sequences[seq] = _Sequence(np.zeros((64, self.n_embd), dtype=np.float32))
        return found

    # ---- the target's decodes ----------------------------------------------------------------
    def observe(self, segments: list[tuple[int, list[int], int, int]]) -> None:
        """The target just decoded a batch: ``segments`` are (sequence, tokens, first position,
        first batch row) of each sequence's run in it. Keep the hidden states."""
        if not segments:
            return
        n_rows = max(row + len(tokens) for _, tokens, _, row in segments)
        ptr = lib.llama_ffi_get_embeddings_nextn(self.target.ptr)
        if ptr == ffi.NULL:
            raise DecodeError("the target context gave no NextN hidden states")
        rows = np.frombuffer(ffi.buffer(ptr, 4 * n_rows * self.n_embd), dtype=np.float32).reshape(n_rows, -1)
        for seq, tokens, start, row in segments:
            s, n = self._sequence(seq), len(tokens)
            if start + n + 1 > len(s.hidden):
                grown = np.zeros((max(2 * len(s.hidden), start + n + 1), self.n_embd), dtype=np.float32)
                grown[: len(s.hidden)] = s.hidden
                s.hidden = grown
            s.hidden[start + 1 : start + 1 + n] = rows[row : row + n]
            del s.seen[start:]
            s.seen.extend(tokens)

    def _row(self, s: _Sequence, pos: int, valid: int) -> np.ndarray:
        return s.hidden[pos] if pos <= valid and pos < len(s.hidden) else self._zeros

    def _feed(self, seq: int, s: _Sequence, tokens: list[int]) -> None:
        """The MTP cache of ``seq`` holds the pairs of ``tokens`` (positions 0..)."""
        keep = _common(s.fed, tokens)
        self._cut(seq, s, keep)
        valid = _common(s.seen, tokens)
        step = self.context.n_batch
        for start in range(keep, len(tokens), step):
            self._clear()
            for pos in range(start, min(len(tokens), start + step)):
                self._add(seq, tokens[pos], pos, self._row(s, pos, valid), output=False)
            self._process()
        s.fed = list(tokens)

    # ---- drafting ----------------------------------------------------------------------------
    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]:
        last = len(history) - 1  # position of the newest token: not decoded by the target yet
        n_max = min(n_max, self.context.n_ctx - len(history))
        if n_max <= 0:
            return []
        s = self._sequence(seq)
        out: list[int] = []
        try:
            self._feed(seq, s, history[:last])
            token = history[-1]
            h = self._row(s, last, _common(s.seen, history))
            vocab = self.model.vocab_ptr
            for pos in range(last, last + n_max):
                self._clear()
                self._add(seq, token, pos, h, output=True)
                self._process()
                token, p = top_token(self.context, self.n_vocab, self.p_min)
                if p < self.p_min:
                    break
                out.append(token)
                if lib.llama_vocab_is_eog(vocab, token):
                    break
                row = lib.llama_ffi_get_embeddings_nextn_ith(self.context.ptr, -1)
                h = np.frombuffer(ffi.buffer(row, 4 * self.n_embd), dtype=np.float32).copy()
        except DecodeError:  # the MTP cells are full (idle slots' pairs too): start over, no draft now
            self.context.clear()
            for other in self.sequences.values():
                other.fed = []
            return []
        finally:
            self._cut(seq, s, last)  # the drafted entries; verification brings the real ones
        return out

    # ---- the MTP batch and cache --------------------------------------------------------------
    def _clear(self) -> None:
        lib.llama_batch_ext_clear(self._batch)
        self._keep = []

    def _add(self, seq: int, token: int, pos: int, h: np.ndarray, output: bool) -> None:
        idx = lib.llama_batch_ext_add_token(self._batch, seq, token)
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

    def _cut(self, seq: int, s: _Sequence, pos: int) -> None:
        self.context.seq_rm(seq, pos, -1)
        del s.fed[pos:]

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


def load_mtp_drafter(
    target: Model, target_context: Context, path, n_gpu_layers: int | None, params: ContextParams, p_min: float
) -> MtpDrafter:
    """The DRAFT_MTP engine over the target's built-in NextN block, or over the MTP GGUF ``path``
    (which must share the target's vocabulary and hidden width)."""
    if path is None:
        if nextn_layers(target) <= 0:
            raise RequestValueError(
                "speculative type DRAFT_MTP needs a model with NextN/MTP layers; this one has "
                "none (llama_model_n_layer_nextn = 0) and no draft_model_path MTP file was given"
            )
        return MtpDrafter(target_context, target, False, params, p_min)
    model = Model(path, ModelParams(n_gpu_layers=n_gpu_layers, progress=False, load_mtp=True))
    try:
        if nextn_layers(model) <= 0:
            raise RequestValueError(f"MTP file {path} has no NextN/MTP layers")
        why = vocab_mismatch(target, model)
        if why is not None:
            raise RequestValueError(f"MTP file {path} cannot draft for this model: {why}")
    except BaseException:
        model.close()
        raise
    return MtpDrafter(target_context, model, True, params, p_min)
