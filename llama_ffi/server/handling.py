"""What every route does with a request: its body parsed by a schema, the library call awaited
(cancelled if the client goes away), the library's errors shaped for the client."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from llama_ffi import lib
from llama_ffi.high.chat.completion import achat_completion, chat_prompt
from llama_ffi.server import errors, params
from llama_ffi.server.errors import ApiError, ClientGone
from llama_ffi.server.prompt_forms import embedding_inputs
from llama_ffi.server.schemas import ChatRequest
from llama_ffi.server.streaming import EventStream, openai_events, unless_disconnected


async def parse(request: Request, model: type[BaseModel]):
    """The body as ``model``, whatever content type the client declared (llama-server's rule)."""
    data = await request.body()
    try:
        return model.model_validate_json(data or b"{}")
    except ValidationError as error:
        raise errors.invalid_body(error) from None


async def awaited(request: Request, work):
    """Await ``work`` (a Llama call), cancelling it if the client goes away; the library's errors
    become OpenAI-shaped ones."""
    try:
        return await unless_disconnected(request, work)
    except (ApiError, ClientGone):
        raise
    except Exception as error:  # noqa: BLE001 - the client gets it, shaped
        raise errors.from_library(error) from None


async def held(request: Request, served, work: Awaitable) -> tuple[object, Callable[[], None]]:
    """``work``'s result, awaited with a place among the requests in flight (``Served.ticket``), and
    the release of that place: at once for a whole answer, when it ends for a stream."""
    stack = contextlib.ExitStack()
    stack.enter_context(served.ticket())
    try:
        result = await awaited(request, work)
    except BaseException:
        stack.close()
        raise
    return result, stack.close


async def chat(request: Request, served, llm, body: dict) -> tuple[object, Callable[[], None], list[dict]]:
    """Another API's request, translated into an OpenAI chat request ``body``, through the Llama:
    its result (chunks for a stream), the release of its place (see ``held``), and its messages."""
    request_body = ChatRequest.model_validate(body)
    params.check_media(request_body.messages, served.options.media_path)
    typed, chat_options = params.chat_request(llm, request_body, served.options, model=served.model_id)
    work = achat_completion(llm, request_body.messages, typed, **chat_options)
    result, release = await held(request, served, work)
    return result, release, request_body.messages


def prompt_tokens(llm, chat: dict) -> int:
    """The prompt tokens of a translated chat request: its messages and tools through the template."""
    try:
        return chat_prompt(llm, chat["messages"], tools=chat.get("tools"))[1]
    except (ValueError, TypeError) as error:
        raise errors.from_library(error) from None


async def generate(request: Request, served, body, call: Callable[[], Awaitable], stream_shape=None):
    """Run a generating ``call`` under a ticket: its result, or for a stream its OpenAI events
    (``stream_shape`` reshapes each chunk), which keep the ticket until they end."""
    result, release = await held(request, served, call())
    if not body.stream:
        release()
        served.metrics.finished(result.get("usage"))
        return result
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    seen: dict = {}

    def ended():
        release()
        served.metrics.finished(seen.get("usage"))

    events = openai_events(result, include_usage, seen, stream_shape, timings=body.timings_per_token)
    return EventStream(events, ended)


async def embed(request: Request, served, body, output_format: str):
    """The body's inputs embedded: normalised (euclidean) unless one vector per token, and refused
    when longer than a batch holds (llama-server's rule); and whether there is one per token."""
    llm = served.accept(body, embeddings=True)
    inputs = embedding_inputs(llm, body.input if body.input is not None else body.content)
    per_token = llm.pooling_type() == lib.LLAMA_POOLING_TYPE_NONE
    work = run_in_threadpool(
        llm.create_embedding, inputs, normalize=not per_token, truncate=False, output_format=output_format
    )
    with served.ticket():
        return await awaited(request, work), per_token
