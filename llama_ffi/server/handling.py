"""What every route does with a request: its body parsed by a schema, the library call awaited
(cancelled if the client goes away), the library's errors shaped for the client."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from fastapi import Request
from pydantic import BaseModel, ValidationError

from llama_ffi.high.chat.completion import chat_prompt
from llama_ffi.server import errors, params
from llama_ffi.server.errors import ApiError, ClientGone
from llama_ffi.server.schemas import ChatRequest
from llama_ffi.server.streaming import unless_disconnected


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
    kwargs = params.chat_kwargs(llm, request_body, served.options)
    kwargs["model"] = served.model_id
    work = llm.acreate_chat_completion(request_body.messages, stream=request_body.stream, **kwargs)
    result, release = await held(request, served, work)
    return result, release, request_body.messages


def prompt_tokens(llm, chat: dict) -> int:
    """The prompt tokens of a translated chat request: its messages and tools through the template."""
    try:
        return chat_prompt(llm, chat["messages"], tools=chat.get("tools"))[1]
    except (ValueError, TypeError) as error:
        raise errors.from_library(error) from None
