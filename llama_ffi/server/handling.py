"""What every route does with a request: its body parsed by a schema, the library call awaited
(cancelled if the client goes away), the library's errors shaped for the client."""

from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel, ValidationError

from llama_ffi.server import errors
from llama_ffi.server.errors import ApiError, ClientGone
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
