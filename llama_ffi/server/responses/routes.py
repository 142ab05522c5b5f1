"""The Responses API's routes: create (whole or streamed), count input tokens, get and delete."""

from __future__ import annotations

import uuid

from fastapi import FastAPI, Request

from llama_ffi.server import handling
from llama_ffi.server.handling import parse
from llama_ffi.server.responses.convert import chat_body
from llama_ffi.server.responses.output import history_message, output_items, response
from llama_ffi.server.responses.protocol import ResponsesRequest, Store
from llama_ffi.server.responses.stream import Stream, events
from llama_ffi.server.streaming import EventStream


def add_routes(app: FastAPI, served) -> None:
    store = Store()

    def conversation_of(body) -> list[dict]:
        return store.get(body.previous_response_id)[1] if body.previous_response_id else []

    @app.post("/v1/responses")
    @app.post("/responses")
    async def create(request: Request):
        body = await parse(request, ResponsesRequest)
        llm = served.accept(body)
        rid = f"resp_{uuid.uuid4().hex}"
        result, release, messages = await handling.chat(request, served, llm, chat_body(body, conversation_of(body)))
        if not body.stream:
            release()
            choice = result["choices"][0]
            out = response(
                rid,
                body,
                served.model_id,
                output_items(choice["message"]),
                result["usage"],
                "completed",
                choice["finish_reason"],
            )
            if body.store:
                store.put(out, messages + [history_message(choice["message"])])
            served.metrics.finished(result.get("usage"))
            return out
        return EventStream(events(Stream(rid, body, served.model_id), result, body, store, messages), release)

    @app.post("/v1/responses/input_tokens")
    @app.post("/responses/input_tokens")
    async def input_tokens(request: Request):
        """The prompt tokens the request would use (its input, instructions and tools)."""
        body = await parse(request, ResponsesRequest)
        count = handling.prompt_tokens(served.accept(body), chat_body(body, conversation_of(body)))
        return {"object": "response.input_tokens", "input_tokens": count}

    @app.get("/v1/responses/{rid}")
    async def get(rid: str):
        return store.get(rid)[0]

    @app.delete("/v1/responses/{rid}")
    async def delete(rid: str):
        store.delete(rid)
        return {"id": rid, "object": "response", "deleted": True}
