"""The Messages API's routes, as module-level handlers on one ``APIRouter``."""

from __future__ import annotations

from fastapi import APIRouter, Request

from llama_ffi.server import handling
from llama_ffi.server.anthropic.convert import chat_body
from llama_ffi.server.anthropic.output import events, message
from llama_ffi.server.anthropic.protocol import CountRequest, MessagesRequest
from llama_ffi.server.handling import parse
from llama_ffi.server.served import ServedDep
from llama_ffi.server.streaming import EventStream

router = APIRouter()


@router.post("/v1/messages")
async def messages(request: Request, served: ServedDep):
    body = await parse(request, MessagesRequest)
    llm = served.accept(body)
    chat = chat_body(body)
    # message_start tells the prompt's length before the first token (as Anthropic's API does)
    input_tokens = handling.prompt_tokens(llm, chat) if body.stream else 0
    result, release, _ = await handling.chat(request, served, llm, {**chat, "stream": body.stream})
    if not body.stream:
        release()
        served.metrics.finished(result.get("usage"))
        return message(result, served.model_id)
    return EventStream(events(result, served.model_id, input_tokens), release)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request, served: ServedDep):
    body = await parse(request, CountRequest)
    return {"input_tokens": handling.prompt_tokens(served.accept(body), chat_body(body))}
