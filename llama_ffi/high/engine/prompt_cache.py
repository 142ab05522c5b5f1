"""Prompt caches (llama-cpp-python's ``set_cache``): slot states kept beyond the slots.

When a slot is about to lose what its cache holds (another request takes it, or needs its cells),
its sequence state (``llama_state_seq_get_data``) is stored with its tokens, media spans and
adapter selection. A request whose prompt shares a longer prefix with a stored state than with any
slot gets that state restored into its slot (``llama_state_seq_set_data``). Entries are evicted
least recently used first when the capacity in bytes is exceeded. ``LlamaRAMCache`` keeps them in
memory; ``LlamaDiskCache`` in files (one per entry, in the state file format of ``save_state``), so
they outlive the process.
"""

from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path

from llama_ffi.high import state as state_format
from llama_ffi.high.engine.slots import served_prefix

MIN_TOKENS = 8  # shorter caches are cheaper to evaluate again than to store


class Entry:
    """One stored slot state: what it holds (for matching) and its bytes (``state`` format)."""

    def __init__(self, tokens: list[int], spans: list, selection_key: str, data: bytes) -> None:
        self.tokens, self.spans, self.selection_key, self.data = tokens, spans, selection_key, data
        self.size = len(data)           # bytes stored (on disk, once ``data`` is dropped)
        self.path: Path | None = None   # a disk cache's file

    @property
    def key(self) -> str:
        return hashlib.sha256(repr((self.tokens, self.spans, self.selection_key)).encode()).hexdigest()

    def common_prefix(self, prompt, selection_key: str) -> int:
        return served_prefix(self.tokens, self.spans, prompt) if selection_key == self.selection_key else 0


class LlamaCache:
    """The entries of a cache, least recently used first, within ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be a positive int, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()

    @property
    def cache_size(self) -> int:
        """Bytes stored (llama-cpp-python's name)."""
        return sum(e.size for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, prompt, selection_key: str) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with ``prompt``, and that length."""
        found, length = None, 0
        for entry in self._entries.values():
            n = entry.common_prefix(prompt, selection_key)
            if n > length:
                found, length = entry, n
        if found is not None:
            self._entries.move_to_end(found.key)
        return found, length

    def store(self, entry: Entry) -> None:
        if len(entry.data) > self.capacity_bytes:
            return
        self._entries.pop(entry.key, None)
        self._entries[entry.key] = entry
        self._written(entry)
        while self.cache_size > self.capacity_bytes:
            _, old = self._entries.popitem(last=False)
            self._dropped(old)

    def _written(self, entry: Entry) -> None:
        """Where a subclass keeps the entry's bytes."""

    def _dropped(self, entry: Entry) -> None:
        """Where a subclass forgets them."""

    def data(self, entry: Entry) -> bytes:
        return entry.data

    def discard(self, entry: Entry) -> None:
        """Drop an entry that could not be restored (its bytes are damaged or not this context's)."""
        if self._entries.pop(entry.key, None) is not None:
            self._dropped(entry)

    # ---- what the slots call ------------------------------------------------------------------
    def remember(self, context, slot) -> None:
        """Store what ``slot`` holds before it is lost."""
        if len(slot.tokens) < MIN_TOKENS or slot.selection is None:
            return
        entry = Entry(list(slot.tokens), [tuple(s) for s in slot.media_spans], slot.selection.stable_key, b"")
        if entry.key in self._entries:
            self._entries.move_to_end(entry.key)
            return
        entry.data = state_format.encode(slot.tokens, slot.media_spans, slot.selection,
                                         context.seq_state_bytes(slot.seq))
        entry.size = len(entry.data)
        self.store(entry)

    def restore(self, context, slot, entry: Entry, selection) -> None:
        """Put ``entry``'s state into ``slot`` (computed under ``selection``)."""
        header, seq_state, _ = state_format.decode(self.data(entry))
        context.set_seq_state_bytes(slot.seq, seq_state)
        slot.tokens, slot.media_spans = list(header["tokens"]), [tuple(s) for s in header["media_spans"]]
        slot.selection = selection


class LlamaRAMCache(LlamaCache):
    """Slot states in memory."""


class LlamaDiskCache(LlamaCache):
    """Slot states in files under ``cache_dir``, found again by a later process."""

    SUFFIX = ".llama-ffi-state"

    def __init__(self, cache_dir: str | os.PathLike = ".cache/llama_cache", capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        files = sorted(self.cache_dir.glob(f"*{self.SUFFIX}"), key=lambda p: p.stat().st_mtime)
        for path in files:
            try:
                header, _, whole = state_format.decode(path.read_bytes())
            except (OSError, ValueError):
                continue  # not one of ours, or damaged: left alone
            if whole:
                continue
            entry = Entry(header["tokens"], [tuple(s) for s in header["media_spans"]],
                          header.get("selection_key"), b"")
            entry.size, entry.path = path.stat().st_size, path
            self._entries[entry.key] = entry

    def _written(self, entry: Entry) -> None:
        entry.path = self.cache_dir / f"{entry.key}{self.SUFFIX}"
        state_format.write(entry.path, entry.data)
        entry.data = b""  # on disk only

    def _dropped(self, entry: Entry) -> None:
        if entry.path is not None:
            entry.path.unlink(missing_ok=True)

    def data(self, entry: Entry) -> bytes:
        return entry.path.read_bytes()


def install(llm, cache: LlamaCache | None) -> None:
    """``Llama.set_cache``: the engine's slots keep what they lose in ``cache``."""
    from llama_ffi.high import compat

    if cache is not None and not isinstance(cache, LlamaCache):
        raise TypeError("set_cache takes a LlamaRAMCache, a LlamaDiskCache or None")
    if llm.engine is None:
        compat.check_cache(cache)
        return
    with llm.single():
        llm.engine.slots.cache = cache
