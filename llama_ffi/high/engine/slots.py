"""Slots: the context's sequences, each remembering what its part of the KV cache holds.

A slot keeps its tokens (``MEDIA_POSITION`` where media fill a cell), the media spans among them
and the adapter selection its cells were computed under, after its request ends: the next request
goes to the idle slot that shares the longest prefix with it (by token, media identity and
selection), else to the least recently used one, so several users' conversations each keep their
cache (llama-server's slot choice). The slot of the latest request is the *main* one:
llama-cpp-python's single-sequence attributes (``tokens``, ``eval``, ``save_state``) are about it.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from llama_ffi import lib
from llama_ffi.high.multimodal.prompt import MediaPrompt, cached_prefix

# llama-server's --slot-prompt-similarity: a cached slot is chosen for its prefix only when that
# covers this fraction of the prompt; otherwise the least recently used slot is.
SIMILARITY = 0.1


@dataclasses.dataclass(eq=False)
class Slot:
    seq: int
    tokens: list[int] = dataclasses.field(default_factory=list)  # one entry per cached position
    media_spans: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)  # (start, n, id)
    selection: object | None = None  # the adapters.Selection its cells were computed under
    owner: object | None = None  # the choice generating in it, None when idle
    last_used: int = 0
    prompt_cells: int = 0  # leading positions its last request's prompt filled (decoded as a prompt)
    scores: np.ndarray | None = None  # logits_all: row p holds the logits decoded at position p

    def keep_scores(self, start: int, rows: list[np.ndarray]) -> None:
        """Keep the logits of positions ``start``... (a Llama with ``logits_all``)."""
        end = start + len(rows)
        if self.scores is None or len(self.scores) < end:
            old = self.scores
            self.scores = np.zeros((max(end, 2 * (0 if old is None else len(old))), len(rows[0])), dtype=np.single)
            if old is not None:
                self.scores[: len(old)] = old
        for k, row in enumerate(rows):
            self.scores[start + k] = row

    def common_prefix(self, prompt, selection_key: tuple) -> int:
        """Leading positions of ``prompt`` this slot's cache can serve (see ``served_prefix``)."""
        if not self.tokens or self.selection is None or selection_key != self.selection.key:
            return 0
        return served_prefix(self.tokens, self.media_spans, prompt, self.prompt_cells)


def served_prefix(cached: list[int], media_spans, prompt, prompt_cells: int = 0) -> int:
    """Leading positions of ``prompt`` that a cache holding ``cached`` (with ``media_spans``) serves,
    short of the last one (decoded again: its logits). ``prompt_cells``: how many of ``cached`` a
    prompt filled (see ``cached_prefix``)."""
    if isinstance(prompt, MediaPrompt):
        return cached_prefix(cached, media_spans, prompt, prompt_cells)
    keep = 0
    for a, b in zip(cached, prompt):
        if a != b:
            break
        keep += 1
    return min(keep, len(prompt) - 1)


class SlotTable:
    """The slots of one context and the cells their caches take."""

    def __init__(self, context, n_slots: int) -> None:
        self.context = context
        self.slots = [Slot(seq) for seq in range(n_slots)]
        self.main = self.slots[0]  # the latest request's slot
        self.cache = None  # a prompt_cache.LlamaCache that keeps what slots lose (set_cache)
        # Set once the context's address was lent (Llama.ctx): code outside the engine (guidance)
        # may have decoded into the slots' sequences, so no idle slot's cells are trusted again.
        self.lent = False
        self._clock = itertools.count(1)
        # One pool of cells shared by every sequence (unified KV), or n_ctx_seq cells each.
        self.shared_cells = context.n_ctx_seq == context.n_ctx
        # A prefix can be copied into another slot (cells shared): one pool of attention cells only
        # (llama.cpp copies between separate pools, or recurrent states, only whole).
        self.can_fork = self.shared_cells and not context.model.memory_is_recurrent

    def idle(self) -> list[Slot]:
        return [s for s in self.slots if s.owner is None]

    def touch(self, slot: Slot) -> None:
        slot.last_used = next(self._clock)

    def choose(self, prompt, selection_key: tuple) -> tuple[Slot, int]:
        """The idle slot for ``prompt`` and how many of its positions it holds already: the longest
        common prefix, when similar enough; else the least recently used slot. Where that slot
        would lose more than it keeps (another user's conversation past a shared head, such as a
        system prompt) and an empty slot is idle, the empty one gets the prefix instead, as a copy
        that shares the cells."""
        candidates = self.idle()
        if self.lent:
            for slot in candidates:
                self.drop(slot)
        scored = [(s.common_prefix(prompt, selection_key), s) for s in candidates]
        best = max(p for p, _ in scored)
        if best == 0 or best < SIMILARITY * len(prompt):
            slot = min(candidates, key=lambda s: (s.last_used, s.seq))
            return slot, next(p for p, s in scored if s is slot)
        # among equal prefixes, the slot that loses the fewest cached positions, then the oldest
        slot = min((s for p, s in scored if p == best), key=lambda s: (len(s.tokens), s.last_used, s.seq))
        empty = next((s for s in candidates if not s.tokens), None)
        if (
            self.can_fork
            and empty is not None
            and len(slot.tokens) - best > best
            and self.context.holds_window(slot.seq, best)
        ):
            lib.llama_memory_seq_cp(self.context.memory, slot.seq, empty.seq, 0, best)
            empty.tokens = slot.tokens[:best]
            empty.media_spans = [sp for sp in slot.media_spans if sp[0] + sp[1] <= best]
            empty.selection = slot.selection
            empty.prompt_cells = min(slot.prompt_cells, best)
            return empty, best
        return slot, best

    def drop(self, slot: Slot) -> None:
        """Empty ``slot`` and its sequence without keeping anything (cells another user of the lent
        context may have written are not this slot's to store)."""
        lib.llama_memory_seq_rm(self.context.memory, slot.seq, -1, -1)
        slot.tokens, slot.media_spans, slot.selection, slot.prompt_cells = [], [], None, 0

    def keep_in_cache(self, slot: Slot) -> None:
        """Store what ``slot`` holds in the prompt cache, if one is set (llama-cpp-python stores
        after every completion, so that another Llama or process sharing the cache gets the hit)."""
        if self.cache is not None and slot.tokens:
            self.cache.remember(self.context, slot)

    def cut(self, slot: Slot, keep: int) -> int:
        """Cut the slot's cache back to its first ``keep`` positions; returns how many are kept
        (0 when the memory cannot serve them: see ``Context.cut_to``)."""
        if self.cache is not None and keep < len(slot.tokens):
            self.cache.remember(self.context, slot)
        keep = self.context.cut_to(slot.tokens, keep, slot.seq)
        slot.media_spans = [sp for sp in slot.media_spans if sp[0] + sp[1] <= keep]
        slot.prompt_cells = min(slot.prompt_cells, keep)
        return keep

    def forget(self, slot: Slot) -> None:
        if self.cache is not None and slot.tokens:
            self.cache.remember(self.context, slot)
        lib.llama_memory_seq_rm(self.context.memory, slot.seq, -1, -1)
        slot.tokens = []
        slot.media_spans = []
        slot.selection = None
        slot.prompt_cells = 0

    def spare(self, n: int) -> list[Slot]:
        """Up to ``n`` idle slots emptied for work in sequences of its own (embeddings): empty ones
        first, then the least recently used; what they held goes to the prompt cache, if one is set."""
        chosen = sorted(self.idle(), key=lambda s: (bool(s.tokens), s.last_used))[:n]
        for slot in chosen:
            self.forget(slot)
        return chosen

    def forget_adapter(self, name: str) -> None:
        """Forget the idle caches computed under the LoRA adapter ``name`` (being unloaded)."""
        for slot in self.idle():
            if slot.selection is not None and any(a.name == name for a, _ in slot.selection.loras):
                self.forget(slot)

    def forget_all(self) -> None:
        self.context.clear()
        for slot in self.slots:
            slot.tokens, slot.media_spans, slot.selection = [], [], None

    def cached_cells(self, exclude=()) -> int:
        """Cells the idle slots' caches hold (an upper bound: forked prefixes share cells)."""
        return sum(len(s.tokens) for s in self.slots if s.owner is None and s not in exclude)

    def evict_for(self, cells: int, limit: int, keep=()) -> bool:
        """Forget idle caches, least recently used first, until ``cells`` more fit under ``limit``
        next to what the other idle slots hold; False when even that is not enough."""
        for slot in sorted((s for s in self.idle() if s not in keep and s.tokens), key=lambda s: s.last_used):
            if cells + self.cached_cells(keep) <= limit:
                break
            self.forget(slot)
        return cells + self.cached_cells(keep) <= limit

    def idle_main(self) -> bool:
        """Make the main slot an idle one for single-sequence work: while the latest request still
        generates in it, the least recently used idle slot becomes the main one. False when none
        is idle."""
        if self.main.owner is None:
            return True
        spare = min(self.idle(), key=lambda s: s.last_used, default=None)
        if spare is None:
            return False
        self.main = spare
        return True

    def check(self, slot: Slot) -> None:
        """The debug check (``LLAMA_FFI_CHECK_CACHE=1``) of one slot's bookkeeping."""
        self.context.check_positions(slot.tokens, slot.seq)
