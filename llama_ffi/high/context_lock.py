"""One ``Llama``'s context, shared by the engine's steps, single-sequence work, and (on a Llama whose
requests run alone: speculative decoding, ``logits_all``) streams suspended between chunks.

Users are serialised by a lock, but a stream does not hold it while suspended: it takes it for
each chunk only. A request that arrives while a stream is suspended *parks* it: the context's
state (its KV cache) and the token list are copied into the stream. The
stream's next chunk restores them, so it goes on exactly as if it had never been interrupted,
from the same thread or another. Nothing is copied when no other request came in between.

A stream that is closed (``close()``, garbage collection, a ``break`` out of the loop) while it is
parked, or while the lock is busy, is dropped without touching the context.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar

from llama_ffi import lib
from llama_ffi.high import interrupt

T = TypeVar("T")


class StreamEnded(RuntimeError):
    """The stream can produce nothing more (its ``Llama`` was closed)."""


class ContextLock:
    """``with lock:`` owns the context (parking a suspended stream first). ``stream(...)`` runs a
    generator of work one item at a time under the lock, suspended outside it."""

    def __init__(self, engine) -> None:
        self._lock = threading.Lock()
        self._engine = weakref.ref(engine)  # the engine owns this lock: no cycle, freed at once
        # The stream whose state is in the context, weakly: a stream the user drops is closed
        # at once (its state is never copied for nothing).
        self._suspended: weakref.ref | None = None

    def __enter__(self) -> "ContextLock":
        self.acquire_for(None)
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def acquire_for(self, stream: "SuspendedStream | None") -> None:
        """Take the lock for ``stream`` (None: a request), parking any other suspended stream."""
        self._lock.acquire()
        try:
            if not self._is_suspended(stream):
                self._park_suspended()
        except BaseException:
            self._lock.release()
            raise

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def _park_suspended(self) -> None:
        ref, self._suspended = self._suspended, None
        stream = ref() if ref is not None else None
        if stream is not None:
            stream.park()

    def _is_suspended(self, stream: "SuspendedStream | None") -> bool:
        return stream is not None and self._suspended is not None and self._suspended() is stream

    def stream(self, work: Callable[["Lease"], Iterator[T]]) -> Iterator[T]:
        """Iterate ``work(lease)`` item by item, holding the lock only inside each ``next``."""
        return SuspendedStream(self, self._engine(), work)


class Lease:
    """What ``work`` sees of its stream: ``holds_context`` says (in its ``finally``) whether it may
    still touch the context; false when the stream is closed while parked. ``settle``, when the
    work sets it, runs before parking: llama.cpp's state holds the KV cache but not the logits, so
    work that would read pending logits (a speculative batch's) gives them up there. Kept apart
    from the stream so that the work's frame does not reference the stream (no cycle: a dropped
    stream is closed by reference counting, at once)."""

    __slots__ = ("holds_context", "settle")

    def __init__(self) -> None:
        self.holds_context = False
        self.settle: Callable[[], None] | None = None


class SuspendedStream:
    """An iterator over ``work``'s items that keeps the context's state only while it runs."""

    def __init__(self, lock: ContextLock, engine, work: Callable[[Lease], Iterator]) -> None:
        self._lock = lock
        self._engine = engine
        self._work = work
        self._inner: Iterator | None = None
        self._parked: object | None = None
        self._done = False
        self._lease = Lease()
        self._ref = weakref.ref(self)

    def __iter__(self) -> "SuspendedStream":
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        self._lock.acquire_for(self)
        try:
            try:
                self._resume()
                if self._inner is None:
                    self._inner = self._work(self._lease)
                installed = interrupt.install()  # per chunk: the caller's code runs in between
                try:
                    item = next(self._inner)
                except BaseException:
                    self._end()
                    raise
                finally:
                    if installed:
                        lib.llama_ffi_sigint_restore()
                self._lock._suspended = self._ref
                return item
            finally:
                self._lease.holds_context = False
        finally:
            self._lock._lock.release()

    def _resume(self) -> None:
        engine = self._engine
        engine._check_open()
        if self._parked is not None:
            parked, self._parked = self._parked, None
            restore_parked(engine, parked)
        self._lease.holds_context = True

    def park(self) -> None:
        """Another request takes the context: keep a copy of this stream's state."""
        if self._lease.settle is not None:
            self._lease.settle()
        self._parked = state_for_parking(self._engine)

    def _end(self) -> None:
        self._done = True
        self._inner = None
        if self._lock._is_suspended(self):
            self._lock._suspended = None

    def close(self) -> None:
        """End the stream. Its own clean-up (cutting tokens decoded ahead) runs when it can have
        the context at once; otherwise the stream is dropped and the context is left as it is."""
        if self._done:
            return
        inner = self._inner
        if inner is None:
            self._done = True
            return
        if not self._lock._lock.acquire(blocking=False):
            self._parked = None
            self._done = True
            self._lease.holds_context = False
            inner.close()  # its finally sees holds_context False
            return
        try:
            self._lease.holds_context = self._lock._is_suspended(self) and not self._engine._closed
            self._parked = None
            inner.close()
        finally:
            self._lease.holds_context = False
            self._end()
            self._lock._lock.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# A Llama whose requests run alone (speculative, logits_all) parks a suspended stream by copying:
def state_for_parking(llm) -> tuple:
    """What a suspended stream keeps when another request takes the context: the token list,
    the context's state (its KV cache: llama.cpp keeps no logits in it) and the drafter's."""
    snapshot = getattr(llm.drafter, "snapshot", None)
    parked = (list(llm.tokens), llm.context.state_bytes(), snapshot() if snapshot else None,
              llm.adapters.applied)
    if not llm.tokens:  # a parallel request's slots: the next request starts from empty
        llm.context.clear()
    return parked


def restore_parked(llm, parked: tuple) -> None:
    tokens, context_state, drafter_state, selection = parked
    llm.adapters.apply(llm.context, selection)  # the cache below was computed under it
    llm.context.set_state_bytes(context_state)
    llm.tokens = tokens
    llm._resync_drafter(tokens, drafter_state)
