"""The work in flight on one engine, as its loop sees it: groups waiting for slots, prompts being
evaluated, choices generating; and how a request ends (its choices leave their slots, its channel
gets ``DONE`` or the error, its caller is told it was reaped). Only the loop's thread touches it."""

from __future__ import annotations

import collections

from llama_ffi.high.engine.choices import Choice, Group
from llama_ffi.high.engine.request import DONE, Request


class Work:
    def __init__(self, slots) -> None:
        self.slots = slots
        self.waiting: collections.deque[Group] = collections.deque()
        self.evaluating: list[Group] = []
        self.generating: list[Choice] = []
        self.stalled = False  # the next group waits for KV cells that running ones hold

    def busy(self) -> bool:
        return bool(self.waiting or self.evaluating or self.generating)

    def requests(self) -> list[Request]:
        seen: dict[int, Request] = {}
        for g in list(self.waiting) + self.evaluating:
            seen.setdefault(id(g.request), g.request)
        for c in self.generating:
            seen.setdefault(id(c.group.request), c.group.request)
        return list(seen.values())

    def release(self, c: Choice) -> None:
        """``c`` leaves its slot, which keeps what it decoded."""
        slot = c.slot
        if slot is not None and slot.owner is c:
            slot.owner = None
            self.slots.touch(slot)
            self.slots.keep_in_cache(slot)
            self.stalled = False

    def end_request(self, request: Request, error: BaseException | None) -> None:
        if error is None:
            if not request.finished:
                request.finished = True
                request.channel.put(DONE)
        else:
            request.fail(error)
        request.close()
        for group in request.groups:  # no cycles left: the request is freed as soon as its caller lets go
            for c in group.choices:
                c.group = None
            group.request = None
        request.reaped.set()

    def fail_request(self, request: Request, error: BaseException) -> None:
        """End ``request`` with ``error`` wherever it is: its choices leave their slots."""
        self.waiting = collections.deque(g for g in self.waiting if g.request is not request)
        self.evaluating = [g for g in self.evaluating if g.request is not request]
        for c in request.choices:
            if c in self.generating:
                self.generating.remove(c)
            self.release(c)
        self.end_request(request, error)

    def fail_where(self, which, error: BaseException) -> None:
        for request in self.requests():
            if which(request):
                self.fail_request(request, error)

    def fail_all(self, error: BaseException) -> None:
        """A step failed in a way no one request explains: every request in flight ends with the
        error, and the slots they held are freed and forgotten (their cells may be half written),
        so the next request finds the engine as after ``close`` of them all."""
        for request in self.requests():
            for c in request.choices:
                if c.slot is not None and c.slot.owner is c:
                    self.release(c)
                    self.slots.forget(c.slot)
            self.end_request(request, error)
        self.waiting.clear()
        self.evaluating, self.generating = [], []
