"""Chat chunks as the Responses API's event stream (``response.created`` … ``response.completed``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

from llama_ffi.server.errors import from_library
from llama_ffi.server.responses import custom_tools
from llama_ffi.server.responses.output import (
    as_custom,
    call_item,
    history_calls,
    history_message,
    message_item,
    response,
)
from llama_ffi.server.responses.protocol import Store
from llama_ffi.server.streaming import Clock


class Stream:
    """OpenAI chat chunks as the Responses stream's events, numbered."""

    def __init__(self, rid: str, body, model: str) -> None:
        self.rid, self.body, self.model = rid, body, model
        self.sequence = 0
        self.items: list[dict] = []
        self.text_item: int | None = None
        self.calls: dict[int, int] = {}  # chat tool call index -> output index
        self.custom = custom_tools.names(body.tools)
        self.custom_arguments: dict[int, str] = {}  # output index -> the arguments carrying its input
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
            self.items.append(message_item("", "in_progress"))
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
            call_id = call.get("id") or f"call_{uuid.uuid4().hex}"
            item = call_item(call_id, function.get("name") or "", "", "in_progress")
            if item["name"] in self.custom:
                self.custom_arguments[len(self.items)] = ""
                item = as_custom(item)
            self.items.append(item)
            self.calls[slot] = len(self.items) - 1
            out.append(self.event("response.output_item.added", output_index=self.calls[slot], item=self.items[-1]))
        i = self.calls[slot]
        fragment = (call.get("function") or {}).get("arguments") or ""
        if fragment and i in self.custom_arguments:  # its input is sent whole once the call closes
            self.custom_arguments[i] += fragment
        elif fragment:
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
            if i in self.custom_arguments:
                out += self.close_custom(i)
                continue
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

    def close_custom(self, i: int) -> list[bytes]:
        """A custom tool's call, its input decoded from the function arguments that carried it."""
        item = self.items[i]
        item["input"] = custom_tools.input_of(self.custom_arguments.pop(i))
        where = {"item_id": item["id"], "output_index": i}
        return [
            self.event("response.custom_tool_call_input.delta", delta=item["input"], **where),
            self.event("response.custom_tool_call_input.done", input=item["input"], **where),
            self.event("response.output_item.done", output_index=i, item=item),
        ]


async def events(
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
            calls = history_calls(stream.items)  # the history's calls, from the stream's own items
            reply = {"content": stream.text, "tool_calls": calls or None}
            store.put(final, messages + [history_message(reply)])
        timings = {"timings": stream.timings(usage)} if body.timings_per_token and usage else {}
        yield stream.event("response.completed", response=final, **timings)
    except Exception as error:  # noqa: BLE001 - the client sees it as an event
        shaped = from_library(error)
        yield stream.event("error", code=shaped.code, message=shaped.message, param=shaped.param)
