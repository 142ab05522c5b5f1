"""``GET /models/sse``: what happens to the router's models, as it happens, to every listener
(llama-server's events: ``status_change`` with the new status, ``download_finished`` /
``download_failed``, ``model_remove``, ``models_reload``), each ``{"event", "model", "data"}``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from llama_ffi.server.streaming import EventStream, event

BACKLOG = 256  # events a slow listener may fall behind by before it misses the oldest


class Events:
    def __init__(self) -> None:
        self.listeners: set[asyncio.Queue] = set()

    def publish(self, name: str, model: str, data: dict | None = None) -> None:
        """Called on the event loop."""
        message = {"event": name, "model": model, **({"data": data} if data is not None else {})}
        for queue in self.listeners:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(message)

    def close(self) -> None:
        """Every stream ends (the server stops: it waits for no listener). Called on the event loop."""
        for queue in self.listeners:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(None)

    def response(self) -> EventStream:
        """The events from now on, as SSE; subscribed at once (before the response's headers go
        out), so that a listener that has its headers misses nothing it then causes."""
        queue: asyncio.Queue = asyncio.Queue(BACKLOG)
        self.listeners.add(queue)

        async def events() -> AsyncIterator[bytes]:
            while (message := await queue.get()) is not None:
                yield event(message)

        return EventStream(events(), lambda: self.listeners.discard(queue))
