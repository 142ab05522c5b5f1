"""Speculative decoding inside the engine, as llama-server does it: a speculating choice keeps its
own drafter (its slot's sequence in a draft context, or its own n-gram index), its draft window and
its figures. Each step puts ``[next token] + draft`` of such a choice into the shared batch, with an
output row for each, next to plain choices and prompts; then the choice's own sampler chain walks
the rows in order. A drafted token is kept only where the sampler picks exactly it, and the sampler
sees every kept token once, in order, as in plain decoding: greedy and seeded sampled output equal
plain decoding's. The rejected cells are removed from the choice's sequence (a recurrent state,
which cannot be cut, is restored from a copy taken before the step and the kept tokens decoded
again).
"""

from __future__ import annotations

import dataclasses
import time

from llama_ffi.high.engine.choices import Choice, sample
from llama_ffi.high.speculative import DraftWindow, SpecConfig, SpeculativeStats

# Drafts of several choices share one batch; on a CPU the cost of a batch grows with its tokens
# (16 tokens ~9 single decodes on 2 cores), so a step carries at most this many drafted tokens.
STEP_DRAFT_TOKENS = 48
# A draft pays when a step is short of tokens: one sequence's step costs a whole decode for one
# token, and drafted tokens ride along at a fraction of that. With more sequences generating, the
# step is already a batch and every drafted token costs about what a plain one does, so a rejected
# one is lost time: measured (SmolLM2 Q4_1, 2 cores, repetitive prompts, the library's defaults)
# 1.5x plain with one caller, 0.94x with 4 and 0.99x with 8 when every sequence drafted. Steps
# with more generating sequences than this decode them plainly.
DRAFTING_SEQUENCES = 2


@dataclasses.dataclass(eq=False)
class Drafting:
    """A speculating choice's drafter, window, pending draft and figures."""

    drafter: object
    window: DraftWindow
    stats: SpeculativeStats
    draft: list[int] = dataclasses.field(default_factory=list)  # in this step's batch after next_token
    base: int = 0  # position of the choice's next token in this step's batch
    snapshot: bytes | None = None  # recurrent memory: its sequence's state before the step
    started: float = dataclasses.field(default_factory=time.perf_counter)


class Speculation:
    """A ``Llama``'s drafters (``speculative.create_drafter``) as the engine uses them."""

    def __init__(self, config: SpecConfig, drafters, context) -> None:
        self.config = config
        self.drafters = drafters
        self.observe = drafters.observe  # MTP: the target's hidden states after every decode
        self.recurrent = context.model.memory_is_recurrent
        self.max_draft = min(config.max_draft, context.n_batch - 1)
        self.last_stats: SpeculativeStats | None = None

    def start(self, c: Choice) -> None:
        """``c`` has its slot: it speculates from its next token on."""
        c.drafting = Drafting(
            self.drafters.for_sequence(c.slot.seq),
            DraftWindow(self.max_draft, self.config.draft_n_min),
            SpeculativeStats(type=self.config.kind.name),
        )

    def propose(self, c: Choice, room: int) -> list[int]:
        """The draft to verify after ``c.next_token`` in this step (at most ``room`` tokens; [] to
        decode the token plainly)."""
        d = c.drafting
        n = d.window.length(min(room, c.budget - c.produced - 1))
        draft = d.drafter.draft(c.history, n) if n > 0 else []
        if not d.window.worth_verifying(draft):
            d.window.decoded_plainly()
            draft = []
        else:
            d.stats.draft_calls += 1
            d.stats.drafted_tokens += len(draft)
            d.stats.verify_batches += 1
        d.draft = draft
        return draft

    def verify(self, c: Choice, pos: int, context) -> None:
        """``c``'s draft (``propose``) is in this step's batch after its next token, which sits at
        ``pos``: a recurrent state, which cannot be cut, is copied before the decode."""
        c.drafting.base = pos
        if c.drafting.draft and self.recurrent:
            c.drafting.snapshot = context.seq_state_bytes(c.slot.seq)

    def walk(self, c: Choice, ctx, ctx_ptr, vocab, piece, settings, pristine: dict, deliver) -> int:
        """Sample ``c``'s rows of this step in order while the sampler agrees with the draft, each
        token's event to ``deliver``; returns how many drafted tokens keep their cells (the cells
        after them are rejected)."""
        d, first = c.drafting, c.output
        draft = d.draft
        kept = 0
        if c.produced == 0:
            d.stats.ttft_s = time.perf_counter() - d.started
            d.started = time.perf_counter()
        for i in range(len(draft) + 1):
            c.output = first + i
            deliver(c, sample(c, ctx, ctx_ptr, vocab, piece, settings, pristine))
            kept = i
            if c.finish_reason is not None or i == len(draft) or c.next_token != draft[i]:
                break
        if draft:
            d.stats.accepted_tokens += kept
            d.window.settle(kept, len(draft))
            d.drafter.accept(kept)
            if kept < len(draft):
                d.stats.rollbacks += 1
        return kept

    def drop_rejected(self, c: Choice, kept: int, context, batch, stepper) -> None:
        """The cells after ``c``'s next token and its ``kept`` drafted tokens leave its sequence."""
        d, slot = c.drafting, c.slot
        draft, snapshot = d.draft, d.snapshot
        d.draft, d.snapshot = [], None
        keep = d.base + 1 + kept
        if not draft or slot is None or keep >= len(slot.tokens):
            return
        if snapshot is None:
            if not context.seq_rm(slot.seq, keep, -1):
                raise RuntimeError(f"llama.cpp could not cut sequence {slot.seq} at {keep}")
            del slot.tokens[keep:]
            return
        # recurrent: back to the state before the step, then the kept tokens again
        again = slot.tokens[d.base : keep]
        context.set_seq_state_bytes(slot.seq, snapshot)
        del slot.tokens[d.base :]
        context.decode(batch.fill(again, d.base, slot.seq).c)
        stepper.counters.evaluated += len(again)
        stepper.decoded([(slot, again, d.base, 0, False)])

    def finished(self, c: Choice) -> None:
        d = c.drafting
        d.stats.generated_tokens = c.produced
        d.stats.generation_s = time.perf_counter() - d.started
        self.last_stats = d.stats

    def close(self) -> None:
        self.drafters.close()
