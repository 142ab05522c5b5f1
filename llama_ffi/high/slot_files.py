"""One slot's cache in a file (llama-server's ``/slots/{id}?action=save|restore|erase``): the cells
of that slot's sequence with the tokens they hold, in ``state``'s checked format. Each action is a task
the engine's loop runs between two steps while the slot is idle; a restored slot serves the next prompt that
shares its prefix as if it had computed it (the request may pin the slot: ``slot_id``)."""

from __future__ import annotations

import os

from llama_ffi.high import state
from llama_ffi.high.engine.slots import Slot
from llama_ffi.high.errors import RequestValueError


def _idle_slot(llm, slot_id: int) -> Slot:
    slots = llm.engine.slots.slots
    if isinstance(slot_id, bool) or not isinstance(slot_id, int) or not 0 <= slot_id < len(slots):
        raise RequestValueError(f"no slot {slot_id!r}: this Llama has slots 0..{len(slots) - 1}")
    slot = slots[slot_id]
    if slot.owner is not None:
        raise RequestValueError(f"slot {slot_id} is processing a request: try again when it is idle")
    return slot


class SlotFiles:
    """``Llama.slot_files``: one slot's cache written, read back, or emptied."""

    def __init__(self, llm) -> None:
        self.llm = llm

    def save(self, slot_id: int, path: str | os.PathLike) -> int:
        """Write what slot ``slot_id`` holds to ``path``; returns its number of tokens."""
        llm = self.llm
        tokens, data = llm.engine.run(lambda: state.encode_slot(llm, _idle_slot(llm, slot_id)), main=False)
        state.write(path, data)
        return len(tokens)

    def restore(self, slot_id: int, path: str | os.PathLike) -> int:
        """Fill slot ``slot_id`` from a file ``save`` wrote (checked first: the same model, build and
        cache types, intact); returns its number of tokens."""
        llm = self.llm
        header, cells, whole_context = state.decode(state.read(path), state.producer_of(llm.context))
        if whole_context:
            raise RequestValueError(f"{os.fspath(path)} holds a whole context's state (save_state), not one slot's")
        tokens, spans, selection = state.checked_cells(llm, header)

        def restore() -> None:
            slot = _idle_slot(llm, slot_id)
            try:
                llm.context.set_seq_state_bytes(slot.seq, cells)
            except ValueError:  # what llama.cpp took of it is not trusted: the slot holds nothing
                llm.engine.slots.forget(slot)
                raise
            slot.tokens, slot.media_spans = tokens, spans
            slot.selection, slot.prompt_cells = (selection if tokens else None), 0
            llm.engine.slots.touch(slot)

        llm.engine.run(restore, main=False)
        return len(tokens)

    def erase(self, slot_id: int) -> int:
        """Empty slot ``slot_id``; returns how many tokens it held."""
        llm = self.llm

        def erase() -> int:
            slot = _idle_slot(llm, slot_id)
            held = len(slot.tokens)
            llm.engine.slots.forget(slot)
            return held

        return llm.engine.run(erase, main=False)
