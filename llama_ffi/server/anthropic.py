"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``), which Claude Code
and other agent tools speak: a request becomes the OpenAI chat request it means (system prompt,
turns, images, tools and tool results, stop sequences, thinking), the library answers it, and the
answer goes back in Anthropic's shapes — a ``message``, or the event stream ``message_start`` …
``message_stop`` with text, thinking and ``tool_use`` blocks."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from pydantic import Field, StrictBool, StrictInt, StrictStr

from llama_ffi.server import errors, handling
from llama_ffi.server.errors import ApiError
from llama_ffi.server.handling import parse
from llama_ffi.server.schemas import Body
from llama_ffi.server.streaming import EventStream

STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


class MessagesRequest(Body):
    model: StrictStr | None = None
    max_tokens: StrictInt = Field(ge=1)
    messages: list[dict[str, Any]]  # may be empty, as llama-server allows: the model starts the talk
    system: StrictStr | list[dict[str, Any]] | None = None
    stop_sequences: list[StrictStr] | None = None
    stream: StrictBool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: StrictInt | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None


class CountRequest(Body):
    model: StrictStr | None = None
    messages: list[dict[str, Any]]
    system: StrictStr | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


def _text_of(blocks, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise ApiError(400, f"{where} must be a string or a list of text blocks", where)
    out = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise ApiError(400, f"{where}[{i}] must be a text block", where)
        out.append(block["text"])
    return "".join(out)


def _result_of(blocks, where: str) -> str | list[dict]:
    """A tool result's content: its text, or text and image parts (a tool that read an image)."""
    if not isinstance(blocks, list) or not any(isinstance(b, dict) and b.get("type") == "image" for b in blocks):
        return _text_of(blocks, where)
    parts = []
    for i, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("type") == "image":
            parts.append(_image(block, f"{where}[{i}]"))
        else:
            parts.append({"type": "text", "text": _text_of([block], f"{where}[{i}]")})
    return parts


def _image(block: dict, where: str) -> dict:
    source = block.get("source")
    if not isinstance(source, dict):
        raise ApiError(400, f"{where}.source is required", where)
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type')};base64,{source['data']}"}}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}  # refused later unless allowed
    raise ApiError(400, f"{where}.source must be base64 data or a url", where)


def _turn(message: dict, m: int) -> list[dict]:
    """One Anthropic turn as OpenAI messages: tool results become tool messages (first), tool_use
    blocks the assistant's tool_calls."""
    where = f"messages[{m}]"
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise ApiError(400, f"{where}.role must be user or assistant", where)
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of blocks", where)
    parts, calls, results, thinking = [], [], [], []
    for b, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        here = f"{where}.content[{b}]"
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append(_image(block, here))
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise ApiError(400, f"{here}: tool_use needs an id and a name", here)
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            )
        elif kind == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise ApiError(400, f"{here}: tool_result needs its tool_use_id", here)
            result = _result_of(block.get("content") or "", here + ".content")
            if block.get("is_error"):
                result = (
                    f"Error: {result}" if isinstance(result, str) else [{"type": "text", "text": "Error: "}, *result]
                )
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        elif kind == "thinking" and role == "assistant" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])  # the template decides whether the model sees it again
        elif kind == "redacted_thinking" and role == "assistant":
            continue  # encrypted by Anthropic: nothing a local model can read
        else:
            raise ApiError(400, f"{here}: a {kind!r} block is not allowed in a {role} turn", here)
    out = list(results)
    if parts or calls or thinking or not results:
        text_only = all(p["type"] == "text" for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        message_out: dict = {"role": role, "content": body}
        if calls:
            message_out["tool_calls"] = calls
        if thinking:
            message_out["reasoning_content"] = "\n\n".join(thinking)
        out.append(message_out)
    return out


def chat_body(body) -> dict:
    """The OpenAI chat request an Anthropic one means."""
    messages = []
    if body.system:
        messages.append({"role": "system", "content": _text_of(body.system, "system")})
    for m, message in enumerate(body.messages):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{m}] must be an object", "messages")
        messages += _turn(message, m)
    out: dict = {"messages": messages}
    if body.tools:
        out["tools"] = [_tool(t, i) for i, t in enumerate(body.tools)]
    if getattr(body, "tool_choice", None):
        out["tool_choice"] = _tool_choice(body.tool_choice)
    if body.tools:  # Anthropic's default: several calls, unless disable_parallel_tool_use
        out["parallel_tool_calls"] = not (getattr(body, "tool_choice", None) or {}).get("disable_parallel_tool_use")
    for name in ("max_tokens", "temperature", "top_p", "top_k", "stream"):
        value = getattr(body, name, None)
        if value is not None:
            out[name] = value
    if getattr(body, "stop_sequences", None):
        out["stop"] = body.stop_sequences
    thinking = getattr(body, "thinking", None) or {}
    if thinking.get("type") == "enabled" and isinstance(thinking.get("budget_tokens"), int):
        out["reasoning_budget"] = thinking["budget_tokens"]
    elif thinking.get("type") == "disabled":
        out["chat_template_kwargs"] = {"enable_thinking": False}
    return out


def _tool(tool: dict, i: int) -> dict:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise ApiError(400, f"tools[{i}] needs a name", "tools")
    function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: dict) -> Any:
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ApiError(400, "tool_choice must be auto, any, none, or {type: tool, name}", "tool_choice")


def _usage(usage: dict) -> dict:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"],
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def _stop(choice: dict) -> tuple[str, str | None]:
    matched = choice.get("stop_reason")
    if isinstance(matched, str):
        return "stop_sequence", matched
    return STOP_REASONS.get(choice["finish_reason"], "end_turn"), None


def message(result: dict, model: str) -> dict:
    """An OpenAI chat.completion as Anthropic's ``message``."""
    choice = result["choices"][0]
    reply = choice["message"]
    content: list[dict] = []
    if reply.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": reply["reasoning_content"], "signature": ""})
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    for call in reply.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": _input(call)})
    stop_reason, stop_sequence = _stop(choice)
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(result["usage"]),
    }


def _input(call: dict) -> dict:
    try:
        value = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def sse(kind: str, payload: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload}, ensure_ascii=False)}\n\n".encode()


async def events(chunks: AsyncIterator[dict], model: str, input_tokens: int) -> AsyncIterator[bytes]:
    """OpenAI chat chunks as Anthropic's stream: one block per kind of delta, opened when it starts
    and stopped when another starts or the message ends."""
    shell = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": model, "content": []}
    yield sse(
        "message_start",
        {
            "message": {
                **shell,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": _usage({"prompt_tokens": input_tokens, "completion_tokens": 0}),
            }
        },
    )
    index, open_kind, calls = -1, None, {}
    stop, usage = ("end_turn", None), None
    try:
        async for chunk in chunks:
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                delta = choice.get("delta") or {}
                for kind, key in (("thinking", "reasoning_content"), ("text", "content")):
                    if delta.get(key):
                        if open_kind != kind:
                            if open_kind is not None:
                                yield sse("content_block_stop", {"index": index})
                            index, open_kind = index + 1, kind
                            start = {"type": kind, kind: ""} if kind == "thinking" else {"type": "text", "text": ""}
                            yield sse("content_block_start", {"index": index, "content_block": start})
                        name = "thinking_delta" if kind == "thinking" else "text_delta"
                        yield sse("content_block_delta", {"index": index, "delta": {"type": name, kind: delta[key]}})
                for call in delta.get("tool_calls") or []:
                    slot = call.get("index", 0)
                    if slot not in calls:
                        if open_kind is not None:
                            yield sse("content_block_stop", {"index": index})
                        index, open_kind = index + 1, "tool_use"
                        calls[slot] = index
                        block = {
                            "type": "tool_use",
                            "id": call.get("id"),
                            "name": call["function"].get("name"),
                            "input": {},
                        }
                        yield sse("content_block_start", {"index": index, "content_block": block})
                    fragment = call.get("function", {}).get("arguments")
                    if fragment:
                        yield sse(
                            "content_block_delta",
                            {"index": calls[slot], "delta": {"type": "input_json_delta", "partial_json": fragment}},
                        )
                if choice.get("finish_reason"):
                    stop = _stop(choice)
        if open_kind is not None:
            yield sse("content_block_stop", {"index": index})
        out = _usage(usage) if usage else {"output_tokens": 0}
        yield sse("message_delta", {"delta": {"stop_reason": stop[0], "stop_sequence": stop[1]}, "usage": out})
        yield sse("message_stop", {})
    except Exception as error:  # noqa: BLE001 - the client sees it as an error event
        shaped = errors.from_library(error)
        yield sse("error", errors.anthropic_body(shaped.status, shaped.message))


def add_routes(app: FastAPI, served) -> None:
    @app.post("/v1/messages")
    async def messages(request: Request):
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

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request):
        body = await parse(request, CountRequest)
        return {"input_tokens": handling.prompt_tokens(served.accept(body), chat_body(body))}
