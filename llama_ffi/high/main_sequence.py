"""The main sequence: the slot of a ``Llama``'s latest request, and the single-sequence work that
llama-cpp-python's API does on it (``eval``, ``eval_prompt``, the warm-up, ``load_state``'s last
token). It decodes into that slot between the engine's steps (a task of its loop: ``Llama.run_on_context``),
and records each decode as a step does (``Engine.decoded``): every row's logits kept under
``logits_all``, an MTP drafter shown the hidden states."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llama_ffi import lib
from llama_ffi.high import multimodal
from llama_ffi.high.context import ContextLengthError
from llama_ffi.high.engine.slots import Slot
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.sampling import SamplerChain, SamplingParams


class MainSequence:
    def __init__(self, context, batch, engine, tokenizer, counters, logits_all: bool) -> None:
        self.context = context
        self.batch = batch
        self.engine = engine
        self.tokenizer = tokenizer
        self.counters = counters
        self.logits_all = logits_all

    @property
    def slot(self) -> Slot:
        return self.engine.slots.main

    def check_fits(self, tokens: Sequence[int], cached: int = 0) -> None:
        """Tokens inside the vocabulary that, after ``cached`` ones, fit in a sequence's cells."""
        self.tokenizer.check_tokens(tokens)
        n_ctx = self.context.n_ctx_seq
        if cached + len(tokens) > n_ctx:
            what = f"{cached} cached + {len(tokens)} new tokens" if cached else f"prompt has {len(tokens)} tokens"
            raise ContextLengthError(
                f"{what} but the context holds only {n_ctx} (n_ctx={n_ctx})", cached + len(tokens), n_ctx
            )

    def decode(self, tokens: Sequence[int], start: int) -> None:
        """Decode ``tokens`` at positions ``start``... into the main slot."""
        ctx, batch, slot = self.context, self.batch, self.slot
        logits = "all" if self.logits_all else "last"
        step = batch.capacity
        for i in range(0, len(tokens), step):
            part = list(tokens[i : i + step])
            try:
                ctx.decode(batch.fill(part, start + i, slot.seq, logits).c)
            except BaseException:  # the slot keeps what llama.cpp decoded of it
                self.engine.resync(slot)
                raise
            self.engine.decoded([(slot, part, start + i, 0, self.logits_all)])
            self.counters.evaluated += len(part)

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate ``tokens`` after what the main slot holds."""
        tokens = list(tokens)
        self.check_fits(tokens, cached=len(self.slot.tokens))
        self.decode(tokens, len(self.slot.tokens))

    def eval_prompt(self, prompt: Sequence[int]) -> None:
        """Make the main slot hold exactly ``prompt``, evaluating only what it does not hold."""
        slot = self.slot
        self.context.check_positions(slot.tokens, slot.seq)  # as the previous request left it
        if isinstance(prompt, multimodal.MediaPrompt):
            multimodal.evaluate(self.context, slot, prompt, self.decode, self.counters)
        elif not prompt:
            raise RequestValueError("prompt is empty")
        else:
            self.check_fits(prompt)
            keep = self.context.keep_prefix(slot.tokens, prompt, slot.seq)
            self.decode(list(prompt[keep:]), keep)
        self.context.check_positions(slot.tokens, slot.seq)

    def warm_up(self) -> None:
        """Decode BOS and EOS once and forget every cache (llama.cpp's warm-up at load), so that the
        first prompt does not pay for touching the weights; the counters do not move."""
        vocab = self.context.model.vocab_ptr
        tokens = [t for t in (lib.llama_vocab_bos(vocab), lib.llama_vocab_eos(vocab)) if t != lib.LLAMA_TOKEN_NULL] or [
            0
        ]
        evaluated = self.counters.evaluated
        self.decode(tokens, 0)
        self.engine.slots.forget_all()
        self.counters.evaluated = evaluated

    def sample(self, params: SamplingParams, grammar, processors: list, idx: int | None, n_ctx: int) -> int:
        """One token from the logits of the last evaluated position, with a fresh sampler chain that
        has seen the cached tokens (``Llama.sample``)."""
        tokens = self.slot.tokens
        if idx is not None and idx != len(tokens) - 1:
            raise RequestValueError(
                f"idx={idx}: only the last evaluated position ({len(tokens) - 1}) "
                "has logits in the context; read others from llm.scores"
            )
        chain = SamplerChain(params, self.context.model.vocab_ptr, self.context.n_vocab, n_ctx, grammar)
        try:
            chain.accept_prompt(tokens)
            for proc in processors:
                logits = self.context.logits(-1)
                np.copyto(logits, proc(np.asarray(tokens, dtype=np.intc), logits))
            return chain.sample(self.context.ptr, -1)
        finally:
            chain.close()
