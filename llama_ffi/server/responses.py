"""OpenAI's Responses API (``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``), which
Codex and the Agents SDK speak. ``input`` (a text or a list of items: messages, ``function_call`` and
``function_call_output``) and ``instructions`` become a chat request; the answer is a ``response``
whose ``output`` holds a message and the function calls, or the event stream ``response.created``
… ``response.completed``. Beyond llama-server, ``previous_response_id`` works: responses are kept
(bounded, in memory; ``store: false`` keeps none) and a follow-up continues the stored conversation,
whose prefix the slots still hold."""

from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from pydantic import Field, StrictBool, StrictInt, StrictStr

from llama_ffi.server import handling
from llama_ffi.server.errors import ApiError, from_library
from llama_ffi.server.handling import parse
from llama_ffi.server.schemas import Body
from llama_ffi.server.streaming import Clock, EventStream

KEPT = 1024  # stored responses (least recently stored go first)


class ResponsesRequest(Body):
    model: StrictStr | None = None
    input: StrictStr | list[dict[str, Any]] = ""
    instructions: StrictStr | None = None
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    stream: StrictBool = False
    store: StrictBool = True
    previous_response_id: StrictStr | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = True
    timings_per_token: StrictBool = False  # llama-server's: speeds on text deltas and the end
    return_progress: StrictBool = False  # llama-server's: prompt progress on response.in_progress


class Store:
    """Responses kept for ``previous_response_id`` and ``GET``: the response and the conversation
    up to and including it (as chat messages)."""

    def __init__(self, limit: int = KEPT) -> None:
        self.limit = limit
        self._items: collections.OrderedDict[str, tuple[dict, list[dict]]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def put(self, response: dict, conversation: list[dict]) -> None:
        with self._lock:
            self._items[response["id"]] = (response, conversation)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[dict, list[dict]]:
        with self._lock:
            found = self._items.get(rid)
        if found is None:
            raise ApiError(
                404,
                f"no response with id {rid!r} (it was not stored, or it was deleted)",
                "previous_response_id",
                "not_found",
            )
        return found

    def delete(self, rid: str) -> None:
        with self._lock:
            if self._items.pop(rid, None) is None:
                raise ApiError(404, f"no response with id {rid!r}", None, "not_found")


def _content(content, where: str):
    """An input message's content as chat content: text, or parts with images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of parts", "input")
    parts = []
    for p, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise ApiError(400, f"{where}.content[{p}]: a {kind!r} part is not supported", "input")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def input_messages(items) -> list[dict]:
    """The request's ``input`` as chat messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ApiError(400, f"{where}.role must be user, assistant, system or developer", "input")
            out.append(
                {"role": "system" if role == "developer" else role, "content": _content(item.get("content"), where)}
            )
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise ApiError(400, f"{where}: a function_call needs call_id, name and arguments", "input")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ApiError(400, f"{where}: a function_call_output needs its call_id", "input")
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind == "reasoning":
            continue
        else:
            raise ApiError(400, f"{where}: an item of type {kind!r} is not supported", "input")
    return out


def _tools(tools) -> list[dict] | None:
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise ApiError(400, f"tools[{i}]: only function tools are supported", "tools")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def output_items(reply: dict) -> list[dict]:
    out = []
    if reply.get("reasoning_content"):
        out.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reply["reasoning_content"]}],
            }
        )
    if reply.get("content") or not reply.get("tool_calls"):
        out.append(_message_item(reply.get("content") or ""))
    for call in reply.get("tool_calls") or []:
        out.append(_call_item(call["id"], call["function"]["name"], call["function"]["arguments"]))
    return out


def _message_item(text: str, status: str = "completed", mid: str | None = None) -> dict:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    )
    return {
        "type": "message",
        "id": mid or f"msg_{uuid.uuid4().hex}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call_item(call_id: str, name: str, arguments: str, status: str = "completed", fid: str | None = None) -> dict:
    return {
        "type": "function_call",
        "id": fid or f"fc_{uuid.uuid4().hex}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response(
    rid: str, body, model: str, output: list[dict], usage: dict | None, status: str, finish: str | None
) -> dict:
    incomplete = {"reason": "max_output_tokens"} if finish == "length" else None
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete and status == "completed" else status,
        "model": model,
        "output": output,
        "usage": _usage(usage) if usage else None,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "previous_response_id": body.previous_response_id,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tools": body.tools or [],
        "tool_choice": body.tool_choice or "auto",
        "parallel_tool_calls": body.parallel_tool_calls,
        "store": body.store,
        "text": body.text or {"format": {"type": "text"}},
        "metadata": body.metadata or {},
    }


def _usage(usage: dict) -> dict:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
    }


def chat_body(body, history: list[dict]) -> dict:
    messages = list(history)
    if body.instructions:  # instructions are not carried over from a previous response
        messages = [m for m in messages if m["role"] != "system"]
        messages.insert(0, {"role": "system", "content": body.instructions})
    messages += input_messages(body.input)
    if not messages:
        raise ApiError(400, "input is empty", "input")
    out: dict = {"messages": messages, "stream": body.stream, "return_progress": body.return_progress}
    if body.max_output_tokens is not None:
        out["max_tokens"] = body.max_output_tokens
    for name in ("temperature", "top_p"):
        if getattr(body, name) is not None:
            out[name] = getattr(body, name)
    tools = _tools(body.tools)
    if tools:
        out["tools"] = tools
        out["parallel_tool_calls"] = body.parallel_tool_calls
        if body.tool_choice is not None:
            out["tool_choice"] = _tool_choice(body.tool_choice)
    fmt = (body.text or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        out["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {}}}
    elif fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    return out


class Stream:
    """OpenAI chat chunks as the Responses stream's events, numbered."""

    def __init__(self, rid: str, body, model: str) -> None:
        self.rid, self.body, self.model = rid, body, model
        self.sequence = 0
        self.items: list[dict] = []
        self.text_item: int | None = None
        self.calls: dict[int, int] = {}  # chat tool call index -> output index
        self.text = ""
        self.clock, self.progress, self.produced = Clock(), None, 0

    def timings(self, usage: dict | None = None) -> dict:
        """llama-server's speeds so far: the prompt's (from its progress, or the usage at the end)."""
        if usage is not None:
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            return self.clock.timings(usage["prompt_tokens"], usage["completion_tokens"], cached)
        progress = self.progress or {"total": 0, "cache": 0}
        return self.clock.timings(progress["total"], self.produced, progress["cache"])

    def event(self, kind: str, **payload) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **payload}
        if self.body.timings_per_token and kind == "response.output_text.delta":
            data["timings"] = self.timings()
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    def shell(self, status: str, usage=None, finish=None) -> dict:
        return response(self.rid, self.body, self.model, self.items, usage, status, finish)

    def close_text(self) -> list[bytes]:
        if self.text_item is None:
            return []
        i, item = self.text_item, self.items[self.text_item]
        part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
        item.update(status="completed", content=[part])
        self.text_item = None
        return [
            self.text_event("response.output_text.done", i, text=self.text, logprobs=[]),
            self.text_event("response.content_part.done", i, part=part),
            self.event("response.output_item.done", output_index=i, item=item),
        ]

    def text_event(self, kind: str, i: int, **payload) -> bytes:
        """An event about the text part of the message item at output index ``i``."""
        return self.event(kind, item_id=self.items[i]["id"], output_index=i, content_index=0, **payload)

    def text_delta(self, text: str) -> list[bytes]:
        out = []
        if self.text_item is None:
            self.items.append(_message_item("", "in_progress"))
            self.text_item = len(self.items) - 1
            out.append(self.event("response.output_item.added", output_index=self.text_item, item=self.items[-1]))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self.text_event("response.content_part.added", self.text_item, part=part))
        self.text += text
        self.clock.tick()
        self.produced += 1
        out.append(self.text_event("response.output_text.delta", self.text_item, delta=text, logprobs=[]))
        return out

    def call_delta(self, call: dict) -> list[bytes]:
        out = []
        slot = call.get("index", 0)
        if slot not in self.calls:
            out += self.close_text()
            function = call.get("function") or {}
            self.items.append(
                _call_item(call.get("id") or f"call_{uuid.uuid4().hex}", function.get("name") or "", "", "in_progress")
            )
            self.calls[slot] = len(self.items) - 1
            out.append(self.event("response.output_item.added", output_index=self.calls[slot], item=self.items[-1]))
        i = self.calls[slot]
        fragment = (call.get("function") or {}).get("arguments") or ""
        if fragment:
            self.items[i]["arguments"] += fragment
            out.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=self.items[i]["id"],
                    output_index=i,
                    delta=fragment,
                )
            )
        return out

    def close_calls(self) -> list[bytes]:
        out = []
        for i in self.calls.values():
            item = self.items[i]
            item["status"] = "completed"
            out.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=i,
                    arguments=item["arguments"],
                )
            )
            out.append(self.event("response.output_item.done", output_index=i, item=item))
        self.calls = {}
        return out


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
                store.put(out, messages + [_history_message(choice["message"])])
            served.metrics.finished(result.get("usage"))
            return out
        return EventStream(_events(Stream(rid, body, served.model_id), result, body, store, messages), release)

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


def _history_message(reply: dict) -> dict:
    message = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("tool_calls"):
        message["tool_calls"] = reply["tool_calls"]
    return message


async def _events(
    stream: Stream, chunks: AsyncIterator[dict], body, store: Store, messages: list[dict]
) -> AsyncIterator[bytes]:
    yield stream.event("response.created", response=stream.shell("in_progress"))
    yield stream.event("response.in_progress", response=stream.shell("in_progress"))
    usage, finish = None, None
    try:
        async for chunk in chunks:
            if "prompt_progress" in chunk:
                stream.progress = chunk["prompt_progress"]
                shell = stream.shell("in_progress")
                yield stream.event("response.in_progress", response=shell, prompt_progress=stream.progress)
                continue
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    for e in stream.text_delta(delta["content"]):
                        yield e
                for call in delta.get("tool_calls") or []:
                    for e in stream.call_delta(call):
                        yield e
                finish = choice.get("finish_reason") or finish
        for e in stream.close_text() + stream.close_calls():
            yield e
        final = stream.shell("completed", usage, finish)
        if body.store:
            calls = [  # the history's calls, from the stream's own function_call items
                {"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
                for i in stream.items
                if i["type"] == "function_call"
            ]
            reply = {"content": stream.text, "tool_calls": calls or None}
            store.put(final, messages + [_history_message(reply)])
        timings = {"timings": stream.timings(usage)} if body.timings_per_token and usage else {}
        yield stream.event("response.completed", response=final, **timings)
    except Exception as error:  # noqa: BLE001 - the client sees it as an event
        shaped = from_library(error)
        yield stream.event("error", code=shaped.code, message=shaped.message, param=shaped.param)
