"""Greedy decoding in runs: one C call decodes up to ``RUN`` tokens in a row (each picked by an
argmax over the logits, after the logit biases), then Python handles the tokens of the run. This is
the generation loop's fast path: its per-token Python cost is paid with warm caches, once per
run rather than between every two decodes.

Like the speculative stepper, it stands in for ``Llama.eval_token``; when the loop stops inside
a run, ``finish`` cuts the tokens decoded ahead from the KV cache, so the cache ends as after
plain decoding.
"""

from __future__ import annotations

from llama_ffi import ffi, lib
from llama_ffi.high.context import raise_for_decode_status

RUN = 8  # tokens per C call: a stream shows text in bursts of at most this many


class GreedyRun:
    def __init__(self, engine, budget: int, chain) -> None:
        self.engine = engine
        self.chain = chain
        self.bias = chain.greedy_bias  # (ids, biases, count)
        self.vocab = engine.context.model.vocab_ptr
        self.budget = budget
        self.produced = 0          # advance() calls so far: tokens emitted before the next one
        self.out = ffi.new("llama_token[]", RUN)
        self.status = ffi.new("int32_t[1]")
        self.n = self.i = 0        # tokens in the current run, tokens handed out of it
        self.base = 0              # cache length when the run started

    def sample(self, ctx_ptr, idx: int) -> int:
        if self.i < self.n:
            token = self.out[self.i]
            self.i += 1
            return token
        return self.chain.sample(ctx_ptr, idx)  # the prompt's logits

    def advance(self, token: int) -> int:
        self.produced += 1
        if self.i < self.n:
            return -1  # the run decoded it already
        engine = self.engine
        k = min(RUN, self.budget - self.produced)
        self.base = len(engine.tokens)
        ids, biases, n_bias = self.bias
        got = lib.llama_ffi_greedy_run(engine.context.ptr, self.vocab, token, k, self.out, self.status,
                                       engine.context.n_vocab, ids, biases, n_bias)
        if engine.context.remote is not None:
            engine.context.remote.check()  # before the run's tokens count: they are garbage then
        if got:  # decoded: token, then all but the last produced
            engine.tokens.append(token)
            engine.tokens.extend(self.out[0:got - 1])
            engine.n_evaluated += got
        if self.status[0] != 0:
            self.n = self.i = 0
            try:
                raise_for_decode_status(self.status[0])
            except KeyboardInterrupt:
                engine._resync_after_abort()
                raise
        self.n, self.i = got, 0
        return -1

    def finish(self) -> None:
        """The loop took ``i`` tokens of the run: the cache keeps the run's first token and the
        tokens before the last one taken."""
        if self.i < self.n:
            self.engine.truncate(self.base + self.i)
        self.n = self.i = 0
