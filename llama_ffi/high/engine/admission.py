"""Admission: which waiting group gets which slots, and what their caches already hold.

Groups are admitted strictly in arrival order, as soon as their choices find idle slots and KV
cells. The leader's slot is the idle one sharing the longest prefix with the prompt
(``SlotTable.choose``), or a prompt cache's stored state sharing more (restored into it); the
siblings take the least recently used idle slots and get the prompt's cells once it is evaluated.
Cancelled requests are reaped here too, before anything is admitted.
"""

from __future__ import annotations

from llama_ffi._logging import logger
from llama_ffi.high.adapters import Selection
from llama_ffi.high.engine.choices import Group, kv_cells
from llama_ffi.high.engine.request import RequestCancelled
from llama_ffi.high.engine.slots import Slot, SlotTable
from llama_ffi.high.engine.work import Work


def copy_of(selection: Selection) -> Selection:
    """A slot's record of a selection, not the request's own (which marks its adapters in use)."""
    return Selection(selection.loras, selection.cvec)


class Admission:
    def __init__(self, context, slots: SlotTable, work: Work) -> None:
        self.context = context
        self.slots = slots
        self.work = work

    def reap(self) -> None:
        """Drop the work of cancelled requests and of those whose reader is gone (their slots keep
        what they decoded; a stream's keeps what its caller saw)."""
        work = self.work
        for g in [g for g in work.waiting if g.request.abandoned]:
            work.waiting.remove(g)
            work.end_request(g.request, RequestCancelled(g.request.cancel_reason))
        for g in [g for g in work.evaluating if g.request.abandoned]:
            work.evaluating.remove(g)
            for c in g.choices:
                work.release(c)
            work.end_request(g.request, RequestCancelled(g.request.cancel_reason))
        unread: dict[int, dict[int, int]] = {}
        for c in [c for c in work.generating if c.group.request.abandoned]:
            request = c.group.request
            if request.streamed:  # the slot keeps what the caller saw: prompt and tokens read
                counts = unread.setdefault(id(request), request.channel.unread_tokens())
                seen = c.produced - counts.get(c.index, 0)
                self.slots.cut(c.slot, min(len(c.slot.tokens), len(c.prompt) + max(seen - 1, 0)))
            work.generating.remove(c)
            work.release(c)
            work.end_request(request, RequestCancelled(request.cancel_reason))

    def ready(self) -> bool:
        """Whether the next waiting group can be admitted now."""
        work = self.work
        return bool(work.waiting) and not work.stalled and self._fits(work.waiting[0])

    def _fits(self, group: Group) -> bool:
        """Enough idle slots for the group's choices, and its pinned slot (if any) among them."""
        pinned = group.request.slot_id
        if pinned is not None and self.slots.slots[pinned].owner is not None:
            return False
        return len(self.slots.idle()) >= len(group.choices)

    def _leader_slot(self, group: Group) -> tuple[Slot, int]:
        """The leader's slot (the one the request pins, else the best idle one) and what it holds."""
        key = group.request.settings.adapters.key
        pinned = group.request.slot_id
        if pinned is None:
            return self.slots.choose(group.prompt, key)
        slot = self.slots.slots[pinned]
        return slot, slot.common_prefix(group.prompt, key)

    def admit(self) -> list[Group]:
        """Admit what fits, in arrival order; a group whose admission fails ends alone."""
        admitted = []
        work = self.work
        while work.waiting:
            group = work.waiting[0]
            idle = self.slots.idle()
            if not self._fits(group):
                break
            slot, keep = self._leader_slot(group)
            if self.slots.shared_cells:
                limit = self.context.n_ctx - self.active_cells()
                fits = self.slots.evict_for(group.cells(keep) + keep, limit, keep=(slot,))
                if not fits and (work.evaluating or work.generating):
                    work.stalled = True  # until a running choice ends
                    break
            work.waiting.popleft()
            try:
                self._place(group, slot, keep, idle)
            except Exception as error:  # noqa: BLE001 - this request's fault: it alone ends with it
                work.fail_request(group.request, error)
                continue
            work.evaluating.append(group)
            admitted.append(group)
        return admitted

    def _place(self, group: Group, slot: Slot, keep: int, idle: list[Slot]) -> None:
        selection = group.request.settings.adapters
        keep = self._restore_longer_prefix(group.prompt, selection, slot, keep)
        keep = self.slots.cut(slot, keep)
        group.evaluated = group.cached = keep
        others = sorted((s for s in idle if s is not slot), key=lambda s: s.last_used)
        for choice, s in zip(group.choices, [slot] + others):
            if s is not slot:
                self.slots.forget(s)
            choice.slot, s.owner = s, choice
            s.selection = copy_of(selection)
            s.prompt_cells = len(group.prompt)  # decoded as a prompt: see slots.Slot.prompt_cells
            self.slots.touch(s)
        self.slots.main = slot

    def active_cells(self) -> int:
        """KV cells the running requests hold or may still fill (their budgets)."""
        cells = sum(g.cells(0) for g in self.work.evaluating)
        for c in self.work.generating:
            prompt_cells = kv_cells(c.prompt)  # media may take more cells than positions (M-RoPE)
            shared = prompt_cells if c is not c.group.leader else 0  # siblings share the prompt's cells
            cells += len(c.slot.tokens) + prompt_cells - len(c.prompt) - shared + c.budget - c.produced
        return cells

    def _restore_longer_prefix(self, prompt, selection: Selection, slot: Slot, keep: int) -> int:
        """With a prompt cache: a stored state sharing more of the prompt than the slot replaces
        what the slot holds (which is stored first)."""
        cache = self.slots.cache
        if cache is None:
            return keep
        entry, length = cache.best(self.context, prompt, selection.stable_key)
        if entry is None or length <= keep:
            return keep
        if slot.tokens:
            cache.remember(self.context, slot)
        try:
            cache.restore(self.context, slot, entry, copy_of(selection))
        except (OSError, ValueError) as error:  # damaged, cut short, another context's: a miss
            logger.warning(
                "prompt cache: an entry of %d tokens could not be restored (%s); dropped", len(entry.tokens), error
            )
            cache.discard(entry)
            self.slots.forget(slot)  # whatever part of the state llama.cpp took is not trusted
            return 0
        return length
