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
import json
import logging
import os
import time
import weakref
from pathlib import Path

from llama_ffi.high import state as state_format
from llama_ffi.high.engine.slots import served_prefix
from llama_ffi.high.errors import RequestTypeError, RequestValueError

logger = logging.getLogger("llama_ffi")

MIN_TOKENS = 8  # shorter caches are cheaper to evaluate again than to store
STALE_TMP_SECONDS = 600  # a temporary file this old was left by a writer that died


class Entry:
    """One stored slot state: what it holds (for matching) and its bytes (``state`` format)."""

    def __init__(self, tokens: list[int], spans: list, selection_key: str, producer_key: str, data: bytes) -> None:
        self.tokens, self.spans, self.selection_key, self.data = tokens, spans, selection_key, data
        self.producer_key = producer_key  # what made it (model, KV types, build): see state.producer_of
        self.size = len(data)  # bytes stored (on disk, once ``data`` is dropped)
        self.path: Path | None = None  # a disk cache's file

    @property
    def key(self) -> str:
        held = (self.tokens, self.spans, self.selection_key, self.producer_key)
        return hashlib.sha256(repr(held).encode()).hexdigest()

    def common_prefix(self, prompt, selection_key: str, producer_key: str) -> int:
        if selection_key != self.selection_key or producer_key != self.producer_key:
            return 0
        return served_prefix(self.tokens, self.spans, prompt)


def producer_key(producer: dict) -> str:
    return hashlib.sha256(json.dumps(producer, sort_keys=True).encode()).hexdigest()[:32]


class LlamaCache:
    """The entries of a cache, least recently used first, within ``capacity_bytes``. One cache may
    serve several Llamas: an entry matches only the model, KV types and build that made it."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes <= 0:
            raise RequestValueError(f"capacity_bytes must be a positive int, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        self._producers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def cache_size(self) -> int:
        """Bytes stored (llama-cpp-python's name)."""
        return sum(e.size for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def producer(self, context) -> tuple[dict, str]:
        """``context``'s producer (``state.producer_of``) and its key, worked out once."""
        if context not in self._producers:
            made_by = state_format.producer_of(context)
            self._producers[context] = (made_by, producer_key(made_by))
        return self._producers[context]

    def best(self, context, prompt, selection_key: str) -> tuple[Entry | None, int]:
        """The entry ``context`` can restore sharing the longest prefix with ``prompt``, and that length."""
        _, made_by = self.producer(context)
        found, length = None, 0
        for entry in self._entries.values():
            n = entry.common_prefix(prompt, selection_key, made_by)
            if n > length:
                found, length = entry, n
        if found is not None:
            self._entries.move_to_end(found.key)
        return found, length

    def store(self, entry: Entry) -> None:
        if len(entry.data) > self.capacity_bytes:
            return
        self._entries.pop(entry.key, None)
        if not self._written(entry):
            return
        self._entries[entry.key] = entry
        while self.cache_size > self.capacity_bytes:
            _, old = self._entries.popitem(last=False)
            self._dropped(old)

    def _written(self, entry: Entry) -> bool:
        """Where a subclass keeps the entry's bytes; False when it could not (then it is not kept)."""
        return True

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
        made_by, made_by_key = self.producer(context)
        entry = Entry(
            list(slot.tokens), [tuple(s) for s in slot.media_spans], slot.selection.stable_key, made_by_key, b""
        )
        if entry.key in self._entries:
            self._entries.move_to_end(entry.key)
            return
        entry.data = state_format.encode(
            slot.tokens, slot.media_spans, slot.selection, context.seq_state_bytes(slot.seq), made_by
        )
        entry.size = len(entry.data)
        self.store(entry)

    def restore(self, context, slot, entry: Entry, selection) -> None:
        """Put ``entry``'s state into ``slot`` (computed under ``selection``); ValueError or OSError
        when its bytes cannot be read or fail a check (nothing reached llama.cpp then)."""
        made_by, _ = self.producer(context)
        header, seq_state, _ = state_format.decode(self.data(entry), made_by)
        if list(header["tokens"]) != entry.tokens:
            raise RequestValueError("the entry's file holds another state than its index says")
        context.set_seq_state_bytes(slot.seq, seq_state)
        slot.tokens, slot.media_spans = list(header["tokens"]), [tuple(s) for s in header["media_spans"]]
        slot.selection = selection


class LlamaRAMCache(LlamaCache):
    """Slot states in memory."""


class LlamaDiskCache(LlamaCache):
    """Slot states in files under ``cache_dir``, found again by a later process (or shared with
    another one). Opening reads each file's header only; a file is read whole, and its checksum
    checked, when it is restored. Files that are damaged or of an older format (which has no
    checksum) are removed when the cache opens, with one log line."""

    SUFFIX = ".llama-ffi-state"

    def __init__(self, cache_dir: str | os.PathLike = ".cache/llama_cache", capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temporaries()
        found, removed = [], []
        for path in self.cache_dir.glob(f"*{self.SUFFIX}"):
            try:
                found.append(self._indexed(path))
            except (ValueError, KeyError, TypeError):
                removed.append(path.name)
                path.unlink(missing_ok=True)
            except OSError:
                continue  # gone meanwhile (another process evicted it) or unreadable: not indexed
        if removed:
            logger.warning(
                "prompt cache %s: removed %d damaged or old-format file(s): %s",
                self.cache_dir,
                len(removed),
                ", ".join(sorted(removed)[:5]) + (" ..." if len(removed) > 5 else ""),
            )
        for _, entry in sorted(found, key=lambda item: item[0]):
            self._entries[entry.key] = entry

    @staticmethod
    def _indexed(path: Path) -> tuple[float, Entry]:
        """When the file was written, and the entry it holds, from its header alone."""
        stat = path.stat()
        header = state_format.read_header(path)
        entry = Entry(
            [int(t) for t in header["tokens"]],
            [tuple(s) for s in header["media_spans"]],
            str(header["selection_key"]),
            producer_key(dict(header["producer"])),
            b"",
        )
        entry.size, entry.path = stat.st_size, path
        return stat.st_mtime, entry

    def _remove_stale_temporaries(self) -> None:
        now = time.time()
        for tmp in self.cache_dir.glob(f".*{self.SUFFIX}.*.tmp"):
            try:
                if now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                    tmp.unlink()
            except OSError:
                continue

    def _written(self, entry: Entry) -> bool:
        path = self.cache_dir / f"{entry.key}{self.SUFFIX}"
        try:
            state_format.write(path, entry.data)
        except OSError as error:  # a full disk, a file-size limit, a removed folder: not stored
            logger.warning(
                "prompt cache %s: could not store an entry of %d tokens (%s)", self.cache_dir, len(entry.tokens), error
            )
            return False
        entry.path, entry.data = path, b""  # on disk only
        return True

    def _dropped(self, entry: Entry) -> None:
        if entry.path is not None:
            entry.path.unlink(missing_ok=True)

    def data(self, entry: Entry) -> bytes:
        return entry.path.read_bytes()


def install(llm, cache: LlamaCache | None) -> None:
    """``Llama.set_cache``: the engine's slots keep what they lose in ``cache``."""
    if cache is not None and not isinstance(cache, LlamaCache):
        raise RequestTypeError("set_cache takes a LlamaRAMCache, a LlamaDiskCache or None")

    def set_cache() -> None:
        llm.engine.slots.cache = cache

    llm.run_on_context(set_cache)
