"""The models of a router and the rule for which are loaded: at most ``models_max`` at once (0: no
limit). A model that is needed while every place is taken frees the least recently used model that
serves no request, or waits, in arrival order, until one does; the requests for one model share its
load and its place in the queue. Each loaded model is the single-model server's app over its own
``Llama`` (its own engine), in this process and on this event loop."""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import os
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp

from llama_ffi.server.errors import ApiError
from llama_ffi.server.router.catalog import ModelEntry
from llama_ffi.server.router.events import Events

log = logging.getLogger("llama_ffi.server")


class State(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"
    SLEEPING = "sleeping"  # freed after --sleep-idle-seconds; its next request loads it again


class ModelHost:
    """One model of the router: its entry, its app while loaded, the requests it serves now."""

    def __init__(self, entry: ModelEntry) -> None:
        self.entry = entry
        self.state = State.UNLOADED
        self.app: ASGIApp | None = None
        self.error: str | None = None  # why its last load failed
        self.loads = 0  # loads tried: a waiter sees whether the one it waited for failed
        self.in_flight = 0
        self.waiting = 0  # requests queued for it
        self.last_used = 0.0

    @property
    def holds_place(self) -> bool:
        return self.state in (State.LOADING, State.LOADED)

    def status(self) -> dict:
        out: dict = {"value": self.state.value, "args": list(self.entry.flags)}
        if self.entry.preset:
            out["preset"] = self.entry.preset
        if self.error is not None and not self.holds_place:
            out["failed"] = True
            out["error"] = self.error
        return out


class Fleet:
    """The hosts by id and the places among loaded models. ``build(entry)`` makes a loaded model's
    app (in a worker thread; raises when the model does not load); ``free(app)`` closes it, waiting
    for what it runs. Every change happens under ``changed`` (a condition on the event loop)."""

    def __init__(
        self,
        entries: list[ModelEntry],
        build: Callable[[ModelEntry], ASGIApp],
        free: Callable[[ASGIApp], None],
        models_max: int = 4,
        autoload: bool = True,
    ) -> None:
        if models_max < 0:
            raise ValueError(f"--models-max must be >= 0, got {models_max}")
        self.hosts: dict[str, ModelHost] = {}
        self.build, self.free, self.models_max, self.autoload = build, free, models_max, autoload
        self.queue: collections.deque[ModelHost] = collections.deque()  # models waiting for a place
        self.changed = asyncio.Condition()
        self.events = Events()  # /models/sse: each state change as it happens
        # llama-server's test hook: each load, and each request while it counts as in flight, takes
        # 2 s more, so that its router tests can see a busy model and a queue
        self.slow = 2.0 if os.environ.get("LLAMA_SERVER_DEBUG_FAKE_TIMING") else 0.0
        self.update(entries)

    def update(self, entries: list[ModelEntry]) -> None:
        """A new list of models (``GET /models?reload=1``): new ones appear, gone ones leave unless
        loaded, the others keep their state."""
        ids = {e.id for e in entries}
        for model_id in [m for m, h in self.hosts.items() if m not in ids and not h.holds_place and not h.waiting]:
            del self.hosts[model_id]
        for entry in entries:
            host = self.hosts.get(entry.id)
            if host is None:
                self.hosts[entry.id] = ModelHost(entry)
            elif not host.holds_place:
                host.entry = entry

    def host(self, name: str | None) -> ModelHost:
        if not name:
            raise ApiError(400, "model name is missing from the request", "model")
        host = self.hosts.get(name)
        if host is None:
            raise ApiError(400, f"model '{name}' not found", "model")
        return host

    async def acquire(self, host: ModelHost, autoload: bool | None = None, gone: asyncio.Event | None = None):
        """``host``'s app with a request counted in flight on it (``release`` ends it), the model
        loaded first in its turn. A sleeping model always wakes; an unloaded one loads only with
        autoload. ``gone`` set: the client left, and its place in the queue goes with it."""
        autoload = self.autoload if autoload is None else autoload
        async with self.changed:
            if host.state is State.UNLOADED and not autoload:
                raise ApiError(400, f"model '{host.entry.id}' is not loaded (POST /models/load)", "model")
            host.waiting += 1
            try:
                await self._until_loaded(host, gone)
            finally:
                host.waiting -= 1
                if not host.waiting and host in self.queue:
                    self.queue.remove(host)
                    self.changed.notify_all()
            host.in_flight += 1
            host.last_used = time.monotonic()
        if self.slow:
            try:
                await asyncio.sleep(self.slow)
            except BaseException:
                await self.release(host)
                raise
        return host.app

    async def release(self, host: ModelHost) -> None:
        async with self.changed:
            host.in_flight -= 1
            host.last_used = time.monotonic()
            self.changed.notify_all()

    async def load(self, host: ModelHost) -> None:
        """``POST /models/load``: load now (in the queue's order), serving nothing yet."""
        await self.acquire(host, autoload=True)
        await self.release(host)

    async def unload(self, host: ModelHost, state: State = State.UNLOADED) -> None:
        """Free ``host``'s model once its requests end (``POST /models/unload``, or sleep)."""
        async with self.changed:
            while host.in_flight:
                await self.changed.wait()
            if host.state is State.LOADED:
                await self._unload(host, state)

    async def _until_loaded(self, host: ModelHost, gone: asyncio.Event | None) -> None:
        attempt = host.loads
        while host.state is not State.LOADED:
            if gone is not None and gone.is_set():
                raise ApiError(400, "the client went away while its model waited for a place")
            if host.loads > attempt and host.state is not State.LOADING and host.error is not None:
                raise ApiError(500, f"model '{host.entry.id}' could not be loaded: {host.error}")
            if host.state is not State.LOADING:
                if host not in self.queue:
                    self.queue.append(host)
                if self.queue[0] is host:
                    if not self._full():
                        self.queue.popleft()
                        await self._load(host)
                        continue
                    victim = self._idle_lru()
                    if victim is not None:
                        await self._unload(victim, State.UNLOADED)
                        continue
            await self._wait(gone)

    def _full(self) -> bool:
        return self.models_max > 0 and sum(h.holds_place for h in self.hosts.values()) >= self.models_max

    def _idle_lru(self) -> ModelHost | None:
        idle = [h for h in self.hosts.values() if h.state is State.LOADED and h.in_flight == 0]
        return min(idle, key=lambda h: h.last_used, default=None)

    async def _wait(self, gone: asyncio.Event | None) -> None:
        if gone is None:
            await self.changed.wait()
            return
        waiter = asyncio.ensure_future(self.changed.wait())
        left = asyncio.ensure_future(gone.wait())
        await asyncio.wait({waiter, left}, return_when=asyncio.FIRST_COMPLETED)
        left.cancel()
        if not waiter.done():
            waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)  # the lock is held again either way

    async def _load(self, host: ModelHost) -> None:
        """Load ``host`` with the lock released meanwhile (others queue, list, or serve)."""
        host.state, host.error = State.LOADING, None
        host.loads += 1
        self._changed_state(host)
        self.changed.release()
        try:
            await asyncio.sleep(self.slow)
            app = await run_in_threadpool(self.build, host.entry)
            error = None
        except Exception as exc:  # noqa: BLE001 - its own requests get it; the other models go on
            app, error = None, str(exc) or type(exc).__name__
            log.error("model %s could not be loaded: %s", host.entry.id, error)
        await self.changed.acquire()
        host.app, host.error = app, error
        host.state = State.LOADED if app is not None else State.UNLOADED
        self._changed_state(host)
        self.changed.notify_all()

    async def _unload(self, host: ModelHost, state: State) -> None:
        """Free ``host``'s model holding the lock (a close is quick once no request runs): its state
        says unloaded or sleeping only once the memory is back, and no request loads it again while
        the old copy is being freed."""
        app, host.app = host.app, None
        try:
            await run_in_threadpool(self.free, app)
        finally:
            host.state = state
            self._changed_state(host)
            self.changed.notify_all()

    def _changed_state(self, host: ModelHost) -> None:
        data = {"status": host.state.value}
        if host.error is not None and not host.holds_place:
            data["error"] = host.error
        self.events.publish("status_change", host.entry.id, data)

    async def sleep_idle(self, seconds: float) -> None:
        """Forever: free each model that served nothing for ``seconds`` (--sleep-idle-seconds)."""
        while True:
            await asyncio.sleep(min(0.25, seconds / 4))
            now = time.monotonic()
            for host in list(self.hosts.values()):
                if host.state is State.LOADED and not host.in_flight and now - host.last_used >= seconds:
                    await self.unload(host, State.SLEEPING)
