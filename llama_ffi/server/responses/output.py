"""A chat reply as the Responses API's output items and ``response`` object."""

from __future__ import annotations

import time
import uuid

from llama_ffi.server.responses import custom_tools


def output_items(reply: dict, custom: set[str]) -> list[dict]:
    """The reply's items; calls of the ``custom`` tools as ``custom_tool_call`` items."""
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
        out.append(message_item(reply.get("content") or ""))
    for call in reply.get("tool_calls") or []:
        item = call_item(call["id"], call["function"]["name"], call["function"]["arguments"])
        out.append(as_custom(item) if item["name"] in custom else item)
    return out


def message_item(text: str, status: str = "completed", mid: str | None = None) -> dict:
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


def call_item(call_id: str, name: str, arguments: str, status: str = "completed", fid: str | None = None) -> dict:
    return {
        "type": "function_call",
        "id": fid or f"fc_{uuid.uuid4().hex}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def as_custom(item: dict) -> dict:
    """A ``function_call`` item of a custom tool as its ``custom_tool_call`` item."""
    return {
        "type": "custom_tool_call",
        "id": item["id"].replace("fc_", "ctc_", 1),
        "call_id": item["call_id"],
        "name": item["name"],
        "input": custom_tools.input_of(item["arguments"]),
        "status": item["status"],
    }


def history_calls(items: list[dict]) -> list[dict]:
    """The chat calls of a response's call items (a custom tool's input as its function's arguments)."""
    return [
        {
            "id": i["call_id"],
            "type": "function",
            "function": {
                "name": i["name"],
                "arguments": i["arguments"] if i["type"] == "function_call" else custom_tools.arguments(i["input"]),
            },
        }
        for i in items
        if i["type"] in ("function_call", "custom_tool_call")
    ]


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


def history_message(reply: dict) -> dict:
    message = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("tool_calls"):
        message["tool_calls"] = reply["tool_calls"]
    return message
