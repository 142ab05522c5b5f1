"""Verification: decode ``[last, draft...]`` in one batch, then let the target's own sampler walk
the outputs. A drafted token is accepted only when the sampler, at that output, picks exactly it;
the first disagreement ends the walk, and the rejected tail is cut from the KV cache.

The sampler is called once per emitted token, in order, on that token's logits, exactly as in
plain decoding, so its state (RNG, grammar, penalties) evolves the same: with a seed, sampled
output with speculation equals sampled output without it.
"""

from __future__ import annotations

import logging

from llama_ffi.high.speculative.stats import SpeculativeStats

log = logging.getLogger("llama_ffi")
# On a CPU a verification batch costs several single decodes (measured on 2 cores with SmolLM2:
# 16 tokens ~9 singles, 48 tokens ~20): a draft of one or two tokens costs more than it saves,
# and only long accepted drafts pay. The draft length follows the acceptance (doubling after a
# fully accepted draft, back to what was accepted + 1 after a rejection) between these bounds.
# On a GPU a batch costs about one decode and the bounds cost nothing.
INITIAL_WINDOW = 16
MIN_WINDOW = 4
MIN_DRAFT = 3   # shorter drafts are decoded plainly
# A draft with nothing accepted cost a verification for one token: the next drafts wait 1, 2,
# 4, ... tokens (up to MAX_PAUSE) until one is accepted again, so a drafter that keeps missing
# (a poor draft model, text unlike the history) costs little.
MAX_PAUSE = 32


class SpeculativeStepper:
    """Drop-in for ``Llama.eval_token`` in the generation loop: ``advance(token)`` makes the logits
    for the token after ``token`` available and returns their output index."""

    def __init__(self, engine, drafter, max_draft: int, budget: int, stats: SpeculativeStats) -> None:
        self.engine, self.drafter, self.stats = engine, drafter, stats
        self.max_draft = min(max_draft, engine.context.n_batch - 1)
        self.window = min(self.max_draft, INITIAL_WINDOW)
        n_min = getattr(engine.speculative, "draft_n_min", None)
        self.min_draft = min(self.max_draft, MIN_DRAFT if n_min is None else max(n_min, 1))
        self.pause = 0               # after consecutive misses: tokens to decode without drafting
        self.wait = 0                # tokens left in the current pause
        self.remaining = budget - 1  # tokens still to produce after the first
        self.draft: list[int] = []
        self.index = 0               # output whose token was sampled last
        self.base = 0                # position of ``last`` in the pending batch
        self.snapshot: bytes | None = None
        self.recurrent = engine.memory_is_recurrent

    def begin(self, prompt: list[int]) -> None:
        self.drafter.begin(prompt)

    def visible(self) -> list[int]:
        """The tokens before the one being sampled (the draft tail beyond it is not history)."""
        tokens = self.engine.tokens
        return tokens[:self.base + self.index + 1] if self.draft else tokens

    def advance(self, token: int) -> int:
        self.remaining -= 1
        if self.draft:
            i = self.index
            if i < len(self.draft) and token == self.draft[i]:
                self.index = i + 1
                self.stats.accepted_tokens += 1
                return self.index
            self._close_batch()
        engine = self.engine
        n_max = min(self.window, self.remaining)
        if self.wait > 0:
            self.wait -= 1
            n_max = 0
        draft = self.drafter.draft(engine.tokens + [token], n_max) if n_max > 0 else []
        if len(draft) < self.min_draft:
            draft = []
        if not draft:
            return engine.eval_token(token)
        self.stats.draft_calls += 1
        self.stats.drafted_tokens += len(draft)
        self.stats.verify_batches += 1
        self.base = len(engine.tokens)
        if self.recurrent:
            self.snapshot = engine.context.seq_state_bytes(0)
        engine.eval_outputs([token] + draft)
        self.draft, self.index = draft, 0
        return 0

    def settle(self) -> None:
        """Give up the pending batch's outputs (the stream is parked: its logits will be gone):
        keep what was verified, so the next ``advance`` decodes again."""
        if self.draft:
            self._close_batch()

    def _close_batch(self) -> None:
        """The walk over the pending batch ended at output ``index``: keep last + the accepted."""
        accepted, drafted = self.index, len(self.draft)
        keep = self.base + accepted + 1
        if keep < self.base + drafted + 1:
            self.stats.rollbacks += 1
            self._cut(keep)
            self.window = min(self.max_draft, max(accepted + 1, MIN_WINDOW))
            if accepted == 0:
                self.pause = min(MAX_PAUSE, 2 * self.pause or 1)
                self.wait = self.pause
        else:
            self.window = min(self.max_draft, 2 * self.window)
        if accepted:
            self.pause = 0
        self.drafter.accept(accepted)
        self.draft, self.index = [], 0

    def _cut(self, keep: int) -> None:
        engine = self.engine
        if not self.recurrent:
            engine.truncate(keep)
            return
        # Recurrent state cannot be cut at a position: restore the checkpoint taken before the
        # verification batch and evaluate the kept tokens again.
        kept = engine.tokens[self.base:keep]
        engine.restore_seq_state(self.snapshot, self.base)
        engine.eval_outputs(kept)
        self.snapshot = None

    def finish(self) -> None:
        """Generation ended after the token from output ``index``: leave the cache holding what
        plain decoding would (everything but the last generated token)."""
        if self.draft:
            keep = self.base + self.index + 1
            if keep < self.base + len(self.draft) + 1:
                self._cut(keep)
            self.draft, self.index = [], 0


def log_stats(stats: SpeculativeStats) -> None:
    log.info("%s", stats.summary())
