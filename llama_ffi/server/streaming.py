"""Server-sent events: ``data: {json}`` per chunk, then ``data: [DONE]``; a response that notices a
client going away (its iteration is cancelled, which frees the request's slot at the next step)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llama_ffi.high import shapes
from llama_ffi.server.errors import ClientGone, sse_error

DONE = b"data: [DONE]\n\n"


@dataclasses.dataclass
class Clock:
    start: float = dataclasses.field(default_factory=time.perf_counter)
    first: float | None = None

    def tick(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def timings(self, n_prompt: int, n_predicted: int, cached: int, first_at: float | None = None) -> dict:
        """``first_at``: when the engine produced the first token (a reader may see several at once)."""
        first = first_at or self.first or time.perf_counter()
        return timings(
            cached, n_prompt - cached, (first - self.start) * 1e3, n_predicted, (time.perf_counter() - first) * 1e3
        )


def timings(cached: int, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float) -> dict:
    """llama-server's ``timings``: the prompt's tokens past the cache and their time, then the
    tokens generated and theirs."""
    steps = max(predicted_n - 1, 0)  # the first token comes with the prompt's last batch
    return {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / max(prompt_n, 1),
        "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / steps if steps else 0.0,
        "predicted_per_second": 1e3 * steps / predicted_ms if steps and predicted_ms else 0.0,
    }


def progress_timings(progress: dict) -> dict:
    """The timings on a prompt-progress event: the prompt's so far, nothing predicted."""
    return timings(progress["cache"], progress["processed"] - progress["cache"], progress["time_ms"], 0, 0.0)


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


async def close(iterator) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


async def openai_events(
    chunks: AsyncIterator[dict],
    include_usage: bool,
    seen: dict,
    shape: Callable[[dict], dict] | None = None,
    timings: bool = False,
) -> AsyncIterator[bytes]:
    """The chunks as events. The library puts the request's usage on its last chunk; here it goes
    in a chunk of its own (``choices: []``) when the client asked for it, as OpenAI does. An error
    after the first event is an event too. ``seen["usage"]``: the usage, once known; ``shape``
    turns a chunk into another endpoint's payload. ``timings``: llama-server's speeds on the usage chunk."""
    last, clock = None, Clock()
    try:
        try:
            async for chunk in chunks:
                if "prompt_progress" in chunk:  # before the first token: the clock does not start
                    if timings:
                        chunk["timings"] = progress_timings(chunk["prompt_progress"])
                    yield event(chunk if shape is None else shape(chunk))
                    continue
                clock.tick()
                if "usage" in chunk:
                    seen["usage"] = chunk.pop("usage")
                for choice in chunk.get("choices", ()):
                    if choice.get("delta") == {"role": "assistant"}:  # llama-server's first delta says no content
                        choice["delta"]["content"] = None
                last = chunk
                yield event(chunk if shape is None else shape(chunk))
            if include_usage and "usage" in seen and last is not None:
                closing = shapes.usage_chunk(last, seen["usage"])
                if timings:
                    u = seen["usage"]
                    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                    closing["timings"] = clock.timings(u["prompt_tokens"], u["completion_tokens"], cached)
                yield event(closing)
        except Exception as error:  # noqa: BLE001 - the client sees it as an event; the server goes on
            yield sse_error(error)
        yield DONE
    finally:
        await close(chunks)


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client has gone (the body was read already: nothing else comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(StreamingResponse):
    """A stream that stops (its iterator cancelled) as soon as the client disconnects, whatever
    ASGI version the server speaks; ``ended()`` runs once it is over, however it ended (also
    when the client left before the first event, where the iterator's own clean-up never runs)."""

    def __init__(self, content: AsyncIterator[bytes], ended: Callable[[], None]) -> None:
        super().__init__(
            content, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                await until_disconnect(receive)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await self.stream_response(send)
            finally:
                group.cancel_scope.cancel()
                try:
                    await close(self.body_iterator)
                finally:
                    self.ended()


async def unless_disconnected(request: Request, work: Awaitable):
    """``work``'s result; cancelled (its slot freed at the next step) if the client goes away."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(request.receive))
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
