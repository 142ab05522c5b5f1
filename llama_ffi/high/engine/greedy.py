"""The greedy run: one sequence alone, greedy, with no per-token Python hook (``runs_greedily``),
takes up to ``RUN`` tokens in one C call (Python between two decodes runs with cold caches:
measured 0.2-0.3 ms a token on this machine); a streamed request's run is one token, delivered
before the next decode. The tokens then go the way a step's do: recorded by
``Stepper.decoded``, taken one by one (``choices.accept``), emitted by ``Stepper.deliver``; tokens
decoded past the choice's end are cut."""

from __future__ import annotations

import time

from llama_ffi import ffi, lib
from llama_ffi.high.context import raise_for_decode_status
from llama_ffi.high.engine.choices import Choice, accept

RUN = 8  # tokens per greedy run: a request arriving meanwhile waits at most this


class GreedyRun:
    def __init__(self, stepper) -> None:
        self.stepper = stepper
        self._out = ffi.new("llama_token[]", RUN)
        self._status = ffi.new("int32_t[1]")

    def run(self, c: Choice, limit: int) -> int:
        """Up to ``limit`` tokens of ``c``; returns how many were decoded."""
        stepper = self.stepper
        request, slot, ctx = c.group.request, c.slot, stepper.context
        started = time.perf_counter()
        stepper.adapters.apply(ctx, request.settings.adapters)
        # A stream gets each token as it is sampled: a run of several would hold the first back
        # until the last is decoded (a second on a 7 B model on a CPU).
        n = 1 if request.streamed else min(limit, c.budget - c.produced)
        ids, biases, n_bias = c.chain.greedy_bias
        constraint, candidates = c.chain.constraint
        base = len(slot.tokens)
        ctx.abort_flag[0] = 0  # an abort meant for an earlier decode
        got = lib.llama_ffi_greedy_run(
            ctx.ptr,
            ctx.model.vocab_ptr,
            c.next_token,
            base,
            slot.seq,
            n,
            self._out,
            self._status,
            ctx.n_vocab,
            ids,
            biases,
            n_bias,
            constraint,
            candidates,
        )
        if ctx.remote is not None:
            ctx.remote.check()  # before the run's tokens count: they are garbage then
        if got:
            stepper.counters.evaluated += got
            stepper.decoded([(slot, [c.next_token, *self._out[0 : got - 1]], base, None, False)])
        if self._status[0] != 0:
            try:
                raise_for_decode_status(self._status[0])
            except BaseException as error:
                stepper.decode_failed(error, [slot])
                if got == 0 or c.group is None:  # nothing to take, or its request ended
                    return got
        vocab, settings = ctx.model.vocab_ptr, request.settings
        produced = c.produced
        for i in range(got):
            stepper.deliver(c, accept(c, self._out[i], vocab, stepper.piece, settings))
            if c.finish_reason is not None:
                if base + 1 + i < len(slot.tokens):
                    stepper.slots.cut(slot, base + 1 + i)  # decoded ahead of the end: not part of it
                break
        stepper.stats.generation_steps += got
        stepper.stats.generated_tokens += c.produced - produced
        stepper.stats.generation_s += time.perf_counter() - started
        if c.finish_reason is not None:
            stepper.finish([c])  # after the figures: a caller told its request ended reads them whole
        return got
