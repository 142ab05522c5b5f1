"""The Responses API's routes: create (whole or streamed), count input tokens, get and delete."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from llama_ffi.server import handling
from llama_ffi.server.handling import parse
from llama_ffi.server.responses import custom_tools
from llama_ffi.server.responses.convert import chat_body
from llama_ffi.server.responses.output import history_message, output_items, response
from llama_ffi.server.responses.protocol import ResponsesRequest, Store
from llama_ffi.server.responses.stream import Stream, events
from llama_ffi.server.served import ServedDep
from llama_ffi.server.streaming import EventStream

router = APIRouter()


def store_of(request: Request) -> Store:
    """The responses this app keeps (made with its first request: the API owns its state)."""
    state = request.app.state
    if getattr(state, "responses_store", None) is None:
        state.responses_store = Store()
    return state.responses_store


StoreDep = Annotated[Store, Depends(store_of)]


def conversation_of(body, store: Store) -> list[dict]:
    return store.get(body.previous_response_id)[1] if body.previous_response_id else []


@router.post("/v1/responses")
@router.post("/responses")
async def create(request: Request, served: ServedDep, store: StoreDep):
    body = await parse(request, ResponsesRequest)
    llm = served.accept(body)
    rid = f"resp_{uuid.uuid4().hex}"
    result, release, messages = await handling.chat(request, served, llm, chat_body(body, conversation_of(body, store)))
    if not body.stream:
        release()
        choice = result["choices"][0]
        out = response(
            rid,
            body,
            served.model_id,
            output_items(choice["message"], custom_tools.names(body.tools)),
            result["usage"],
            "completed",
            choice["finish_reason"],
        )
        if body.store:
            store.put(out, messages + [history_message(choice["message"])])
        served.metrics.finished(result.get("usage"))
        return out
    return EventStream(events(Stream(rid, body, served.model_id), result, body, store, messages), release)


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens")
async def input_tokens(request: Request, served: ServedDep, store: StoreDep):
    """The prompt tokens the request would use (its input, instructions and tools)."""
    body = await parse(request, ResponsesRequest)
    count = handling.prompt_tokens(served.accept(body), chat_body(body, conversation_of(body, store)))
    return {"object": "response.input_tokens", "input_tokens": count}


@router.get("/v1/responses/{rid}")
async def get(rid: str, store: StoreDep):
    return store.get(rid)[0]


@router.delete("/v1/responses/{rid}")
async def delete(rid: str, store: StoreDep):
    store.delete(rid)
    return {"id": rid, "object": "response", "deleted": True}
