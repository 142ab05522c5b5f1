"""A chat answer in the Messages API's shapes: a ``message``, or the event stream ``message_start`` …
``message_stop`` with text, thinking and ``tool_use`` blocks."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

from llama_ffi.server import errors

STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


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
