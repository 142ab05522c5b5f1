"""Server-sent events: ``data: {json}`` per chunk, then ``data: [DONE]``; a response that notices a
client going away (its iteration is cancelled, which frees the request's slot at the next step)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llama_ffi.server.errors import sse_error

DONE = b"data: [DONE]\n\n"


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


async def close(iterator) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


async def openai_events(chunks: AsyncIterator[dict], model: str, include_usage: bool,
                        ended: Callable[[dict | None], None],
                        shape: Callable[[dict], dict] | None = None) -> AsyncIterator[bytes]:
    """The chunks as events. The library puts the request's usage on its last chunk; here it goes
    in a chunk of its own (``choices: []``) when the client asked for it, as OpenAI does. An error
    after the first event is an event too. ``ended(usage)`` runs however the stream ends; ``shape``
    turns a chunk into another endpoint's payload."""
    usage = last = None
    try:
        try:
            async for chunk in chunks:
                usage = chunk.pop("usage", None) or usage
                chunk["model"] = model
                last = chunk
                yield event(chunk if shape is None else shape(chunk))
            if include_usage and usage is not None and last is not None:
                yield event({**last, "choices": [], "usage": usage})
        except Exception as error:  # noqa: BLE001 - the client sees it as an event; the server goes on
            yield sse_error(error)
        yield DONE
    finally:
        await close(chunks)
        ended(usage)


class EventStream(StreamingResponse):
    """A stream that stops (its iterator cancelled) as soon as the client disconnects, whatever
    ASGI version the server speaks."""

    def __init__(self, content: AsyncIterator[bytes]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await self.stream_response(send)
            finally:
                group.cancel_scope.cancel()
                await close(self.body_iterator)


class ClientGone(Exception):
    """The client disconnected before its (non-streamed) answer was ready."""


async def unless_disconnected(request: Request, work: Awaitable):
    """``work``'s result; cancelled (its slot freed at the next step) if the client goes away."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise ClientGone()
    return task.result()
