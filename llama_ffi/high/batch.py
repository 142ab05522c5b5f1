"""A reusable ``llama_batch``: allocated once per context, refilled for every decode."""

from __future__ import annotations

from collections.abc import Sequence

from llama_ffi import lib


class Batch:
    def __init__(self, capacity: int, n_seq_max: int = 1) -> None:
        self.capacity = capacity
        self._batch = lib.llama_batch_init(capacity, 0, n_seq_max)
        self._alive = True

    @property
    def c(self):
        return self._batch

    def fill(self, tokens: Sequence[int], start_pos: int, seq_id: int = 0, logits: str = "last") -> Batch:
        """Tokens at positions start_pos.. of one sequence; outputs for the last or for all."""
        n = len(tokens)
        if n > self.capacity:
            raise ValueError(f"batch of {n} tokens exceeds its capacity {self.capacity}")
        b = self._batch
        all_outputs = logits == "all"
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = start_pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq_id
            b.logits[i] = all_outputs
        if n:
            b.logits[n - 1] = True
        b.n_tokens = n
        return self

    def add(self, token: int, pos: int, seq_ids: Sequence[int], output: bool) -> None:
        b = self._batch
        i = b.n_tokens
        if i >= self.capacity:
            raise ValueError(f"batch is full ({self.capacity} tokens)")
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = len(seq_ids)
        for j, s in enumerate(seq_ids):
            b.seq_id[i][j] = s
        b.logits[i] = output
        b.n_tokens = i + 1

    def clear(self) -> None:
        self._batch.n_tokens = 0

    def close(self) -> None:
        if self._alive:
            self._alive = False
            lib.llama_batch_free(self._batch)

    def __del__(self) -> None:
        if getattr(self, "_alive", False):
            self.close()
