"""A request as the engine's loop sees it, and the channel its results travel through to the caller.

The steps put ``(choice index, event)`` items (``None`` for "this choice finished") and, at the
end, ``DONE`` or an exception. A caller in a thread waits for them (``get``), one in asyncio
awaits them (``aget``, which never blocks the event loop). A streamed request lets at most
``AHEAD`` items wait unread: its choices then sit out the steps until the caller reads, keeping
their slots. A channel whose reader can no longer be reached (its event loop closed) says so
(``unreachable``): the loop then cancels that request alone.
"""

from __future__ import annotations

import asyncio
import collections
import threading

AHEAD = 16  # unread stream items after which a request's choices wait for the caller
DONE = object()


class RequestCancelled(RuntimeError):
    """The request was cancelled (its stream closed, its task cancelled, or its Llama closed)."""


class Channel:
    def __init__(self, wake) -> None:
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._wake = wake  # tells the engine's loop that the caller read
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.unreachable = False  # an asyncio reader's loop closed: nothing put reaches it

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()
            if not self._waiters:  # the common case, per token: nobody awaits in asyncio
                return
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # its event loop is closed: the reader is gone
                self.unreachable = True

    def get(self):
        """The next item, waiting for it (a signal handler's exception, such as Ctrl-C's
        KeyboardInterrupt, ends the wait)."""
        with self._cond:
            while not self._items:
                self._cond.wait()
            item = self._items.popleft()
            full = len(self._items) + 1 >= AHEAD
        if full:
            self._wake()
        return item

    def replace_all(self, item) -> None:
        """Drop what is unread and put ``item`` (the caller sees it next)."""
        with self._cond:
            self._items.clear()
        self.put(item)

    def unread_tokens(self) -> dict[int, int]:
        """Per choice index: the tokens waiting unread (a cancelled stream's, never seen)."""
        counts: dict[int, int] = {}
        with self._cond:
            for item in self._items:
                if isinstance(item, tuple) and item[1] is not None and item[1].token >= 0:
                    counts[item[0]] = counts.get(item[0], 0) + 1
        return counts

    async def aget(self):
        while True:
            with self._cond:
                if self._items:
                    item = self._items.popleft()
                    full = len(self._items) + 1 >= AHEAD
                    break
                loop = asyncio.get_running_loop()
                future = loop.create_future()
                self._waiters.append((loop, future))
            await future
        if full:
            self._wake()
        return item


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Request:
    """The groups of one call, where their results go, and whether the caller still wants them."""

    def __init__(
        self, groups: list, settings, streamed: bool, wake, progress: bool = False, slot_id: int | None = None
    ) -> None:
        self.groups = groups
        self.settings = settings
        self.streamed = streamed
        self.progress = progress  # a stream that asked for prompt progress (engine.progress)
        self.slot_id = slot_id  # the slot its (first) prompt must use, waiting for it if busy
        self.channel = Channel(wake)
        self.cancelled = False
        self.cancel_reason = "the request was cancelled"
        self.finished = False
        self.reaped = threading.Event()  # its choices have left their slots
        self.live = sum(len(g.choices) for g in groups)
        for g in groups:
            g.request = self

    @property
    def choices(self) -> list:
        return [c for g in self.groups for c in g.choices]

    @property
    def abandoned(self) -> bool:
        """Cancelled by its caller, or its reader can no longer be reached: the loop reaps it."""
        return self.cancelled or self.channel.unreachable

    @property
    def blocked(self) -> bool:
        """A streamed request whose caller has not read what is waiting."""
        return self.streamed and len(self.channel) >= AHEAD

    def fail(self, error: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self.channel.put(error)

    def close(self) -> None:
        """Free what the choices hold in C (their sampler chains)."""
        for c in self.choices:
            c.chain.close()
